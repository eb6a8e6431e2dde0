// Package idempotency makes a request run once however often it is retried,
// and gives every retry the first answer.
//
// Do claims the key in one statement and runs fn once, with no
// transaction open while fn runs. After completion a
// retry replays the stored response. A duplicate that arrives while the
// first is in progress gets racefree.ErrInProgress; the same key with a
// different fingerprint (another payload) gets racefree.ErrMismatch.
//
// The in-progress state is a lease with a fencing token (package claim,
// namespace "idempotency"), renewed by a heartbeat while fn runs. If the
// worker dies, the lease lapses and the next retry takes over with a higher
// fence; the stale worker can then neither complete the record nor release
// the lease (racefree.ErrStaleFence), so there are no stuck in-progress
// records and no zombie completions.
//
// Once fn has returned, storing its response and releasing the lease run
// on a context that the caller's cancellation cannot stop, bounded by
// Options.CompleteTimeout: a client that hangs up after fn ran gets a
// replay when it retries, not a second run.
//
// DoTx runs fn inside the caller's transaction: the claim, fn's writes,
// its recovery points and the stored response commit or roll back
// together, and no in-progress state is ever visible to anyone else.
//
// A crash between an external side effect and the stored response (the
// process dies, the database is unreachable) means that fn runs again once
// the lease lapses. Recovery points are the remedy: a multi-step fn saves
// the result of each external side effect with Call.Step. A retry after a
// crash resumes after the last saved step instead of repeating it. A step
// that crashed between its side effect and its save runs again, so pass
// Call.StepKey to the external system as its own idempotency key.
//
// Keys are scoped by a caller-given scope (principal, plus route) within
// the tenant of the call's context (package tenant: tenant.With, Default
// when none). Records, leases and recovery points are the tenant's own:
// another tenant using the same scope and key neither replays, refuses nor
// waits for them, and gets other step keys. Do's short transactions each
// belong to the tenant (on PostgreSQL they set it, so row-level security
// applies); DoTx runs in the caller's transaction, which must belong to
// the same tenant. Before migration 011 every call is
// racefree.ErrSchemaOutdated.
//
// Records are kept for the retention period (default 24 hours), then
// deleted by Reap in batches, one tenant at a time; a record restarted
// while Reap runs is never deleted.
//
// Middleware applies all of this to net/http handlers, following the IETF
// draft "The Idempotency-Key HTTP Header Field".
package idempotency
