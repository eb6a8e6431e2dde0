// Package server is racefree's HTTP API over its primitives.
//
// Routes live under /v1 and speak JSON. Every error is an RFC 9457
// application/problem+json document whose "type" is stable, so clients can
// branch on it. /healthz answers while the process is up, /readyz while the
// database answers and its schema is current, and /metrics exposes
// Prometheus metrics: requests by route and status with latency histograms,
// and the connection pool's figures.
//
// When Options.Token is set, /v1/ requires "Authorization: Bearer <token>".
package server
