// Atomic quotas and rate limits over HTTP, as the Go client's Consume
// (quota.Limiter).
import type { IdempotentOptions, RacefreeClient } from "./client.js";
import type { operations } from "./schema.js";

type ConsumeBody = operations["post_v1_quotas_key_consume"]["requestBody"]["content"]["application/json"];

/**
 * QuotaPolicy is a quota's policy: kind (gcra, a token bucket; window,
 * fixed windows; sliding_window), rate units per per_ms milliseconds, and
 * burst (gcra's bucket, required there).
 */
export type QuotaPolicy = ConsumeBody["policy"];

/**
 * QuotaDecision is an allowed charge: remaining is the units the key
 * could still be charged now, reset_at when it is back to its full limit.
 * A denial is not a decision but a QuotaExceededProblem.
 */
export type QuotaDecision = operations["post_v1_quotas_key_consume"]["responses"][200]["content"]["application/json"];

/** Quotas are the atomic quotas and rate limits (quota.Limiter over HTTP). */
export class Quotas {
  constructor(private readonly client: RacefreeClient) {}

  /**
   * consume charges n units (defaults to 1) to key under policy (POST
   * /v1/quotas/{key}/consume), deciding at once: an allowed charge
   * returns the decision (remaining, reset_at); a denial charges nothing
   * and is thrown as a QuotaExceededProblem (429) with the exact
   * retryAfterMs, remaining and resetAt, which is not retried. A retry
   * after a lost reply carries the same Idempotency-Key and is charged
   * once. The server fails closed: a database it cannot reach is a 503
   * (retried, then an UnavailableProblem), never an allowed charge.
   */
  consume(key: string, policy: QuotaPolicy, n = 1, options?: IdempotentOptions): Promise<QuotaDecision> {
    const { api } = this.client;
    return this.client.idempotent(
      (a) => api.POST("/v1/quotas/{key}/consume", { params: { path: { key } }, body: { n, policy }, ...a }),
      options,
    );
  }
}
