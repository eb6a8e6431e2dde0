// The transactional outbox over HTTP, as the Go client's Enqueue, Message,
// Dead, OutboxStats, Redrive and Discard (outbox.Outbox).
import type { CallOptions, IdempotentOptions, PageOptions, RacefreeClient } from "./client.js";
import { MaxPage, pages } from "./pages.js";
import type { components, operations } from "./schema.js";

/**
 * OutboxMessage is a message to enqueue: its topic (which routes it to a
 * relay's handler), an ordering key, a JSON payload or payload_base64
 * (any bytes), delivery headers, a delay (delay_ms or not_before), the
 * attempts before it is dead and whether it is ordered with its key.
 */
export type OutboxMessage = operations["post_v1_outbox"]["requestBody"]["content"]["application/json"];

/**
 * StoredMessage is a message as stored, in any state (ready, leased,
 * delivered, dead), with its attempts, its latest tenure's fence and
 * worker, and its latest failed attempts, oldest first, in history.
 */
export type StoredMessage = components["schemas"]["OutboxMessage"];

/** Enqueued is a stored message: its id, which is also the Idempotency-Key each delivery carries. */
export type Enqueued = operations["post_v1_outbox"]["responses"][200]["content"]["application/json"];

/** DeadMessage is a message that exhausted its attempts or failed permanently. */
export type DeadMessage = components["schemas"]["DeadMessage"];

/** DeadPage is one page of dead messages, by id; pass next as after for the next page. */
export type DeadPage = operations["get_v1_outbox_dead"]["responses"][200]["content"]["application/json"];

/** OutboxStats are the tenant's outbox figures: the backlog by state, the oldest pending message's age, dead and delivered. */
export type OutboxStats = operations["get_v1_outbox_stats"]["responses"][200]["content"]["application/json"];

/** RepairedMessage is a dead message redriven (state ready) or discarded. */
export type RepairedMessage = components["schemas"]["RepairedMessage"];

/** DeadOptions select a page of dead messages: only topic's, only key's, after the cursor, at most limit. */
export interface DeadOptions extends PageOptions {
  /** topic keeps only the dead messages of this topic. Defaults to every topic. */
  topic?: string;
  /** key keeps only the dead messages of this ordering key. Defaults to every key. */
  key?: string;
}

/** Outbox is the transactional outbox (outbox.Outbox over HTTP): enqueue, and the dead letters. */
export class Outbox {
  constructor(private readonly client: RacefreeClient) {}

  /**
   * enqueue stores message in the key's tenant's outbox for the relays
   * (POST /v1/outbox) and returns its id, the Idempotency-Key every
   * delivery carries. A retry after a lost reply carries the same
   * Idempotency-Key and returns the same id, enqueuing nothing more. Bad
   * input (a header named Racefree-*, both payload and payload_base64)
   * is an InvalidInputProblem, nothing stored.
   */
  enqueue(message: OutboxMessage, options?: IdempotentOptions): Promise<Enqueued> {
    const { api } = this.client;
    return this.client.idempotent((a) => api.POST("/v1/outbox", { body: message, ...a }), options);
  }

  /**
   * dead returns one page of the key's tenant's dead messages (GET
   * /v1/outbox/dead), by id, above options.after, filtered by topic and
   * key, at most options.limit and 4 MiB of JSON; page on with after set
   * to the page's next until a page has no messages: a short page is not
   * the end.
   */
  dead(options?: DeadOptions): Promise<DeadPage> {
    const { api } = this.client;
    const query = { topic: options?.topic, key: options?.key, after: options?.after as number | undefined, limit: options?.limit };
    return this.client.retry((a) => api.GET("/v1/outbox/dead", { params: { query }, ...a }), options);
  }

  /**
   * allDead yields the key's tenant's dead messages above options.after,
   * by id, filtered by topic and key, reading 1,000 a page (options.limit
   * is ignored) and paging on to the first empty page: `for await (const m
   * of rf.outbox.allDead({ topic: "mail" }))`. A page's error is thrown
   * and ends the loop; leaving the loop sends no further request.
   */
  async *allDead(options?: DeadOptions): AsyncGenerator<DeadMessage, void, undefined> {
    yield* pages(options?.after, async (after) => {
      const page = await this.dead({ ...options, after, limit: MaxPage });
      return { items: page.messages, next: page.next };
    });
  }

  /**
   * message returns the key's tenant's message id in any state, with its
   * latest failed attempts oldest first in history (GET
   * /v1/outbox/messages/{id}), as the Go client's Message. An id that is
   * not the tenant's, or was reaped or discarded, is a NotFoundProblem.
   */
  message(id: number, options?: CallOptions): Promise<StoredMessage> {
    const { api } = this.client;
    return this.client.retry((a) => api.GET("/v1/outbox/messages/{id}", { params: { path: { id } }, ...a }), options);
  }

  /** stats returns the key's tenant's outbox figures (GET /v1/outbox/stats). */
  stats(options?: CallOptions): Promise<OutboxStats> {
    const { api } = this.client;
    return this.client.retry((a) => api.GET("/v1/outbox/stats", a), options);
  }

  /**
   * redrive makes the dead message id due again at once with a fresh set
   * of attempts (POST /v1/outbox/dead/{id}/redrive, admin scope). A
   * message that is not dead, or not the tenant's, is a NotFoundProblem,
   * nothing changed; a retry after a lost reply carries the same
   * Idempotency-Key and gets the same answer.
   */
  redrive(id: number, options?: IdempotentOptions): Promise<RepairedMessage> {
    const { api } = this.client;
    return this.client.idempotent((a) => api.POST("/v1/outbox/dead/{id}/redrive", { params: { path: { id } }, ...a }), options);
  }

  /**
   * discard deletes the dead message id and its history (POST
   * /v1/outbox/dead/{id}/discard, admin scope). A message that is not
   * dead, or not the tenant's, is a NotFoundProblem.
   */
  discard(id: number, options?: IdempotentOptions): Promise<RepairedMessage> {
    const { api } = this.client;
    return this.client.idempotent((a) => api.POST("/v1/outbox/dead/{id}/discard", { params: { path: { id } }, ...a }), options);
  }
}
