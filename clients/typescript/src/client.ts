// The client factory and the three ways of sending a request: once, retry
// (safe requests) and idempotent (an Idempotency-Key per logical
// operation, reused by its retries).
import createFetchClient, { type Client } from "openapi-fetch";
import type { components, paths } from "./schema.js";
import {
  DecodeError,
  IdempotencyInProgressProblem,
  NotHeldProblem,
  OutcomeUnknownError,
  problemFrom,
  RacefreeProblem,
  StaleFenceProblem,
  TransportError,
} from "./problems.js";
import { keep, type Kept, type KeepOptions } from "./keep.js";
import { Audit } from "./audit.js";
import { Events } from "./events.js";
import { Inbox } from "./inbox.js";
import { Outbox } from "./outbox.js";
import { Quotas } from "./quotas.js";
import { Sequences } from "./sequences.js";
import { Tokens } from "./tokens.js";

/** Claim is a claim as the server answers it (components.schemas.Claim). */
export type Claim = components["schemas"]["Claim"];

/** ClientOptions configures a client; only baseUrl is required. */
export interface ClientOptions {
  /** baseUrl is the server, http://host:port with an optional path prefix. */
  baseUrl: string;
  /**
   * apiKey is sent as "Authorization: Bearer <apiKey>": an API key
   * (racefree keys create) or serve's --token. Defaults to none.
   */
  apiKey?: string;
  /** attempts bounds the attempts of one retried call, the first included. Defaults to 5. */
  attempts?: number;
  /**
   * backoffMs is the wait before the second attempt; it doubles with each
   * further one, and a Retry-After the server sends is honoured up to
   * maxBackoffMs. Defaults to 100.
   */
  backoffMs?: number;
  /** maxBackoffMs bounds any one wait between attempts. Defaults to 2000. */
  maxBackoffMs?: number;
  /** fetch sends the requests. Defaults to globalThis.fetch. */
  fetch?: (request: Request) => Promise<Response>;
}

/** CallOptions are the options of one logical call. */
export interface CallOptions {
  /** signal aborts the call: its attempt in flight and the waits between attempts. */
  signal?: AbortSignal;
}

/** IdempotentOptions are the options of one idempotent call. */
export interface IdempotentOptions extends CallOptions {
  /**
   * key is the Idempotency-Key of the logical operation, for an operation
   * that must survive the caller's own restart (store the key with the
   * intent). Defaults to a new random key (newIdempotencyKey).
   */
  key?: string;
}

/**
 * PageOptions are the options of one page of a list: the entries after
 * the cursor `after` (the `next` of the page before; 0 or absent: from
 * the start), at most `limit` of them (the server's default when absent).
 */
export interface PageOptions extends CallOptions {
  /** after is the cursor: the previous page's next. Defaults to the start. */
  after?: string | number;
  /** limit bounds the page (1 to 1000). Defaults to the server's default (100). */
  limit?: number;
}

/**
 * Attempt is what one attempt of a call adds to the openapi-fetch request:
 * spread it into the request's options (`{ params, body, ...attempt }`).
 */
export type Attempt = {
  headers: Record<string, string>;
  signal?: AbortSignal;
  /** fetch is the client's fetch, which throws a DecodeError for a whole 2xx reply that is not the route's answer. */
  fetch: (request: Request) => Promise<Response>;
};

/** Answer is what an openapi-fetch call resolves to. */
export interface Answer {
  data?: unknown;
  error?: unknown;
  response: Response;
}

/** DataOf is the body of a successful answer (undefined for 204). */
export type DataOf<R extends Answer> = [NonNullable<R["data"]>] extends [never] ? undefined : NonNullable<R["data"]>;

// Web Crypto: a global in browsers and Node 19 on, node:crypto's in Node 18.
const webcrypto: { randomUUID(): string } = globalThis.crypto ?? (await import("node:crypto")).webcrypto;

/** newIdempotencyKey returns a random key (32 hex digits) for one logical operation. */
export function newIdempotencyKey(): string {
  return webcrypto.randomUUID().replaceAll("-", "");
}

/**
 * idempotencyHeader returns the Idempotency-Key header value of key: a
 * Structured Field string (quoted). A key that is not 1 to 255 printable
 * ASCII characters is a RangeError, before anything is sent.
 */
export function idempotencyHeader(key: string): string {
  if (key.length < 1 || key.length > 255 || !/^[\x20-\x7e]+$/.test(key)) {
    throw new RangeError(`racefree: an Idempotency-Key must be 1 to 255 printable ASCII characters, got ${JSON.stringify(key)}`);
  }
  return `"${key.replace(/[\\"]/g, (c) => "\\" + c)}"`;
}

/**
 * retryable reports whether an answer may be retried with the same
 * request: the server was unavailable or busy (any 503, which wrote
 * nothing or whose outcome the Idempotency-Key settles), or the first
 * attempt of the same Idempotency-Key is still running.
 */
export function retryable(p: RacefreeProblem): boolean {
  return p.status === 503 || p instanceof IdempotencyInProgressProblem;
}

/**
 * decoding wraps fetch so that a whole 2xx reply with a body (not a 204)
 * that is not a JSON object, which is what every route of the server
 * answers, throws a DecodeError: a proxy's page, a blank body, JSON of
 * another shape. A body whose reading fails (the connection cut) rejects
 * as fetch does, a lost reply; so does one of no declared length (neither
 * Content-Length nor chunked) whose JSON ends early, since it ends where
 * the connection closed. Other replies pass unchanged.
 */
export function decoding(fetch: (request: Request) => Promise<Response>): (request: Request) => Promise<Response> {
  return async (request) => {
    const response = await fetch(request);
    if (!response.ok || response.status === 204 || request.method === "HEAD") return response;
    const text = await response.text();
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      if (cutShort(response, text, err)) {
        throw new TypeError(`racefree client: ${new URL(request.url).pathname} reply cut short: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
      throw new DecodeError(request, response, text, err);
    }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      throw new DecodeError(request, response, text, new TypeError(`the body is ${value === null ? "null" : Array.isArray(value) ? "an array" : typeof value}, not a JSON object`));
    }
    return new Response(text, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
}

/**
 * cutShort reports whether text, which JSON.parse refused with err, may be
 * a reply cut short that fetch could not tell from a whole one: a body of
 * no declared length ends where the connection closed, so one whose JSON
 * ends before its value does is a lost reply, not an answer.
 */
function cutShort(response: Response, text: string, err: unknown): boolean {
  if (response.headers.has("Content-Length") || /chunked/i.test(response.headers.get("Transfer-Encoding") ?? "")) return false;
  if (text.trim() === "") return true;
  const message = err instanceof Error ? err.message : "";
  if (/end of JSON input/i.test(message)) return true;
  const at = /at position (\d+)/.exec(message);
  return at !== null && Number(at[1]) >= text.length;
}

/**
 * RacefreeClient talks to a racefree server. `api` is the openapi-fetch
 * client typed by the generated schema (every route, as described by the
 * server's OpenAPI document), with the credential set; once, retry and
 * idempotent send one of its requests and return its body or throw the
 * answer's typed problem (a RacefreeProblem subclass) or TransportError.
 */
export class RacefreeClient {
  /** api is the typed openapi-fetch client: api.POST("/v1/claims/{key}", …) answers { data, error, response }. */
  readonly api: Client<paths>;
  /** claims are the claim routes, with the heartbeat. */
  readonly claims: Claims;
  /** events are the event de-duplication routes (observe, record). */
  readonly events: Events;
  /** sequences are the gapless counters. */
  readonly sequences: Sequences;
  /** tokens are the one-time codes and refresh tokens. */
  readonly tokens: Tokens;
  /** quotas are the atomic quotas and rate limits. */
  readonly quotas: Quotas;
  /** audit is the tamper-evident audit log. */
  readonly audit: Audit;
  /** outbox is the transactional outbox: enqueue, and the dead letters. */
  readonly outbox: Outbox;
  /** inbox is the webhook inbox. */
  readonly inbox: Inbox;
  private readonly attempts: number;
  private readonly backoffMs: number;
  private readonly maxBackoffMs: number;
  private readonly fetch: (request: Request) => Promise<Response>;

  constructor(options: ClientOptions) {
    let base: URL;
    try {
      base = new URL(options.baseUrl);
    } catch {
      throw new TypeError(`racefree: baseUrl must be an http:// or https:// URL, got ${JSON.stringify(options.baseUrl)}`);
    }
    if (base.protocol !== "http:" && base.protocol !== "https:") {
      throw new TypeError(`racefree: baseUrl must be an http:// or https:// URL, got ${JSON.stringify(options.baseUrl)}`);
    }
    const headers: Record<string, string> = { Accept: "application/json, application/problem+json" };
    if (options.apiKey) headers.Authorization = `Bearer ${options.apiKey}`;
    this.api = createFetchClient<paths>({
      baseUrl: options.baseUrl.replace(/\/+$/, ""),
      headers,
      ...(options.fetch ? { fetch: options.fetch } : {}),
    });
    this.attempts = Math.max(1, options.attempts ?? 5);
    this.backoffMs = Math.max(1, options.backoffMs ?? 100);
    this.maxBackoffMs = Math.max(1, options.maxBackoffMs ?? 2000);
    this.fetch = decoding(options.fetch ?? ((request) => globalThis.fetch(request)));
    this.claims = new Claims(this);
    this.events = new Events(this);
    this.sequences = new Sequences(this);
    this.tokens = new Tokens(this);
    this.quotas = new Quotas(this);
    this.audit = new Audit(this);
    this.outbox = new Outbox(this);
    this.inbox = new Inbox(this);
  }

  /**
   * once sends the request once: for a POST without an Idempotency-Key
   * (issuing a token, rotating a refresh token), which a retry could run
   * twice. A connection failure is a TransportError.
   */
  once<R extends Answer>(send: (attempt: Attempt) => Promise<R>, options?: CallOptions): Promise<DataOf<R>> {
    return this.run(send, {}, 1, options?.signal);
  }

  /**
   * retry sends a safe request (a GET; a DELETE of a claim), retrying a
   * connection failure, a 503 and a 409 idempotency-in-progress with
   * backoff. unsettled, when given, picks the refusals an earlier attempt
   * that got no answer (a connection failure, a 503) may itself have
   * caused: such a refusal after such an attempt is thrown as an
   * OutcomeUnknownError, its cause the refusal.
   */
  retry<R extends Answer>(
    send: (attempt: Attempt) => Promise<R>,
    options?: CallOptions,
    unsettled?: (p: RacefreeProblem) => boolean,
  ): Promise<DataOf<R>> {
    return this.run(send, {}, this.attempts, options?.signal, unsettled);
  }

  /**
   * idempotent sends a state-changing POST with an Idempotency-Key made
   * once for the logical operation and sent again by each retry, so that
   * a retry after a lost reply is answered with what the server recorded
   * (the same claim, one charge, the same numbers) instead of running
   * twice. Retried as retry; a 422 idempotency-key-mismatch means the key
   * was used with another request.
   */
  async idempotent<R extends Answer>(send: (attempt: Attempt) => Promise<R>, options?: IdempotentOptions): Promise<DataOf<R>> {
    const header = idempotencyHeader(options?.key ?? newIdempotencyKey());
    return this.run(send, { "Idempotency-Key": header }, this.attempts, options?.signal);
  }

  private async run<R extends Answer>(
    send: (attempt: Attempt) => Promise<R>,
    headers: Record<string, string>,
    attempts: number,
    signal: AbortSignal | undefined,
    unsettled?: (p: RacefreeProblem) => boolean,
  ): Promise<DataOf<R>> {
    let wait = this.backoffMs;
    let unknown = false; // an earlier attempt may have been carried out
    for (let attempt = 1; ; attempt++) {
      signal?.throwIfAborted();
      let failure: RacefreeProblem | TransportError | undefined;
      let answer: R | undefined;
      try {
        answer = await send({ headers: { ...headers }, fetch: this.fetch, ...(signal ? { signal } : {}) });
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        // A DecodeError is a whole reply: the server answered, and may
        // have done the work. Not retried.
        if (err instanceof RacefreeProblem || err instanceof DecodeError) throw err;
        failure = new TransportError(`racefree client: no answer: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
      if (answer !== undefined) {
        if (answer.response.ok) return answer.data as DataOf<R>;
        const problem = problemFrom(answer.error, answer.response);
        if (!retryable(problem)) {
          if (unknown && unsettled?.(problem)) {
            throw new OutcomeUnknownError(`racefree client: outcome unknown, may have been done: an attempt got no answer, and a retry was then refused: ${problem.message}`, { cause: problem });
          }
          throw problem;
        }
        failure = problem;
      }
      if (failure === undefined) throw new Error("racefree client: unreachable");
      if (failure instanceof TransportError || failure.status === 503) unknown = true;
      if (attempt >= attempts) throw failure;
      const retryAfter = failure instanceof RacefreeProblem ? (failure.retryAfterMs ?? 0) : 0;
      await sleep(Math.min(Math.max(wait, retryAfter), this.maxBackoffMs), signal);
      wait *= 2;
    }
  }
}

/** createClient returns a client of the server at options.baseUrl; it does no I/O. */
export function createClient(options: ClientOptions): RacefreeClient {
  return new RacefreeClient(options);
}

/** Claims are the claim routes (claim.Store over HTTP). */
export class Claims {
  constructor(private readonly client: RacefreeClient) {}

  /**
   * acquire takes the claim on key for holder for ttlMs: it wins a free
   * key (the fence grows by one) or the caller's own live claim (the fence
   * kept), and otherwise throws a HeldProblem naming the live holder, fence
   * and expiry. A retry after a lost reply carries the same
   * Idempotency-Key and returns the caller's claim.
   */
  acquire(key: string, holder: string, ttlMs: number, options?: IdempotentOptions): Promise<Claim> {
    const { api } = this.client;
    return this.client.idempotent(
      (a) => api.POST("/v1/claims/{key}", { params: { path: { key } }, body: { holder, ttl_ms: ttlMs }, ...a }),
      options,
    );
  }

  /**
   * renew extends the live claim of (holder, fence) to now + ttlMs, the
   * fence kept: a StaleFenceProblem when another tenure began since, a
   * NotHeldProblem when the claim lapsed, was released or is not the caller's.
   */
  renew(key: string, holder: string, fence: number, ttlMs: number, options?: IdempotentOptions): Promise<Claim> {
    const { api } = this.client;
    return this.client.idempotent(
      (a) => api.POST("/v1/claims/{key}/renew", { params: { path: { key } }, body: { holder, fence, ttl_ms: ttlMs }, ...a }),
      options,
    );
  }

  /**
   * release ends the tenure of (holder, fence) now. It is sent without an
   * Idempotency-Key and retried after a lost reply (a connection failure,
   * a 503): the retry succeeds while no other tenure began. When one did,
   * the retry's refusal cannot tell whether the lost attempt released the
   * claim (and another holder took the free key) or the claim had been
   * taken over before: release then throws an OutcomeUnknownError (its
   * cause the StaleFenceProblem or NotHeldProblem), and the caller's
   * tenure is over either way. A refusal with no unanswered attempt
   * before it is thrown as it is.
   */
  async release(key: string, holder: string, fence: number, options?: CallOptions): Promise<void> {
    const { api } = this.client;
    await this.client.retry(
      (a) => api.DELETE("/v1/claims/{key}", { params: { path: { key }, query: { holder, fence } }, ...a }),
      options,
      (p) => p instanceof StaleFenceProblem || p instanceof NotHeldProblem,
    );
  }

  /** get reads the claim on key; a NotFoundProblem when there is none. */
  get(key: string, options?: CallOptions): Promise<Claim> {
    const { api } = this.client;
    return this.client.retry((a) => api.GET("/v1/claims/{key}", { params: { path: { key } }, ...a }), options);
  }

  /**
   * keep renews claim for ttlMs every ttlMs/3 and returns a signal aborted
   * the moment the claim is lost: a renewal refused (the reason is the
   * StaleFenceProblem or NotHeldProblem), or ttlMs passed since the last
   * renewal that succeeded without another succeeding, for instance while
   * the server was unreachable (the reason is a ClaimLapsedError). stop
   * ends the heartbeat; it does not release the claim. Pass the kept
   * signal to the work the claim guards.
   */
  keep(claim: Pick<Claim, "key" | "holder" | "fence">, ttlMs: number, options?: KeepOptions): Kept {
    const { key, holder, fence } = claim;
    return keep(key, fence, ttlMs, (signal) => this.renew(key, holder, fence, ttlMs, { signal }), options);
  }
}

/** sleep waits ms, or rejects with signal's reason when it is aborted first. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
