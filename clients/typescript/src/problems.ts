// Typed errors of racefree's problem documents (RFC 9457): one class per
// problem type the server answers (the document's x-problems), each with
// the type, status, title, detail, the request's id and the extension
// members. The tests check that the classes and x-problems name the same
// types with the same statuses and titles.
import type { components } from "./schema.js";

/** ProblemDocument is the body of a problem answer, extension members included. */
export type ProblemDocument = components["schemas"]["Problem"] & Record<string, unknown>;

const prefix = "urn:racefree:problem:";

/**
 * RacefreeProblem is an answer of the server that is not a success: a
 * problem document, or (from a proxy) an answer without one. Subclasses
 * name each problem type; branch with `instanceof`.
 */
export class RacefreeProblem extends Error {
  /** problemType is the type URI the class stands for ("" on the base class). */
  static readonly problemType: string = "";
  /** type is the problem's type URI, e.g. "urn:racefree:problem:held" ("about:blank" without a problem document). */
  readonly type: string;
  readonly status: number;
  readonly title: string;
  readonly detail?: string;
  /** requestId is the server's id of the request (X-Request-Id), for its logs. */
  readonly requestId?: string;
  /**
   * retryAfterMs is when to retry: the member retry_after_ms when present
   * (quota-exceeded: exact), else the answer's Retry-After in milliseconds.
   */
  readonly retryAfterMs?: number;
  /** members is the whole problem document, extension members included. */
  readonly members: ProblemDocument;

  constructor(members: ProblemDocument, response?: Response) {
    const detail = typeof members.detail === "string" && members.detail !== "" ? members.detail : undefined;
    super(`racefree server: ${members.status} ${detail ?? members.title}`);
    this.name = new.target.name;
    this.members = members;
    this.type = members.type;
    this.status = members.status;
    this.title = members.title;
    this.detail = detail;
    this.requestId = members.request_id ?? response?.headers.get("X-Request-Id") ?? undefined;
    const after = response?.headers.get("Retry-After");
    if (typeof members.retry_after_ms === "number") this.retryAfterMs = members.retry_after_ms;
    else if (after && /^\d+$/.test(after)) this.retryAfterMs = Number(after) * 1000;
  }

  /** problemName is the last part of the type URI, e.g. "held". */
  get problemName(): string {
    return this.type.startsWith(prefix) ? this.type.slice(prefix.length) : this.type;
  }
}

function kind(name: string) {
  return class extends RacefreeProblem {
    static override readonly problemType: string = prefix + name;
  };
}

// 400
/** InvalidInputProblem: the request is malformed or a value is out of range; nothing was changed. */
export class InvalidInputProblem extends kind("invalid-input") {}
export class IdempotencyKeyMissingProblem extends kind("idempotency-key-missing") {}
/** IdempotencyKeyMalformedProblem: the Idempotency-Key is not a Structured Field string of 1 to 255 characters. */
export class IdempotencyKeyMalformedProblem extends kind("idempotency-key-malformed") {}
// 401, 403
/** UnauthorizedProblem: no valid credential (the client's apiKey), or a revoked one. */
export class UnauthorizedProblem extends kind("unauthorized") {}
export class BadSignatureProblem extends kind("bad-signature") {}
/** InsufficientScopeProblem: the API key lacks the route's scope (read, write, admin). */
export class InsufficientScopeProblem extends kind("insufficient-scope") {}
// 404, 405
/** NotFoundProblem: the claim, event, checkpoint or dead letter does not exist. */
export class NotFoundProblem extends kind("not-found") {}
export class NoRouteProblem extends kind("no-route") {}
export class UnknownSourceProblem extends kind("unknown-source") {}
export class MethodNotAllowedProblem extends kind("method-not-allowed") {}

// 409
/** HeldProblem: another holder's claim is live; holder, fence and expiresAt name it. */
export class HeldProblem extends kind("held") {
  get holder(): string | undefined {
    return this.members.holder;
  }
  get fence(): number | undefined {
    return this.members.fence;
  }
  get expiresAt(): Date | undefined {
    return this.members.expires_at ? new Date(this.members.expires_at) : undefined;
  }
}
/** NotHeldProblem: the claim is not the caller's: it lapsed, was released, or the fence was never issued. */
export class NotHeldProblem extends kind("not-held") {}
/** StaleFenceProblem: another tenure began since the caller's (fence) and holds currentFence. */
export class StaleFenceProblem extends kind("stale-fence") {
  get fence(): number | undefined {
    return this.members.fence;
  }
  get currentFence(): number | undefined {
    return this.members.current_fence;
  }
}
/** IdempotencyInProgressProblem: the first request with this Idempotency-Key still runs; retried. */
export class IdempotencyInProgressProblem extends kind("idempotency-in-progress") {}
export class SequenceExhaustedProblem extends kind("sequence-exhausted") {}
// 413, 415, 422
export class TooLargeProblem extends kind("too-large") {}
export class UnsupportedMediaTypeProblem extends kind("unsupported-media-type") {}
/** IdempotencyKeyMismatchProblem: the Idempotency-Key was used with another request. */
export class IdempotencyKeyMismatchProblem extends kind("idempotency-key-mismatch") {}
// 429
/** QuotaExceededProblem: the charge was refused and charged nothing; retry after retryAfterMs (exact), remaining, resetAt. */
export class QuotaExceededProblem extends kind("quota-exceeded") {
  get remaining(): number | undefined {
    return this.members.remaining;
  }
  get resetAt(): Date | undefined {
    return this.members.reset_at ? new Date(this.members.reset_at) : undefined;
  }
}
// 500, 503
export class InternalProblem extends kind("internal") {}
/** UnavailableProblem: the database is unavailable or busy; the outcome of a write is unknown (retried). */
export class UnavailableProblem extends kind("unavailable") {}
/** ReadOnlyProblem: the database node accepts no writes; the write wrote nothing (retried). */
export class ReadOnlyProblem extends kind("read-only") {}
/**
 * NotDurableProblem: the server runs in strict mode and no synchronous
 * standby would wait for the commit; the write wrote nothing (retried).
 */
export class NotDurableProblem extends kind("not-durable") {}
export class IdempotencyUnavailableProblem extends kind("idempotency-unavailable") {}
export class SchemaProblem extends kind("schema") {}
export class NotReadyProblem extends kind("not-ready") {}
// One-time codes and refresh tokens.
export class TokenUnknownProblem extends kind("token-unknown") {}
export class TokenUsedProblem extends kind("token-used") {}
export class TokenReusedProblem extends kind("token-reused") {}
export class TokenRevokedProblem extends kind("token-revoked") {}
export class TokenExpiredProblem extends kind("token-expired") {}
// The audit log.
export class AuditUnconfiguredProblem extends kind("audit-unconfigured") {}
export class AuditKeyMissingProblem extends kind("audit-key-missing") {}

/** problemClasses are the classes of every problem type, by type URI. */
export const problemClasses: ReadonlyMap<string, typeof RacefreeProblem> = new Map(
  [
    InvalidInputProblem, IdempotencyKeyMissingProblem, IdempotencyKeyMalformedProblem, UnauthorizedProblem,
    BadSignatureProblem, InsufficientScopeProblem, NotFoundProblem, NoRouteProblem, UnknownSourceProblem,
    MethodNotAllowedProblem, HeldProblem, NotHeldProblem, StaleFenceProblem, IdempotencyInProgressProblem,
    SequenceExhaustedProblem, TooLargeProblem, UnsupportedMediaTypeProblem, IdempotencyKeyMismatchProblem,
    QuotaExceededProblem, InternalProblem, UnavailableProblem, ReadOnlyProblem, NotDurableProblem, IdempotencyUnavailableProblem,
    SchemaProblem, NotReadyProblem, TokenUnknownProblem, TokenUsedProblem, TokenReusedProblem, TokenRevokedProblem,
    TokenExpiredProblem, AuditUnconfiguredProblem, AuditKeyMissingProblem,
  ].map((c) => [c.problemType, c] as const),
);

/**
 * problemFrom returns the typed error of a problem answer: the class of its
 * type, or RacefreeProblem for a type this client does not know (a newer
 * server) or an answer without a problem document (a proxy's; a 503
 * without one is an UnavailableProblem, as it is retried alike).
 */
export function problemFrom(body: unknown, response: Response): RacefreeProblem {
  let doc: ProblemDocument;
  if (body !== null && typeof body === "object" && typeof (body as { type?: unknown }).type === "string") {
    doc = { title: response.statusText, status: response.status, ...(body as object) } as ProblemDocument;
  } else if (response.status === 503) {
    doc = { type: UnavailableProblem.problemType, title: response.statusText || "Service Unavailable", status: 503 };
  } else {
    doc = { type: "about:blank", title: response.statusText || `HTTP ${response.status}`, status: response.status };
  }
  const Class = problemClasses.get(doc.type) ?? RacefreeProblem;
  return new Class(doc, response);
}

/** TransportError means no answer came after every attempt (the connection failed); cause is the last failure. */
export class TransportError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "TransportError";
  }
}

/**
 * DecodeError means a whole 2xx reply came that is not the route's answer:
 * a proxy's or a gateway's page answered 200, a blank body, or JSON that
 * is not an object. The reply arrived, so the server may well have done
 * what was asked: the call is not retried (a retry of a call without an
 * Idempotency-Key, such as tokens.issue, would do it again), and it is
 * neither a TransportError nor a RacefreeProblem. A body cut short while
 * it was read is no reply at all, and is retried as a TransportError.
 * cause is the parser's error.
 */
export class DecodeError extends Error {
  /** method and path name the request, e.g. "POST" and "/v1/tokens". */
  readonly method: string;
  readonly path: string;
  readonly status: number;
  /** contentType is the reply's Content-Type ("" without one). */
  readonly contentType: string;
  /** requestId is the reply's X-Request-Id, if any. */
  readonly requestId?: string;
  /** body is the reply's first characters, at most 256, for the logs. */
  readonly body: string;

  constructor(request: Request, response: Response, text: string, cause: unknown) {
    const contentType = response.headers.get("Content-Type") ?? "";
    const body = text.slice(0, DecodeError.maxSnippet);
    const path = new URL(request.url).pathname;
    const requestId = response.headers.get("X-Request-Id") ?? undefined;
    super(
      `racefree client: ${request.method} ${path}: ${response.status} reply (Content-Type ${JSON.stringify(contentType)}) is not the route's answer: ` +
        `${cause instanceof Error ? cause.message : String(cause)}; its body begins ${JSON.stringify(body)}` +
        (requestId ? ` (request ${requestId})` : ""),
      { cause },
    );
    this.name = "DecodeError";
    this.method = request.method;
    this.path = path;
    this.status = response.status;
    this.contentType = contentType;
    this.requestId = requestId;
    this.body = body;
  }

  /** maxSnippet bounds body: the characters of the reply kept. */
  static readonly maxSnippet = 256;
}

/**
 * OutcomeUnknownError is thrown by a call sent without an Idempotency-Key
 * (claims.release) when an attempt got no answer (a connection failure,
 * a 503) and a later attempt was refused in a way the unanswered one may
 * itself have caused: the release may have happened before its reply was
 * lost and another holder taken the free key since, so the retry's
 * StaleFenceProblem (or NotHeldProblem) says nothing about the release.
 * The outcome is unknown, as an unavailable server's ("may have been
 * recorded": settle it by re-reading); the caller's tenure is over either
 * way. It is not a RacefreeProblem, so `instanceof StaleFenceProblem` is
 * false; `cause` is the later attempt's refusal, for the logs.
 */
export class OutcomeUnknownError extends Error {
  constructor(message: string, options: { cause: RacefreeProblem }) {
    super(message, options);
    this.name = "OutcomeUnknownError";
  }
}

/**
 * ClaimLapsedError is the reason of a kept claim's signal when no renewal
 * succeeded within its TTL (the server was unreachable or busy): assume
 * another holder may have taken over.
 */
export class ClaimLapsedError extends Error {
  constructor(readonly key: string, readonly fence: number) {
    super(`racefree: claim ${JSON.stringify(key)} (fence ${fence}) lapsed: no renewal succeeded within its TTL`);
    this.name = "ClaimLapsedError";
  }
}
