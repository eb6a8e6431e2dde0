package client

import (
	"context"
	"net/url"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/seq"
)

// Next hands out n consecutive numbers (n >= 1) of the gapless counter
// scope/name of the key's tenant, as [seq.Counters.NextN] (POST
// /v1/sequences/{scope}/{name}/next), and returns the first: the numbers
// are first … first+n-1. A retry after a lost reply carries the same
// Idempotency-Key and gets the same numbers back, so none is consumed
// twice and none is skipped. A counter at its end is an error matching
// [seq.ErrExhausted].
func (c *Client) Next(ctx context.Context, scope, name string, n int64) (first int64, err error) {
	path, err := counterPath(scope, name)
	if err != nil {
		return 0, err
	}
	var out struct {
		First int64 `json:"first"`
	}
	err = c.do(ctx, call{method: "POST", path: path + "/next", body: map[string]any{"n": n}, idempotent: true}, &out)
	return out.First, err
}

// Current returns the last number the counter scope/name of the key's
// tenant handed out, 0 when it handed none out, as [seq.Counters.Current]
// (GET /v1/sequences/{scope}/{name}). It takes no lock: Current + 1 is not
// the next number once another caller runs Next; use Next.
func (c *Client) Current(ctx context.Context, scope, name string) (int64, error) {
	path, err := counterPath(scope, name)
	if err != nil {
		return 0, err
	}
	var out struct {
		Current int64 `json:"current"`
	}
	err = c.do(ctx, call{method: "GET", path: path}, &out)
	return out.Current, err
}

// counterPath returns the path of counter scope/name, or a
// *racefree.InputError for a scope or name the server would refuse.
func counterPath(scope, name string) (string, error) {
	if err := racefree.CheckText("scope", scope, seq.MaxScopeBytes); err != nil {
		return "", err
	}
	if err := racefree.CheckText("name", name, seq.MaxNameBytes); err != nil {
		return "", err
	}
	return "/v1/sequences/" + url.PathEscape(scope) + "/" + url.PathEscape(name), nil
}
