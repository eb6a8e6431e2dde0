// Package quota enforces quotas and rate limits with the database as the
// referee.
//
// Limiter.Consume decides and records a charge in one statement (INSERT …
// ON CONFLICT DO UPDATE … WHERE <there is room> RETURNING): there is no
// window between counting the uses and recording one, so concurrent
// charges of a key, from any number of goroutines and processes sharing
// the database, never admit more than the limit. A denial writes nothing
// and says exactly how long to wait (Decision.RetryAfter).
//
// Three policies:
//
//   - GCRA, the generic cell rate algorithm: a bucket of Burst units that
//     refills continuously at Rate per Per, one unit every Per/Rate
//     (rounded up to a whole millisecond, so the limit is never exceeded).
//     A key stores one number, the instant its bucket is full again.
//   - FixedWindow: Rate units per window of Per, windows aligned on the
//     Unix epoch.
//   - SlidingWindow: the sliding-window counter, Rate units per Per, where
//     a charge counts the current aligned window's units plus the previous
//     window's weighted by their overlap with the last Per. It assumes the
//     previous window's units were spread evenly; whatever their spread it
//     never admits more than Rate within one aligned window, and fewer than
//     2 × Rate within any interval of length Per (see SlidingWindow). It
//     needs migration 016.
//
// A charge of n units larger than the policy's limit could never be
// allowed and is refused with a *racefree.InputError. Refund gives units
// back after a downstream failure, never above the limit. ConsumeAll
// charges several policies (per second, per day, per tenant) all or
// nothing, in one transaction or under a savepoint of the caller's, and a
// Request's ConsumptionKey makes a replayed request charge once (a UNIQUE
// ledger row written in the same transaction).
//
// Counters live in racefree_quotas (migration 009), one row per tenant,
// scope, key and kind, and are deleted by Limiter.Reap once they mean the
// same as no row (a full bucket, an elapsed window, a sliding window with
// nothing counted): the number of keys is bounded by the reaper, not by
// memory. Options.Scope keeps one Limiter's counters apart from another's
// within a tenant.
//
// Tenants: every call runs for the tenant its context names (tenant.With,
// or tenant.InTx's context; tenant.Default when none), and every
// statement filters by it; keys lead with the tenant (migration 012). Two
// tenants charging the same key, or sending the same consumption key, have
// a counter and a ledger each: Consume, Refund, ConsumeAll, the
// consumption-key ledger and Middleware (which charges the tenant of the
// request's context) never touch another tenant's rows. On PostgreSQL
// each call runs in a transaction that sets the tenant for row-level
// security (the caller's *sql.Tx, a short one of its own, see
// package tenant, or a combined charge's batch, which holds one tenant's
// charges only). Reap visits every tenant, one at a time. Every operation
// needs migration 011 (ErrSchemaOutdated before, nothing written), and a
// tenant other than the default needs 012; the previous release's
// statements keep working against 011 during a rollout, on the default
// tenant's counters.
//
// Each Policy says what to decide when the database does not answer within
// Policy.Wait (one second by default; NoWait leaves the bound to the
// caller's context): FailClosed (the default) denies, FailOpen admits;
// both mark the Decision Degraded. A charge that never reached the
// database charged nothing; one whose reply was lost may have been
// charged (invariant 14: an unknown outcome, not a failure).
// Policy.Shadow decides and counts but never denies, for rolling a limit
// out. Middleware puts a policy in front of an http.Handler: 429 with
// Retry-After and a problem+json quota-exceeded body, and the RateLimit
// headers of draft-ietf-httpapi-ratelimit-headers; Policy.RateLimitPolicy
// and Policy.RateLimit format those fields for a handler of your own.
//
// With racefree.Config.Combine on (the default), Consume on the pool shares a
// transaction and a commit with the tenant's concurrent charges on other
// keys, with the decisions it has alone.
//
// Every operation takes an executor: the *racefree.DB, or the caller's
// *sql.Tx, with which the charge then commits or rolls back (on
// PostgreSQL that transaction must belong to the call's tenant, or be
// set to none yet: tenant.MismatchError otherwise).
package quota
