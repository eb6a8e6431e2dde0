// Package conformance holds the cases that racefree's library and its
// HTTP client (package client, against a real server) must both pass, for
// claims and quotas: the same calls, the same outcomes, the same error
// values. Each primitive's package runs them against the library; package
// client runs them against a server on loopback.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
)

// Claims is what the library's [claim.Store] (through Library) and the
// client both offer.
type Claims interface {
	Acquire(ctx context.Context, key, holder string, ttl time.Duration) (*claim.Claim, error)
	Renew(ctx context.Context, key, holder string, fence int64, ttl time.Duration) (*claim.Claim, error)
	Release(ctx context.Context, key, holder string, fence int64) error
	Get(ctx context.Context, key string) (*claim.Claim, error)
	Keep(ctx context.Context, c *claim.Claim, ttl time.Duration) (context.Context, func())
}

// Quotas is what the library's [quota.Limiter] (through Library) and the
// client both offer.
type Quotas interface {
	Consume(ctx context.Context, key string, n int64, p quota.Policy) (quota.Decision, error)
}

// Library adapts the library to Claims and Quotas: every call runs on db's
// pool.
type Library struct {
	DB     *racefree.DB
	Claims *claim.Store
	Quotas *quota.Limiter
}

// NewLibrary returns the library's claims and quotas on db.
func NewLibrary(db *racefree.DB) *Library {
	l, _ := quota.New(db, nil) // no options: cannot fail
	return &Library{DB: db, Claims: claim.New(db), Quotas: l}
}

func (l *Library) Acquire(ctx context.Context, key, holder string, ttl time.Duration) (*claim.Claim, error) {
	return l.Claims.Acquire(ctx, l.DB, key, holder, ttl)
}

func (l *Library) Renew(ctx context.Context, key, holder string, fence int64, ttl time.Duration) (*claim.Claim, error) {
	return l.Claims.Renew(ctx, l.DB, key, holder, fence, ttl)
}

func (l *Library) Release(ctx context.Context, key, holder string, fence int64) error {
	return l.Claims.Release(ctx, l.DB, key, holder, fence)
}

func (l *Library) Get(ctx context.Context, key string) (*claim.Claim, error) {
	return l.Claims.Get(ctx, l.DB, key)
}

func (l *Library) Keep(ctx context.Context, c *claim.Claim, ttl time.Duration) (context.Context, func()) {
	return l.Claims.Keep(ctx, c, ttl)
}

func (l *Library) Consume(ctx context.Context, key string, n int64, p quota.Policy) (quota.Decision, error) {
	return l.Quotas.Consume(ctx, l.DB, key, n, p)
}

// T0 is where the cases set the clock at the start of each.
var T0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// LibraryClaims runs the claim cases against the library, on a fresh
// database of each engine ([testdb.Each]) whose clock they move.
func LibraryClaims(t *testing.T) {
	t.Helper()
	onLibrary(t, func(t *testing.T, l *Library, clock *racefree.ManualClock) { RunClaims(t, l, clock) })
}

// LibraryQuotas runs the quota cases against the library, as
// LibraryClaims does the claim cases.
func LibraryQuotas(t *testing.T) {
	t.Helper()
	onLibrary(t, func(t *testing.T, l *Library, clock *racefree.ManualClock) { RunQuotas(t, l, clock) })
}

// onLibrary runs cases against the library on each engine, with a manual
// clock at T0 as the database's clock.
func onLibrary(t *testing.T, cases func(t *testing.T, l *Library, clock *racefree.ManualClock)) {
	t.Helper()
	clock := racefree.NewManualClock(T0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		cases(t, NewLibrary(db), clock)
	})
}

// RunClaims runs the claim cases against c, one after the other (they move
// clock, the clock of the database c runs on).
func RunClaims(t *testing.T, c Claims, clock *racefree.ManualClock) {
	ctx := context.Background()
	const ttl = 10 * time.Second
	run := func(name string, body func(t *testing.T)) {
		t.Run(name, func(t *testing.T) { clock.Set(T0); body(t) })
	}

	run("ExactlyOneWinnerAndTheHolderInHeldError", func(t *testing.T) {
		const n = 16
		var (
			mu     sync.Mutex
			wg     sync.WaitGroup
			won    []*claim.Claim
			losers []*claim.HeldError
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := c.Acquire(ctx, "one-winner", fmt.Sprintf("w%d", i), ttl)
				mu.Lock()
				defer mu.Unlock()
				var held *claim.HeldError
				switch {
				case err == nil:
					won = append(won, got)
				case errors.As(err, &held) && errors.Is(err, racefree.ErrHeld):
					losers = append(losers, held)
				default:
					t.Errorf("acquire: %v", err)
				}
			}()
		}
		wg.Wait()
		if len(won) != 1 || len(losers) != n-1 {
			t.Fatalf("%d winners, %d losers; want 1, %d", len(won), len(losers), n-1)
		}
		w := won[0]
		if w.Fence != 1 || !w.ExpiresAt.Equal(T0.Add(ttl)) || !w.Live {
			t.Fatalf("winner = %+v, want fence 1, live until %v", w, T0.Add(ttl))
		}
		for _, h := range losers {
			if h.Claim.Holder != w.Holder || h.Claim.Fence != w.Fence || !h.Claim.ExpiresAt.Equal(w.ExpiresAt) {
				t.Fatalf("HeldError names %q fence %d until %v, want the winner %q fence %d until %v",
					h.Claim.Holder, h.Claim.Fence, h.Claim.ExpiresAt, w.Holder, w.Fence, w.ExpiresAt)
			}
		}
	})

	run("AcquireAgainReturnsTheCallersOwnClaim", func(t *testing.T) {
		first := mustAcquire(t, c, "own", "a", ttl)
		clock.Advance(time.Second)
		again := mustAcquire(t, c, "own", "a", ttl)
		if again.Fence != first.Fence || !again.ExpiresAt.Equal(T0.Add(time.Second+ttl)) {
			t.Fatalf("again = fence %d until %v, want fence %d until %v", again.Fence, again.ExpiresAt, first.Fence, T0.Add(time.Second+ttl))
		}
	})

	run("RenewKeepsTheFenceAndAStaleHolderIsRefused", func(t *testing.T) {
		a := mustAcquire(t, c, "stale", "a", ttl)
		clock.Advance(ttl / 2)
		r, err := c.Renew(ctx, "stale", "a", a.Fence, ttl)
		if err != nil || r.Fence != a.Fence || !r.ExpiresAt.Equal(T0.Add(ttl/2+ttl)) {
			t.Fatalf("renew = %+v, %v; want fence %d until %v", r, err, a.Fence, T0.Add(ttl/2+ttl))
		}
		clock.Advance(ttl) // exactly at the expiry: free
		b := mustAcquire(t, c, "stale", "b", ttl)
		if b.Fence != a.Fence+1 {
			t.Fatalf("takeover fence = %d, want %d", b.Fence, a.Fence+1)
		}
		var sf *claim.StaleFenceError
		if _, err := c.Renew(ctx, "stale", "a", a.Fence, ttl); !errors.As(err, &sf) || !errors.Is(err, racefree.ErrStaleFence) || sf.Current != b.Fence || sf.Fence != a.Fence {
			t.Fatalf("stale renew: %v (%+v), want *StaleFenceError fence %d current %d", err, sf, a.Fence, b.Fence)
		}
		if err := c.Release(ctx, "stale", "a", a.Fence); !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("stale release: %v, want ErrStaleFence", err)
		}
	})

	run("ReleaseFreesTheKeyAndIsRetryable", func(t *testing.T) {
		a := mustAcquire(t, c, "release", "a", ttl)
		for range 2 { // the second is a retry after a lost reply
			if err := c.Release(ctx, "release", "a", a.Fence); err != nil {
				t.Fatalf("release: %v", err)
			}
		}
		got, err := c.Get(ctx, "release")
		if err != nil || got.Live || got.Holder != "a" {
			t.Fatalf("get after release = %+v, %v; want a's, not live", got, err)
		}
		if b := mustAcquire(t, c, "release", "b", ttl); b.Fence != a.Fence+1 {
			t.Fatalf("fence after release = %d, want %d", b.Fence, a.Fence+1)
		}
	})

	run("NotHeldAndNotFound", func(t *testing.T) {
		if _, err := c.Renew(ctx, "nobody", "a", 1, ttl); !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("renew of no claim: %v, want ErrNotHeld", err)
		}
		a := mustAcquire(t, c, "ahead", "a", ttl)
		if err := c.Release(ctx, "ahead", "a", a.Fence+1); !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("release of a fence never issued: %v, want ErrNotHeld", err)
		}
		if _, err := c.Get(ctx, "nobody"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("get of no claim: %v, want ErrNotFound", err)
		}
	})

	run("BadInputChangesNothing", func(t *testing.T) {
		var ie *racefree.InputError
		for name, call := range map[string]func() error{
			"empty holder": func() error { _, err := c.Acquire(ctx, "bad", "", ttl); return err },
			"zero ttl":     func() error { _, err := c.Acquire(ctx, "bad", "a", 0); return err },
			"NUL holder":   func() error { _, err := c.Acquire(ctx, "bad", "a\x00", ttl); return err },
			"zero fence":   func() error { _, err := c.Renew(ctx, "bad", "a", 0, ttl); return err },
			"long key": func() error {
				_, err := c.Acquire(ctx, string(make([]byte, claim.MaxKeyBytes+1)), "a", ttl)
				return err
			},
		} {
			if err := call(); !errors.As(err, &ie) || !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("%s: %v, want *racefree.InputError", name, err)
			}
		}
		if _, err := c.Get(ctx, "bad"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("get after bad input: %v, want ErrNotFound (nothing written)", err)
		}
	})

	run("KeepCancelsWhenTheClaimIsLost", func(t *testing.T) {
		// The heartbeat runs on real time; the claim's TTL is the database
		// clock's, which stands still here, so only a takeover ends it. The
		// TTL is long enough that a renewal slowed by a loaded machine does
		// not lapse it first (the takeover is found at the next renewal,
		// a third of it later).
		const short = 2 * time.Second
		a := mustAcquire(t, c, "kept", "a", short)
		kept, stop := c.Keep(ctx, a, short)
		defer stop()
		if kept.Err() != nil {
			t.Fatalf("kept context ended at once: %v", context.Cause(kept))
		}
		if err := c.Release(ctx, "kept", "a", a.Fence); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, c, "kept", "b", ttl)
		select {
		case <-kept.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Keep did not cancel its context within 10s of a takeover")
		}
		if cause := context.Cause(kept); !errors.Is(cause, racefree.ErrStaleFence) {
			t.Fatalf("cause = %v, want ErrStaleFence", cause)
		}
	})
}

// RunQuotas runs the quota cases against q, one after the other.
func RunQuotas(t *testing.T, q Quotas, clock *racefree.ManualClock) {
	ctx := context.Background()
	run := func(name string, body func(t *testing.T)) {
		t.Run(name, func(t *testing.T) { clock.Set(T0); body(t) })
	}
	gcra := quota.Policy{Kind: quota.GCRA, Rate: 10, Per: time.Minute, Burst: 10, Wait: quota.NoWait}

	run("ConcurrentChargesAdmitExactlyTheLimit", func(t *testing.T) {
		const n = 24
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			allowed int
		)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := q.Consume(ctx, "limit", 1, gcra)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("consume: %v", err)
				}
				if d.Allowed {
					allowed++
				}
			}()
		}
		wg.Wait()
		if allowed != int(gcra.Burst) {
			t.Fatalf("%d of %d charges allowed, want exactly %d", allowed, n, gcra.Burst)
		}
	})

	run("ADenialSaysExactlyWhen", func(t *testing.T) {
		for i := range gcra.Burst {
			d, err := q.Consume(ctx, "when", 1, gcra)
			if err != nil || !d.Allowed || d.Remaining != gcra.Burst-1-i {
				t.Fatalf("charge %d = %+v, %v; want allowed, %d remaining", i, d, err, gcra.Burst-1-i)
			}
		}
		d, err := q.Consume(ctx, "when", 1, gcra)
		if want := gcra.Per / time.Duration(gcra.Rate); err != nil || d.Allowed || d.RetryAfter != want {
			t.Fatalf("denial = %+v, %v; want denied, retry after %v", d, err, want)
		}
		// The bucket is full again one interval per unit after T0.
		if full := T0.Add(time.Duration(gcra.Burst) * gcra.Per / time.Duration(gcra.Rate)); d.Remaining != 0 || !d.ResetAt.Equal(full) {
			t.Fatalf("denial = %+v; want 0 remaining, reset at %s", d, full)
		}
		clock.Advance(d.RetryAfter - time.Millisecond)
		if d, err := q.Consume(ctx, "when", 1, gcra); err != nil || d.Allowed {
			t.Fatalf("a millisecond early = %+v, %v; want denied", d, err)
		}
		clock.Advance(time.Millisecond)
		if d, err := q.Consume(ctx, "when", 1, gcra); err != nil || !d.Allowed {
			t.Fatalf("at RetryAfter = %+v, %v; want allowed", d, err)
		}
	})

	run("BadInputChargesNothing", func(t *testing.T) {
		var ie *racefree.InputError
		for name, call := range map[string]func() error{
			"n above the burst": func() error { _, err := q.Consume(ctx, "bad", gcra.Burst+1, gcra); return err },
			"zero n":            func() error { _, err := q.Consume(ctx, "bad", 0, gcra); return err },
			"zero rate": func() error {
				p := gcra
				p.Rate = 0
				_, err := q.Consume(ctx, "bad", 1, p)
				return err
			},
			"NUL key": func() error { _, err := q.Consume(ctx, "bad\x00", 1, gcra); return err },
		} {
			if err := call(); !errors.As(err, &ie) || !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("%s: %v, want *racefree.InputError", name, err)
			}
		}
		if d, err := q.Consume(ctx, "bad", 1, gcra); err != nil || d.Remaining != gcra.Burst-1 {
			t.Fatalf("first charge after bad input = %+v, %v; want %d remaining", d, err, gcra.Burst-1)
		}
	})
}

func mustAcquire(t *testing.T, c Claims, key, holder string, ttl time.Duration) *claim.Claim {
	t.Helper()
	got, err := c.Acquire(context.Background(), key, holder, ttl)
	if err != nil {
		t.Fatalf("acquire %s by %s: %v", key, holder, err)
	}
	return got
}
