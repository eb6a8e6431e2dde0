package client

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/heartbeat"
)

// claimJSON is a claim as the server answers it.
type claimJSON struct {
	Key       string    `json:"key"`
	Holder    string    `json:"holder"`
	Fence     int64     `json:"fence"`
	ClaimedAt time.Time `json:"claimed_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Live      bool      `json:"live"`
	Count     int64     `json:"count"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
}

func (j *claimJSON) claim() *claim.Claim {
	return &claim.Claim{Key: j.Key, Holder: j.Holder, Fence: j.Fence, ClaimedAt: j.ClaimedAt, ExpiresAt: j.ExpiresAt,
		Live: j.Live, Count: j.Count, FirstSeen: j.FirstSeen, LastSeen: j.LastSeen}
}

func claimPath(key string) string { return "/v1/claims/" + url.PathEscape(key) }

// checkClaim refuses, before any request, what [claim.Store] refuses.
func checkClaim(key, holder string) error {
	if err := racefree.CheckText("key", key, claim.MaxKeyBytes); err != nil {
		return err
	}
	return racefree.CheckText("holder", holder, claim.MaxHolderBytes)
}

func checkTTL(ttl time.Duration) error {
	if ttl < claim.MinTTL || ttl > claim.MaxTTL || ttl%time.Millisecond != 0 {
		return racefree.Invalid("ttl", "must be whole milliseconds between %v and %v, got %v", claim.MinTTL, claim.MaxTTL, ttl)
	}
	return nil
}

// Acquire takes the claim on key for holder until now + ttl, as
// [claim.Store.Acquire] (POST /v1/claims/{key}): it wins a free key (the
// fence grows by one) or the caller's own live claim (the fence kept), and
// otherwise returns a *claim.HeldError carrying the live claim's holder,
// fence and expiry. A retry after a lost reply carries the same
// Idempotency-Key and returns the caller's claim. ttl must be whole
// milliseconds.
func (c *Client) Acquire(ctx context.Context, key, holder string, ttl time.Duration) (*claim.Claim, error) {
	if err := checkClaim(key, holder); err != nil {
		return nil, err
	}
	if err := checkTTL(ttl); err != nil {
		return nil, err
	}
	var out claimJSON
	err := c.do(ctx, call{method: "POST", path: claimPath(key), idempotent: true,
		body: map[string]any{"holder": holder, "ttl_ms": ttl.Milliseconds()}}, &out)
	if err != nil {
		return nil, claimError(key, 0, err)
	}
	return out.claim(), nil
}

// Renew extends the live claim of (holder, fence) to now + ttl, as
// [claim.Store.Renew]: a *claim.StaleFenceError when another tenure began
// since, an error matching [racefree.ErrNotHeld] when the claim lapsed or is
// not the caller's.
func (c *Client) Renew(ctx context.Context, key, holder string, fence int64, ttl time.Duration) (*claim.Claim, error) {
	if err := checkClaim(key, holder); err != nil {
		return nil, err
	}
	if err := claim.ValidateFence(fence); err != nil {
		return nil, err
	}
	if err := checkTTL(ttl); err != nil {
		return nil, err
	}
	var out claimJSON
	err := c.do(ctx, call{method: "POST", path: claimPath(key) + "/renew", idempotent: true,
		body: map[string]any{"holder": holder, "fence": fence, "ttl_ms": ttl.Milliseconds()}}, &out)
	if err != nil {
		return nil, claimError(key, fence, err)
	}
	return out.claim(), nil
}

// Release ends the tenure of (holder, fence) now, as [claim.Store.Release]
// (DELETE /v1/claims/{key}), sent without an Idempotency-Key and retried
// after a lost reply (a transport error, a 503): the retry succeeds while
// no other tenure began. When one did, the retry's refusal cannot tell
// whether the lost attempt released the claim (and another holder took
// the free key) or the claim had been taken over before: Release then
// returns an *OutcomeUnknownError matching [racefree.ErrUnavailable], not
// the *claim.StaleFenceError, and the caller's tenure is over either way.
// A refusal with no unanswered attempt before it is the library's: a
// *claim.StaleFenceError, or an error matching [racefree.ErrNotHeld].
func (c *Client) Release(ctx context.Context, key, holder string, fence int64) error {
	if err := checkClaim(key, holder); err != nil {
		return err
	}
	if err := claim.ValidateFence(fence); err != nil {
		return err
	}
	q := url.Values{"holder": {holder}, "fence": {strconv.FormatInt(fence, 10)}}
	err := c.do(ctx, call{method: "DELETE", path: claimPath(key), query: q, unsettled: []string{"stale-fence", "not-held"}}, nil)
	var u *OutcomeUnknownError
	if errors.As(err, &u) {
		u.Answer = claimError(key, fence, u.Answer)
		return u
	}
	return claimError(key, fence, err)
}

// Get returns the current state of key's claim, or an error matching
// [racefree.ErrNotFound], as [claim.Store.Get].
func (c *Client) Get(ctx context.Context, key string) (*claim.Claim, error) {
	if err := racefree.CheckText("key", key, claim.MaxKeyBytes); err != nil {
		return nil, err
	}
	var out claimJSON
	if err := c.do(ctx, call{method: "GET", path: claimPath(key)}, &out); err != nil {
		return nil, claimError(key, 0, err)
	}
	return out.claim(), nil
}

// Keep renews c for ttl every ttl/3 and returns a context cancelled the
// moment the claim is lost, as [claim.Store.Keep]: a renewal refused
// (context.Cause is the *claim.StaleFenceError or [racefree.ErrNotHeld]
// error), or ttl passed since the last renewal that succeeded without
// another succeeding, for instance while the server was unreachable (the
// cause is [claim.ErrLapsed]). stop ends the heartbeat; it does not release
// the claim.
func (c *Client) Keep(ctx context.Context, cl *claim.Claim, ttl time.Duration) (kept context.Context, stop func()) {
	key, holder, fence := cl.Key, cl.Holder, cl.Fence
	return heartbeat.Keep(ctx, ttl, func(ctx context.Context) error {
		_, err := c.Renew(ctx, key, holder, fence, ttl)
		return err
	}, claim.Lost)
}

// claimError turns the problems of the claim routes into the library's
// typed errors, with the figures the server sent.
func claimError(key string, fence int64, err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	switch problemName(e.Type) {
	case "held":
		var h claim.HeldError
		h.Claim.Key, h.Claim.Live = key, true
		e.member("holder", &h.Claim.Holder)
		e.member("fence", &h.Claim.Fence)
		e.member("expires_at", &h.Claim.ExpiresAt)
		e.err = &h
	case "stale-fence":
		sf := &claim.StaleFenceError{Key: key, Fence: fence}
		e.member("current_fence", &sf.Current)
		e.err = sf
	}
	return e
}
