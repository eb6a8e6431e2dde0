// Package server is racefree's HTTP API over its primitives.
//
// Routes live under /v1 and speak JSON. Every error is an RFC 9457
// application/problem+json document whose "type" is one of the kinds
// registered in internal/problem, each with one title and one status, so
// clients can branch on it. A database outage, or a request that waited
// past Options.RequestTimeout, is 503 with Retry-After on every route.
// /healthz answers while the process is up, /readyz while the database
// answers and its schema is current, and /metrics exposes Prometheus
// metrics: requests by route and status with latency histograms, the
// connection pool's figures, and domain counters (claim outcomes, event
// observations, idempotency replays and conflicts, inbox deliveries, rows
// reaped).
//
// Each state-changing route of racefree's own (claims, events) runs in one
// transaction; with an Idempotency-Key the operation, the key's record and
// the stored response commit together, so a crash between them leaves
// nothing for the retry to trip on. The token routes that answer with a
// token (POST /v1/tokens, /v1/tokens/rotate) run in one transaction too
// but refuse an Idempotency-Key: racefree never stores a token, not even
// in a stored response; a lost rotation is retried within the refresh
// grace window instead.
//
// When Options.Token is set, /v1/ requires "Authorization: Bearer <token>"
// (except the signed POST /v1/inbox/{source}); Options.MetricsToken guards
// /metrics the same way.
package server
