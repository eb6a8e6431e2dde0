// Package server is racefree's HTTP API over its primitives.
//
// Routes live under /v1 and speak JSON. Every error is an RFC 9457
// application/problem+json document whose "type" is one of the kinds
// registered in internal/problem, each with one title and one status, so
// clients can branch on it. A database outage, or a request that waited
// past Options.RequestTimeout, is 503 with Retry-After on every route.
// /healthz answers while the process is up, /readyz while the database
// answers, accepts writes and its schema is current (503 read-only on a
// standby, whose read routes keep working and whose write routes answer
// 503 read-only; when ready, listing as "warnings" the ways the
// PostgreSQL role the server logs in as escapes row-level security, which
// Server.JudgeRole found), and /metrics exposes Prometheus
// metrics: requests by route and status with latency histograms, the
// connection pool's figures, domain counters (claim outcomes, event
// observations, idempotency replays and conflicts, inbox deliveries, quota
// decisions, sequence numbers, token and audit operations, outbox enqueues
// and, with Server.WatchRelay, the relay's deliveries, rows reaped) and
// gauges read from the database at scrape time within
// Options.MetricsTimeout (the outbox's backlog, due messages, oldest due
// age and dead letters; the audit log's entries no checkpoint covers and
// their age): docs/operations.md lists them, with the dashboard and the
// alerting rules of deploy/.
//
// Each state-changing route of racefree's own (claims, events, sequences,
// the outbox's enqueue, redrive and discard) runs in one transaction; with an Idempotency-Key the operation, the key's record and
// the stored response commit together, so a crash between them leaves
// nothing for the retry to trip on. The token routes that answer with a
// token (POST /v1/tokens, /v1/tokens/rotate) run in one transaction too
// but refuse an Idempotency-Key: racefree never stores a token, not even
// in a stored response; a lost rotation is retried within the refresh
// grace window instead.
//
// Every /v1/ route (except the signed POST /v1/inbox/{source}) runs for the
// tenant of the request's credential, and of nothing else the client
// sends: an API key (package apikey, "Authorization: Bearer rfk_…") names
// its tenant and scopes; Options.Token, the credential of a single-tenant
// set-up, is a key of the default tenant with every scope. GET routes need
// the read scope, state-changing routes write, operator routes (the audit
// checkpoint, the outbox's dead-letter redrive and discard) admin: 403
// insufficient-scope otherwise. A missing (with
// Token or RequireKey), malformed, unknown or revoked credential is 401
// with WWW-Authenticate. Without Token and RequireKey, a request without
// Authorization runs for the default tenant with every scope. A webhook
// delivery's tenant is that of the secret that verifies it
// (Options.InboxSecrets, "tenant/source").
//
// Each request's database work runs for its tenant in tenant.InTx (the
// transaction of a state-changing route; on PostgreSQL a read's too), so
// on PostgreSQL row-level security binds every statement, also when the
// server logs in as the application role. /healthz, /readyz and /metrics
// are anonymous and name no tenant; Options.MetricsToken guards /metrics
// with a bearer token of its own.
//
// GET / is a dashboard for people: server-rendered HTML, no script, of the
// signed-in key's tenant only (live claims, quotas, idempotency keys in
// progress, the inbox, the outbox with a Redrive button for admin keys,
// audit chains, the last hour's request rates). Signing in posts a key or
// the token once (POST /login) and sets an HttpOnly, SameSite=Strict
// cookie holding it sealed with AES-GCM under Options.DashboardSecret with
// its expiry; every form carries a CSRF token derived from the session,
// and a POST from another origin is refused.
package server
