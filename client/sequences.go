package client

import (
	"context"
	"net/url"
)

// Next hands out n consecutive numbers (n >= 1) of the gapless counter
// scope/name of the key's tenant, as seq.Counters.NextN (POST
// /v1/sequences/{scope}/{name}/next), and returns the first: the numbers
// are first … first+n-1. A retry after a lost reply carries the same
// Idempotency-Key and gets the same numbers back, so none is consumed
// twice and none is skipped. A counter at its end is an error matching
// seq.ErrExhausted.
func (c *Client) Next(ctx context.Context, scope, name string, n int64) (first int64, err error) {
	var out struct {
		First int64 `json:"first"`
	}
	err = c.do(ctx, call{method: "POST", path: "/v1/sequences/" + url.PathEscape(scope) + "/" + url.PathEscape(name) + "/next",
		body: map[string]any{"n": n}, idempotent: true}, &out)
	return out.First, err
}
