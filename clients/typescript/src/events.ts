// Event de-duplication over HTTP, as the Go client's Observe and Record
// (dedup.Log): of all the observers of one fingerprint in one window,
// exactly one processes it, and records the result under its fence.
import type { CallOptions, IdempotentOptions, RacefreeClient } from "./client.js";
import type { operations } from "./schema.js";

type ObserveBody = operations["post_v1_events"]["requestBody"]["content"]["application/json"];
type RecordBody = operations["post_v1_events_fingerprint_result"]["requestBody"]["content"]["application/json"];

/**
 * Event is one occurrence: its source, level and message, and its
 * fingerprint (its identity; absent or empty: the server derives it from
 * source, level and the normalised message).
 */
export type Event = Pick<ObserveBody, "source" | "level" | "message" | "fingerprint">;

/**
 * Observation is the server's answer to an occurrence: process is true
 * for exactly one observer of the fingerprint's window, which gets the
 * window's fence to pass to record; count, first_seen and last_seen are
 * the fingerprint's figures.
 */
export type Observation = operations["post_v1_events"]["responses"][200]["content"]["application/json"];

/** EventResult is the downstream result of a processed event: a classification and an external id, each optional. */
export type EventResult = Omit<RecordBody, "fence">;

/**
 * StoredEvent is an event as stored, with the result recorded for it and
 * result_fence, the fence it was recorded at (0: none recorded yet).
 */
export type StoredEvent = operations["get_v1_events_fingerprint"]["responses"][200]["content"]["application/json"];

/** RecordedResult is the result as stored, with the fingerprint and the fence it was recorded under. */
export type RecordedResult = operations["post_v1_events_fingerprint_result"]["responses"][200]["content"]["application/json"];

/** ObserveOptions are the options of observe. */
export interface ObserveOptions extends IdempotentOptions {
  /**
   * windowMs is the window of one fence, in whole milliseconds (1 to 30
   * days). Defaults to the server's (dedup.DefaultWindow, 5 minutes).
   */
  windowMs?: number;
}

/** Events are the event de-duplication routes (dedup.Log over HTTP). */
export class Events {
  constructor(private readonly client: RacefreeClient) {}

  /**
   * observe records one occurrence of event (POST /v1/events): of all the
   * observers of one fingerprint in one window, exactly one gets process
   * true and the window's fence, to pass to record once its downstream
   * work is done. A retry after a lost reply carries the same
   * Idempotency-Key and gets the same observation back, so the occurrence
   * is counted once and a won window is not lost. Bad input is an
   * InvalidInputProblem, nothing recorded.
   */
  observe(event: Event, options?: ObserveOptions): Promise<Observation> {
    const { api } = this.client;
    const body: ObserveBody = { source: event.source, level: event.level, message: event.message };
    if (event.fingerprint) body.fingerprint = event.fingerprint;
    if (options?.windowMs !== undefined) body.window_ms = options.windowMs;
    return this.client.idempotent((a) => api.POST("/v1/events", { body, ...a }), options);
  }

  /**
   * record writes the downstream result of fingerprint while fence is its
   * current fence (POST /v1/events/{fingerprint}/result): a
   * StaleFenceProblem (currentFence set) when a later window was won
   * since, a NotHeldProblem when fence was never issued, a NotFoundProblem
   * for an unknown (or reaped) fingerprint. Recording again at the same
   * fence overwrites the result; a retry after a lost reply carries the
   * same Idempotency-Key.
   */
  record(fingerprint: string, fence: number, result?: EventResult, options?: IdempotentOptions): Promise<RecordedResult> {
    const { api } = this.client;
    const body: RecordBody = { fence };
    if (result?.classification) body.classification = result.classification;
    if (result?.external_id) body.external_id = result.external_id;
    return this.client.idempotent(
      (a) => api.POST("/v1/events/{fingerprint}/result", { params: { path: { fingerprint } }, body, ...a }),
      options,
    );
  }

  /**
   * get returns the key's tenant's stored event and the result recorded for
   * it (GET /v1/events/{fingerprint}), as the Go client's Event. A
   * fingerprint never observed, or reaped, is a NotFoundProblem.
   */
  get(fingerprint: string, options?: CallOptions): Promise<StoredEvent> {
    const { api } = this.client;
    return this.client.retry((a) => api.GET("/v1/events/{fingerprint}", { params: { path: { fingerprint } }, ...a }), options);
  }
}
