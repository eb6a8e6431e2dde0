// Gapless counters over HTTP, as the Go client's Next (seq.Counters).
import type { IdempotentOptions, RacefreeClient } from "./client.js";
import type { operations } from "./schema.js";

/** Numbers are the numbers handed out: first … last, both included, of the counter scope/name. */
export type Numbers = operations["post_v1_sequences_scope_name_next"]["responses"][200]["content"]["application/json"];

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
}
