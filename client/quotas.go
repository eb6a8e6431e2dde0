package client

import (
	"context"
	"errors"
	"net/url"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/quota"
)

// Consume charges n units to key under policy p, as [quota.Limiter.Consume]
// (POST /v1/quotas/{key}/consume): an allowed charge returns a Decision
// with Allowed, Remaining and ResetAt; a denial is not an error but a
// Decision with Allowed false, the exact RetryAfter, Remaining and ResetAt
// (a server older than this client sends no ResetAt: zero), and charged
// nothing. ResetAfter, which needs the server's clock, is left zero. The policy's Kind, Rate, Per (whole milliseconds) and Burst are
// sent; the server decides without waiting ([quota.NoWait]) and fails closed
// (503, an error matching [racefree.ErrUnavailable], after the retries). A
// retry after a lost reply carries the same Idempotency-Key and is charged
// once.
func (c *Client) Consume(ctx context.Context, key string, n int64, p quota.Policy) (quota.Decision, error) {
	if err := racefree.CheckText("key", key, quota.MaxKeyBytes); err != nil {
		return quota.Decision{}, err
	}
	if p.Per%time.Millisecond != 0 {
		return quota.Decision{}, racefree.Invalid("policy.per", "must be whole milliseconds, got %v", p.Per)
	}
	var out struct {
		Allowed   bool      `json:"allowed"`
		Remaining int64     `json:"remaining"`
		ResetAt   time.Time `json:"reset_at"`
	}
	err := c.do(ctx, call{method: "POST", path: "/v1/quotas/" + url.PathEscape(key) + "/consume", idempotent: true,
		body: map[string]any{"n": n, "policy": map[string]any{"kind": p.Kind, "rate": p.Rate, "per_ms": p.Per.Milliseconds(), "burst": p.Burst}}}, &out)
	if e := (*Error)(nil); errors.As(err, &e) && problemName(e.Type) == "quota-exceeded" {
		var (
			ms, remaining int64
			resetAt       time.Time
		)
		e.member("retry_after_ms", &ms)
		e.member("remaining", &remaining)
		e.member("reset_at", &resetAt)
		return quota.Decision{Remaining: remaining, ResetAt: resetAt, RetryAfter: time.Duration(ms) * time.Millisecond}, nil
	}
	if err != nil {
		return quota.Decision{}, err
	}
	return quota.Decision{Allowed: true, Remaining: out.Remaining, ResetAt: out.ResetAt}, nil
}
