package quota_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/tenant"
)

// The tests of this file try what the first three rounds left out: a
// counter written by a fold of charges, which must expire when the same
// charges alone would, a window's Burst, which the consumption key's
// fingerprint ignores, the RateLimit-Policy of a GCRA bucket whose
// interval is rounded up, a sliding refusal beside another scope's
// counter of its key, and a GCRA refund of a key that is a window too.

// expiresAt reads the expiry of the counter of kind of key in the default
// tenant, or -1 when it has none.
func expiresAt(t *testing.T, db *racefree.DB, kind quota.Kind, key string) int64 {
	t.Helper()
	var at int64
	err := db.QueryRowContext(context.Background(), bind(db, `SELECT expires_at FROM racefree_quotas WHERE tenant = $1 AND key = $2 AND kind = $3`),
		tenant.Default, key, string(kind)).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// TestOutside4EdgesAFoldedCounterExpiresAsAlone queues three charges of
// one key, of each kind, in one batch (on SQLite a fold:
// consume_gcra_fold.sql, consume_window_fold.sql,
// consume_sliding_fold.sql), 250 ms into a window of a second, and makes
// the same charges alone on another key: both counters expire at the same
// millisecond, the first at which they mean the same as no counter (the
// bucket full again, the window's end, two windows after the window
// began), and Reap keeps both 1 ms before it and takes both at it. A
// sliding-window counter reaped at its window's end would forget units
// that still weigh on the next window; a fixed window's kept past its end
// would hold a count that means nothing.
func TestOutside4EdgesAFoldedCounterExpiresAsAlone(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	cfg.Combine, cfg.CombineBatches = racefree.CombineOn, 1
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		start := t0.Add(time.Hour)
		// The gate's counter is charged in a scope of its own: not the
		// Limiters' under test to reap.
		gate, err := quota.New(db, &quota.Options{Scope: "gate"})
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []quota.Kind{quota.GCRA, quota.FixedWindow, quota.SlidingWindow} {
			t.Run(string(kind), func(t *testing.T) {
				clock.Set(start.Add(250 * time.Millisecond))
				l, err := quota.New(db, &quota.Options{Scope: "fold-expiry-" + string(kind)})
				if err != nil {
					t.Fatal(err)
				}
				p := quota.Policy{Kind: kind, Rate: 10, Per: time.Second, Burst: 10, Wait: time.Minute}
				want := map[quota.Kind]int64{
					quota.GCRA:          racefree.Millis(start) + 250 + 3*100,
					quota.FixedWindow:   racefree.Millis(start) + 1000,
					quota.SlidingWindow: racefree.Millis(start) + 2000,
				}[kind]
				for range 3 {
					tx, err := db.SQL().BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					if d := consume(t, l, tx, "alone", 1, p); !d.Allowed {
						t.Fatalf("a charge alone: %+v, want allowed", d)
					}
					if err := tx.Commit(); err != nil {
						t.Fatal(err)
					}
				}
				calls := make([]func(), 3)
				for j := range calls {
					calls[j] = func() {
						if d, err := l.Consume(ctx, db, "hot", 1, p); err != nil || !d.Allowed {
							t.Errorf("charge %d of the batch: %+v, %v; want allowed", j, d, err)
						}
					}
				}
				before := db.CombineStats()
				inTurn(t, ctx, gate, db, calls...)()
				if db.Engine() == racefree.SQLite {
					if s := db.CombineStats(); s.Folded-before.Folded != 3 || s.Failed != before.Failed {
						t.Fatalf("%d charges folded, %d batches failed; want 3 folded, none failed", s.Folded-before.Folded, s.Failed-before.Failed)
					}
				}
				if hot, alone := expiresAt(t, db, kind, "hot"), expiresAt(t, db, kind, "alone"); hot != want || alone != want {
					t.Fatalf("the counters expire at %d (batch) and %d (alone), %d ms and %d ms after the window began; want both at %d ms",
						hot, alone, hot-racefree.Millis(start), alone-racefree.Millis(start), want-racefree.Millis(start))
				}
				reap := func(n int64) {
					t.Helper()
					if got, err := l.Reap(ctx, db); err != nil || got != n {
						t.Fatalf("reap at %d ms into the window: %d, %v; want %d", racefree.Millis(clock.Now())-racefree.Millis(start), got, err, n)
					}
				}
				clock.Set(racefree.FromMillis(want - 1))
				reap(0)
				clock.Set(racefree.FromMillis(want))
				reap(2)
			})
		}
	})
}

// TestOutside4EdgesAWindowsBurstIsNotBound sends a consumption key again
// under a fixed and a sliding window whose Burst, which a window ignores,
// differs from the first call's: the request charges the same, so it is a
// replay, not a reused key; the counter holds the one charge.
func TestOutside4EdgesAWindowsBurstIsNotBound(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		ctx := context.Background()
		for _, kind := range []quota.Kind{quota.FixedWindow, quota.SlidingWindow} {
			p := quota.Policy{Kind: kind, Rate: 5, Per: time.Second, Wait: time.Minute}
			key, ckey := "burst-"+string(kind), "order-"+string(kind)
			if d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: key, N: 1, Policy: p, ConsumptionKey: ckey}}); err != nil || !d.Allowed || d.Replayed {
				t.Fatalf("%s, the first call: %+v, %v; want charged", kind, d, err)
			}
			p.Burst = 7
			d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: key, N: 1, Policy: p, ConsumptionKey: ckey}})
			if err != nil || !d.Replayed || !d.Allowed || d.Remaining != 4 {
				t.Errorf("%s, the key sent again with a Burst of 7: %+v, %v; want a replay with 4 remaining", kind, d, err)
			}
			if _, used := row(t, db, key, kind); used != 1 {
				t.Errorf("%s: %d used, want the one charge", kind, used)
			}
		}
	})
}

// TestOutside4EdgesRateLimitPolicyOfARoundedInterval: a GCRA bucket of 3
// at 3 per second refills a unit every ⌈1000/3⌉ = 334 ms, so it is full
// again 1002 ms after it was emptied: RateLimit-Policy says w=2 (seconds,
// rounded up), as the RateLimit field of the decision that emptied it
// says t=2, never w=1, which Per/Rate unrounded would give.
func TestOutside4EdgesRateLimitPolicyOfARoundedInterval(t *testing.T) {
	t.Parallel()
	p := quota.Policy{Name: "api", Kind: quota.GCRA, Rate: 3, Per: time.Second, Burst: 3, Wait: time.Minute}
	if got, want := p.RateLimitPolicy(), `"api";q=3;w=2`; got != want {
		t.Errorf("RateLimitPolicy: %s, want %s", got, want)
	}
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		mw, err := l.Middleware(db, p, func(*http.Request) (string, error) { return "k", nil })
		if err != nil {
			t.Fatal(err)
		}
		h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		for i, want := range []string{`"api";r=2;t=1`, `"api";r=1;t=1`, `"api";r=0;t=2`} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
			got := fmt.Sprintf("%d %s %s", w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
			if want := fmt.Sprintf("200 %s %s", `"api";q=3;w=2`, want); got != want {
				t.Errorf("request %d: %s, want %s", i+1, got, want)
			}
		}
	})
}

// TestOutside4EdgesASlidingRefusalExplainsItsOwnScope charges one key of
// a sliding window under two scopes, 1 unit in scope "a" (which sorts
// first) and the whole limit in "b": b's refusal, halfway through the
// window, comes from b's counter alone (Remaining 0, retry 700 ms later,
// when the full window before weighs 4 of 5, ResetAt two windows after
// its window began), and a still has room, alone and through the
// combiner, on each engine.
func TestOutside4EdgesASlidingRefusalExplainsItsOwnScope(t *testing.T) {
	t.Parallel()
	for _, combine := range []bool{false, true} {
		t.Run(fmt.Sprintf("combine=%v", combine), func(t *testing.T) {
			t.Parallel()
			clock, cfg := manual(t0)
			cfg.Combine = policyOf(combine)
			testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
				clock.Set(t0)
				ctx := context.Background()
				p := quota.Policy{Kind: quota.SlidingWindow, Rate: 5, Per: time.Second, Wait: time.Minute}
				ls := map[string]*quota.Limiter{}
				for _, scope := range []string{"a", "b"} {
					l, err := quota.New(db, &quota.Options{Scope: scope})
					if err != nil {
						t.Fatal(err)
					}
					ls[scope] = l
				}
				consume(t, ls["a"], db, "k", 1, p)
				consume(t, ls["b"], db, "k", 5, p)
				clock.Set(t0.Add(500 * time.Millisecond))
				d, err := ls["b"].Consume(ctx, db, "k", 1, p)
				want := quota.Decision{Remaining: 0, ResetAt: t0.Add(2 * time.Second), ResetAfter: 1500 * time.Millisecond, RetryAfter: 700 * time.Millisecond}
				if err != nil || d != want {
					t.Errorf("scope b's refusal: %+v, %v; want %+v", d, err, want)
				}
				if d := consume(t, ls["a"], db, "k", 1, p); !d.Allowed || d.Remaining != 3 {
					t.Errorf("scope a's charge: %+v, want allowed with 3 remaining", d)
				}
			})
		})
	}
}

// TestOutside4EdgesAGCRARefundLeavesTheOtherKindsAlone: one key is a full
// fixed window, a full sliding window and a GCRA bucket at once, 250 ms
// into a window; a GCRA refund of the key gives the bucket its unit back
// and leaves the windows' counters as they were: each still refuses, with
// the wait its own window says.
func TestOutside4EdgesAGCRARefundLeavesTheOtherKindsAlone(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		ctx := context.Background()
		clock.Set(t0.Add(250 * time.Millisecond))
		sliding := quota.Policy{Kind: quota.SlidingWindow, Rate: 5, Per: time.Second, Wait: time.Minute}
		consume(t, l, db, "k", 5, window)
		consume(t, l, db, "k", 5, sliding)
		consume(t, l, db, "k", 1, gcra)
		if d, err := l.Refund(ctx, db, "k", 1, gcra); err != nil || d.Remaining != gcra.Burst {
			t.Fatalf("the GCRA refund: %+v, %v; want the bucket full again", d, err)
		}
		for _, kind := range []quota.Kind{quota.FixedWindow, quota.SlidingWindow} {
			if tat, used := row(t, db, "k", kind); tat != racefree.Millis(t0) || used != 5 {
				t.Errorf("%s after the GCRA refund: window %d, %d used; want the window of t0, 5 used", kind, tat-racefree.Millis(t0), used)
			}
		}
		if d := consume(t, l, db, "k", 1, window); d.Allowed || d.RetryAfter != 750*time.Millisecond {
			t.Errorf("the fixed window after the GCRA refund: %+v, want refused for 750ms", d)
		}
		if d := consume(t, l, db, "k", 1, sliding); d.Allowed || d.RetryAfter != 950*time.Millisecond {
			t.Errorf("the sliding window after the GCRA refund: %+v, want refused for 950ms", d)
		}
	})
}
