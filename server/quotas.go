package server

import (
	"context"
	"net/http"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/quota"
)

// consumeQuotaRequest is the body of POST /v1/quotas/{key}/consume.
type consumeQuotaRequest struct {
	N      *int64         `json:"n"`
	Policy *policyRequest `json:"policy"`
}

// policyRequest is a [quota.Policy] as a request gives it.
type policyRequest struct {
	Kind  string `json:"kind"`
	Rate  int64  `json:"rate"`
	PerMs int64  `json:"per_ms"`
	Burst int64  `json:"burst"`
}

func (s *Server) quotaRoutes() {
	s.handle("POST /v1/quotas/{key}/consume", s.transactional(s.consumeQuota))
}

// consumeQuota charges n units of the path's key under the body's policy.
// A denial is a *quota.ExceededError: 429 quota-exceeded with Retry-After,
// retry_after_ms, and the decision's remaining and reset_at (when the key
// is full again, never the zero time). It wrote nothing, so it is not stored under an
// Idempotency-Key: the retry, once it is due, is charged.
//
// Both answers carry the decision's RateLimit-Policy and RateLimit fields,
// as quota.Middleware sends them (the policy is named "default"). Bad
// input and failures (400, 503) carry none: nothing was decided. A replay
// under an Idempotency-Key carries the fields stored with the first
// answer, not fields recomputed at the replay: they then agree with the
// replayed body (remaining, reset_at), which the replay cannot bring up
// to date without charging again, and a replay reads no clock, so that on
// PostgreSQL t never mixes the database's clock of the decision with
// the process's. Their r and t, like the body, describe the key as the
// charge left it; t is never negative.
func (s *Server) consumeQuota(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error) {
	var req consumeQuotaRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	key, err := pathParam(r, "key", quota.MaxKeyBytes)
	if err != nil {
		return nil, err
	}
	if req.Policy == nil {
		return nil, racefree.Invalid("policy", "is required")
	}
	if req.Policy.PerMs < 1 || req.Policy.PerMs > quota.MaxPer.Milliseconds() {
		return nil, racefree.Invalid("policy.per_ms", "must be between 1 and %d", quota.MaxPer.Milliseconds())
	}
	n := int64(1)
	if req.N != nil {
		n = *req.N
	}
	p := quota.Policy{Kind: quota.Kind(req.Policy.Kind), Rate: req.Policy.Rate, Per: time.Duration(req.Policy.PerMs) * time.Millisecond,
		Burst: req.Policy.Burst, Wait: quota.NoWait}
	// NoWait: the request's own deadline (--request-timeout) bounds the
	// charge; past it the route answers 503 unavailable.
	d, err := s.quotas.Consume(ctx, exec, key, n, p)
	if err != nil {
		return nil, err
	}
	s.metrics.quota(string(p.Kind), d.Allowed)
	h := http.Header{}
	h.Set("RateLimit-Policy", p.RateLimitPolicy())
	h.Set("RateLimit", p.RateLimit(d))
	if !d.Allowed {
		return nil, &headerError{&quota.ExceededError{Decision: d}, h}
	}
	return answer{struct {
		Allowed   bool   `json:"allowed"`
		Remaining int64  `json:"remaining"`
		ResetAt   string `json:"reset_at"`
	}{true, d.Remaining, formatTime(d.ResetAt)}, h}, nil
}

// ReapQuotas deletes the expired quota counters and consumption keys, in
// batches, and returns how many.
func (s *Server) ReapQuotas(ctx context.Context) (int64, error) { return s.quotas.Reap(ctx, s.db) }
