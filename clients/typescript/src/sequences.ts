// Gapless counters over HTTP, as the Go client's Next (seq.Counters).
import type { CallOptions, IdempotentOptions, RacefreeClient } from "./client.js";
import type { operations } from "./schema.js";

/** Numbers are the numbers handed out: first … last, both included, of the counter scope/name. */
export type Numbers = operations["post_v1_sequences_scope_name_next"]["responses"][200]["content"]["application/json"];

/** Current is the last number the counter scope/name handed out: 0 before the first. */
export type Current = operations["get_v1_sequences_scope_name"]["responses"][200]["content"]["application/json"];

/** Sequences are the gapless per-tenant counters (seq.Counters over HTTP). */
export class Sequences {
  constructor(private readonly client: RacefreeClient) {}

  /**
   * next hands out n consecutive numbers (1 to 1000000; defaults to 1) of
   * the gapless counter scope/name of the key's tenant (POST
   * /v1/sequences/{scope}/{name}/next): first … last. A retry after a
   * lost reply carries the same Idempotency-Key and gets the same numbers
   * back, so none is consumed twice and none is skipped. A counter at its
   * end is a SequenceExhaustedProblem; an n out of range an
   * InvalidInputProblem.
   */
  next(scope: string, name: string, n = 1, options?: IdempotentOptions): Promise<Numbers> {
    const { api } = this.client;
    return this.client.idempotent(
      (a) => api.POST("/v1/sequences/{scope}/{name}/next", { params: { path: { scope, name } }, body: { n }, ...a }),
      options,
    );
  }

  /**
   * current returns the last number the counter scope/name of the key's
   * tenant handed out, 0 before the first (GET
   * /v1/sequences/{scope}/{name}), as the Go client's Current. It takes no
   * lock: current + 1 is not the next number once another caller takes
   * one; use next.
   */
  current(scope: string, name: string, options?: CallOptions): Promise<Current> {
    const { api } = this.client;
    return this.client.retry((a) => api.GET("/v1/sequences/{scope}/{name}", { params: { path: { scope, name } }, ...a }), options);
  }
}
