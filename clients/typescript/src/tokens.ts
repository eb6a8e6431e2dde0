// One-time codes and refresh tokens over HTTP, as the Go client's
// IssueCode, ConsumeCode, IssueRefresh and Rotate (onetime.Store). The
// routes that answer with a token refuse an Idempotency-Key (racefree
// never stores a token, so it cannot replay the answer): they are sent
// once, never retried.
import type { CallOptions, IdempotentOptions, RacefreeClient } from "./client.js";
import type { operations } from "./schema.js";

/** IssuedToken is a new code or refresh token, its token in clear (shown once, never stored). */
export type IssuedToken = operations["post_v1_tokens"]["responses"][200]["content"]["application/json"];

/** ConsumedCode is a code redeemed by this call: its subject and times. */
export type ConsumedCode = operations["post_v1_tokens_consume"]["responses"][200]["content"]["application/json"];

/**
 * Rotation is the successor of a rotated refresh token: outcome
 * "rotated", or "replayed" (a retry within the server's --refresh-grace,
 * answered with the same successor).
 */
export type Rotation = operations["post_v1_tokens_rotate"]["responses"][200]["content"]["application/json"];

/** Tokens are the one-time codes and refresh tokens (onetime.Store over HTTP). */
export class Tokens {
  constructor(private readonly client: RacefreeClient) {}

  /**
   * issueCode issues a one-time code of purpose for subject, live for
   * ttlMs (POST /v1/tokens, kind code). It is sent once, without an
   * Idempotency-Key: a lost reply is a TransportError, and issuing again
   * makes another code (the lost one expires unused).
   */
  issueCode(purpose: string, subject: string, ttlMs: number, options?: CallOptions): Promise<IssuedToken> {
    const { api } = this.client;
    return this.client.once((a) => api.POST("/v1/tokens", { body: { kind: "code", purpose, subject, ttl_ms: ttlMs }, ...a }), options);
  }

  /**
   * issueRefresh starts a refresh-token family for subject, its first
   * token live for ttlMs (POST /v1/tokens, kind refresh). Sent once, like
   * issueCode: a lost reply means issuing another family.
   */
  issueRefresh(subject: string, ttlMs: number, options?: CallOptions): Promise<IssuedToken> {
    const { api } = this.client;
    return this.client.once((a) => api.POST("/v1/tokens", { body: { kind: "refresh", subject, ttl_ms: ttlMs }, ...a }), options);
  }

  /**
   * consume redeems a code of purpose (POST /v1/tokens/consume): exactly
   * one caller ever gets it consumed. A refusal is thrown as its problem:
   * TokenUsedProblem (already used), TokenExpiredProblem,
   * TokenUnknownProblem (never issued, another purpose, or reaped);
   * members.outcome names it. A retry after a lost
   * reply carries the same Idempotency-Key and gets the same answer back.
   */
  consume(purpose: string, token: string, options?: IdempotentOptions): Promise<ConsumedCode> {
    const { api } = this.client;
    return this.client.idempotent((a) => api.POST("/v1/tokens/consume", { body: { purpose, token }, ...a }), options);
  }

  /**
   * rotate retires a refresh token and returns its successor (POST
   * /v1/tokens/rotate): outcome rotated, or replayed (a retry within the
   * server's --refresh-grace: the same successor). A token rotated before
   * is a TokenReusedProblem, and its whole family is revoked; a revoked,
   * expired or unknown one a TokenRevokedProblem, TokenExpiredProblem or
   * TokenUnknownProblem. It is sent once, never retried by the client: a
   * retry after the grace window would revoke the family. Retry it
   * yourself, at once, when the reply was lost.
   */
  rotate(token: string, options?: CallOptions): Promise<Rotation> {
    const { api } = this.client;
    return this.client.once((a) => api.POST("/v1/tokens/rotate", { body: { token }, ...a }), options);
  }
}
