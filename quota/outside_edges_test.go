package quota_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
)

// The tests of this file try what the earlier edges left out: two
// policies of one key that differ in their limit alone, a key counted
// under two kinds, a ConsumeAll whose requests differ in their waits,
// refusals and figures, a consumption key sent for another kind, the
// default Wait, a refunded bucket's expiry, GCRA's fastest rate, a lock
// wait of a sliding window, and a client address without a port.

// TestOutsideEdgesPoliciesOfOneKeyThatDifferInTheirLimit charges one key
// under two policies of one kind, one step and one size that differ in
// their limit alone (a GCRA Burst of 5 and 8, a fixed window's Rate of 5
// and 8), one after the other in one batch of the combiner, in either
// order, on a key whose smaller limit is spent: each charge is decided
// under its own limit, as the same charges are one after the other
// alone (on SQLite they never fold together). The two policies share
// the key's one counter: after the larger limit's charge, the smaller
// one's refusal reports 0 remaining, as it does alone.
func TestOutsideEdgesPoliciesOfOneKeyThatDifferInTheirLimit(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	cfg.Combine, cfg.CombineBatches = racefree.CombineOn, 1
	testdb.EachDSN(t, func(t *testing.T, d string) {
		clock.Set(t0)
		db := testdb.Open(t, d, cfg)
		ctx := context.Background()
		l := setup(t, db)
		for _, pair := range [][2]quota.Policy{
			{{Kind: quota.GCRA, Rate: 10, Per: time.Second, Burst: 5, Wait: time.Minute}, {Kind: quota.GCRA, Rate: 10, Per: time.Second, Burst: 8, Wait: time.Minute}},
			{{Kind: quota.FixedWindow, Rate: 5, Per: time.Second, Wait: time.Minute}, {Kind: quota.FixedWindow, Rate: 8, Per: time.Second, Wait: time.Minute}},
		} {
			for order, ps := range [][2]quota.Policy{{pair[0], pair[1]}, {pair[1], pair[0]}} {
				key, ref := fmt.Sprintf("limits-%s-%d", ps[0].Kind, order), fmt.Sprintf("limits-ref-%s-%d", ps[0].Kind, order)
				consume(t, l, db, key, 5, pair[0])
				consume(t, l, db, ref, 5, pair[0])
				want := [2]quota.Decision{consume(t, l, db, ref, 1, ps[0]), consume(t, l, db, ref, 1, ps[1])}
				if want[0].Allowed == want[1].Allowed {
					t.Fatalf("%s: the references %+v: want the small limit refused and the large one allowed, in either order", ps[0].Kind, want)
				}
				var got [2]quota.Decision
				call := func(i int) func() {
					return func() {
						var err error
						if got[i], err = l.Consume(ctx, db, key, 1, ps[i]); err != nil {
							t.Errorf("%s: charge %d: %v", key, i+1, err)
						}
					}
				}
				inTurn(t, ctx, l, db, call(0), call(1))()
				if got != want {
					t.Errorf("%s: in one batch %+v; want %+v, each under its own limit", key, got, want)
				}
			}
		}
	})
}

// TestOutsideEdgesARefusalReadsTheCounterOfItsKind counts one key as a
// GCRA bucket and as a fixed window: a fixed-window refusal reads the
// window's counter, not the bucket's (whose tat is no window's start),
// and says exactly when the window ends; the bucket's refusal reads the
// bucket's.
func TestOutsideEdgesARefusalReadsTheCounterOfItsKind(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		consume(t, l, db, "both", 1, gcra) // the bucket's tat: t0 + 100ms
		if d := consume(t, l, db, "both", 5, window); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("the window's whole limit: %+v", d)
		}
		clock.Set(t0.Add(200 * time.Millisecond))
		d, err := l.Consume(context.Background(), db, "both", 1, window)
		want := quota.Decision{ResetAt: t0.Add(time.Second), ResetAfter: 800 * time.Millisecond, RetryAfter: 800 * time.Millisecond}
		if err != nil || d != want {
			t.Fatalf("the full window's refusal: %+v, %v; want %+v", d, err, want)
		}
		consume(t, l, db, "both", 4, gcra)
		d, err = l.Consume(context.Background(), db, "both", 2, gcra)
		want = quota.Decision{Remaining: 1, ResetAt: t0.Add(600 * time.Millisecond), ResetAfter: 400 * time.Millisecond, RetryAfter: 100 * time.Millisecond}
		if err != nil || d != want {
			t.Fatalf("the bucket's refusal: %+v, %v; want %+v", d, err, want)
		}
	})
}

// TestOutsideEdgesConsumeAllCombinesItsRequestsFigures: a call of a
// daily fixed window and a per-second bucket says the key is full again
// when the later of the two is (the day's end), and, refused by both, to
// retry after the longer wait, whichever request comes first.
func TestOutsideEdgesConsumeAllCombinesItsRequestsFigures(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		l := setup(t, db)
		daily := quota.Policy{Kind: quota.FixedWindow, Rate: 1, Per: 24 * time.Hour, Wait: time.Minute}
		perSecond := quota.Policy{Kind: quota.GCRA, Rate: 1, Per: time.Second, Burst: 1, Wait: time.Minute}
		for i, reqs := range [][]quota.Request{
			{{Key: "a:day", N: 1, Policy: daily}, {Key: "a:sec", N: 1, Policy: perSecond}},
			{{Key: "b:sec", N: 1, Policy: perSecond}, {Key: "b:day", N: 1, Policy: daily}},
		} {
			d, err := l.ConsumeAll(ctx, db, reqs)
			if err != nil || !d.Allowed || d.Remaining != 0 || !d.ResetAt.Equal(t0.Add(24*time.Hour)) {
				t.Fatalf("order %d: the first call: %+v, %v; want allowed, 0 remaining, full again at the day's end", i+1, d, err)
			}
			d, err = l.ConsumeAll(ctx, db, reqs)
			if err != nil || d.Allowed || d.RetryAfter != 24*time.Hour || !d.ResetAt.Equal(t0.Add(24*time.Hour)) {
				t.Fatalf("order %d: refused by both: %+v, %v; want a retry after the day (the longer wait), full again at its end", i+1, d, err)
			}
		}
	})
}

// TestOutsideEdgesAReplayReturnsTheFiguresOfItsOwnKey: a call of two
// requests under two consumption keys stores with each key the figures
// of its own request, so that a replay of one key alone returns its
// request's Remaining and ResetAt, not the call's combined ones.
func TestOutsideEdgesAReplayReturnsTheFiguresOfItsOwnKey(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		l := setup(t, db)
		roomy := quota.Policy{Kind: quota.FixedWindow, Rate: 5, Per: time.Second, Wait: time.Minute}
		tight := quota.Policy{Kind: quota.FixedWindow, Rate: 2, Per: time.Hour, Wait: time.Minute}
		x := quota.Request{Key: "x", N: 1, Policy: roomy, ConsumptionKey: "id-x"}
		y := quota.Request{Key: "y", N: 1, Policy: tight, ConsumptionKey: "id-y"}
		d, err := l.ConsumeAll(ctx, db, []quota.Request{x, y})
		if err != nil || !d.Allowed || d.Replayed || d.Remaining != 1 || !d.ResetAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("the first call: %+v, %v; want allowed, 1 remaining, full again in an hour", d, err)
		}
		for _, c := range []struct {
			req       quota.Request
			remaining int64
			resetAt   time.Time
		}{{x, 4, t0.Add(time.Second)}, {y, 1, t0.Add(time.Hour)}} {
			d, err := l.ConsumeAll(ctx, db, []quota.Request{c.req})
			if err != nil || !d.Allowed || !d.Replayed || d.Remaining != c.remaining || !d.ResetAt.Equal(c.resetAt) {
				t.Fatalf("the replay of %s alone: %+v, %v; want replayed, %d remaining, full again at %v",
					c.req.ConsumptionKey, d, err, c.remaining, c.resetAt)
			}
		}
	})
}

// TestOutsideEdgesAConsumptionKeyIsBoundToItsKind: a consumption key
// charged for a fixed window sent again for a sliding window of the same
// Rate and Per (one dimension, the kind, changed) is a reused key,
// refused, and charges nothing.
func TestOutsideEdgesAConsumptionKeyIsBoundToItsKind(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		l := setup(t, db)
		slidingSame := window
		slidingSame.Kind = quota.SlidingWindow
		if d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "k", N: 1, Policy: window, ConsumptionKey: "order-1"}}); err != nil || !d.Allowed || d.Replayed {
			t.Fatalf("the first charge: %+v, %v", d, err)
		}
		before := snapshot(t, db, "default")
		_, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "k", N: 1, Policy: slidingSame, ConsumptionKey: "order-1"}})
		if !errors.Is(err, quota.ErrConsumptionKeyReused) {
			t.Fatalf("the key sent for a sliding window: %v, want ErrConsumptionKeyReused", err)
		}
		if after := snapshot(t, db, "default"); after != before {
			t.Fatalf("the refused reuse wrote:\n%s", after)
		}
	})
}

// TestOutsideEdgesConsumeAllFollowsItsFirstRequest holds the counters so
// that the database does not answer: ConsumeAll gives up at its first
// request's Wait (200 ms, not the next request's minute) and follows its
// first request's OnUnavailable, admitting when that is FailOpen and
// denying with ErrUnavailable when it is FailClosed, whatever the next
// request's.
func TestOutsideEdgesConsumeAllFollowsItsFirstRequest(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		short := window
		short.Wait = 200 * time.Millisecond
		long := gcra
		long.Wait = time.Minute
		// The counters exist, for PostgreSQL's holder to lock them.
		consume(t, l, db, "first", 1, short)
		consume(t, l, db, "next", 1, long)
		holdTheCounters(t, db)
		for _, open := range []bool{true, false} {
			first, next := short, long
			first.OnUnavailable, next.OnUnavailable = quota.FailClosed, quota.FailOpen
			if open {
				first.OnUnavailable, next.OnUnavailable = quota.FailOpen, quota.FailClosed
			}
			// The caller's own deadline bounds a call that waits past
			// the first request's Wait.
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
			start := time.Now()
			d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "first", N: 1, Policy: first}, {Key: "next", N: 1, Policy: next}})
			took := time.Since(start)
			cancel()
			if took > 5*time.Second {
				t.Fatalf("FailOpen first %v: the call took %s, want about the first request's Wait of 200ms", open, took)
			}
			if open && (err != nil || !d.Allowed || !d.Degraded) {
				t.Fatalf("FailOpen first: %+v, %v; want admitted, Degraded", d, err)
			}
			if !open && (!errors.Is(err, racefree.ErrUnavailable) || d.Allowed || !d.Degraded) {
				t.Fatalf("FailClosed first: %+v, %v; want denied, Degraded, ErrUnavailable", d, err)
			}
		}
	})
}

// TestOutsideEdgesTheDefaultWait: a policy without a Wait waits
// DefaultWait (one second) for a database that does not answer, then
// gives the degraded decision, well before the caller's later deadline.
func TestOutsideEdgesTheDefaultWait(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		p := window
		p.Wait = 0
		consume(t, l, db, "k", 1, p)
		holdTheCounters(t, db)
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		start := time.Now()
		d, err := l.Consume(ctx, db, "k", 1, p)
		took := time.Since(start)
		if !errors.Is(err, racefree.ErrUnavailable) || d.Allowed || !d.Degraded {
			t.Fatalf("a charge the database does not answer: %+v, %v; want denied, Degraded, ErrUnavailable", d, err)
		}
		if took < quota.DefaultWait || took > 5*time.Second {
			t.Fatalf("the charge gave up after %s, want DefaultWait (%s), not the caller's deadline", took, quota.DefaultWait)
		}
	})
}

// TestOutsideEdgesARefundedBucketIsReapedOnceFull: a GCRA bucket
// refunded back to full means the same as no counter from then on, and
// the reaper takes it at once, not when the charge's expiry would have
// come.
func TestOutsideEdgesARefundedBucketIsReapedOnceFull(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		l, err := quota.New(db, &quota.Options{Scope: "refunded"})
		if err != nil {
			t.Fatal(err)
		}
		consume(t, l, db, "b", 3, gcra) // full again at t0 + 300ms
		clock.Set(t0.Add(100 * time.Millisecond))
		if d, err := l.Refund(ctx, db, "b", 3, gcra); err != nil || d.Remaining != gcra.Burst || !d.ResetAt.Equal(clock.Now()) {
			t.Fatalf("the refund: %+v, %v; want the bucket full now", d, err)
		}
		if n, err := l.Reap(ctx, db); err != nil || n != 1 {
			t.Fatalf("reap right after the refund: %d, %v; want the refunded counter", n, err)
		}
	})
}

// TestOutsideEdgesGCRAAtOneUnitPerMillisecond: a GCRA policy of exactly
// one unit per millisecond (1000 per second), the fastest Validate
// takes, is charged, its next unit refills in exactly 1 ms; 1001 per
// second is an InputError.
func TestOutsideEdgesGCRAAtOneUnitPerMillisecond(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		fastest := quota.Policy{Kind: quota.GCRA, Rate: 1000, Per: time.Second, Burst: 2, Wait: time.Minute}
		if err := fastest.Validate(); err != nil {
			t.Fatalf("1000 per second: %v", err)
		}
		if d := consume(t, l, db, "fast", 2, fastest); !d.Allowed || d.Remaining != 0 || d.ResetAfter != 2*time.Millisecond {
			t.Fatalf("the whole burst: %+v", d)
		}
		if d := consume(t, l, db, "fast", 1, fastest); d.Allowed || d.RetryAfter != time.Millisecond {
			t.Fatalf("one past the burst: %+v, want refused for 1ms", d)
		}
		tooFast := fastest
		tooFast.Rate = 1001
		if _, err := l.Consume(context.Background(), db, "fast", 1, tooFast); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Fatalf("1001 per second: %v, want ErrInvalidInput", err)
		}
	})
}

// TestOutsideEdgesASlidingLockWaitDecidesAtTheLimit is
// TestEdgesALockWaitDecidesAtTheLimit for a sliding window, alone and
// combined: on PostgreSQL a charge that waited for a transaction's row
// lock on its counter is decided, and its refusal explained, from the
// counter that transaction committed, as the same charges on a key that
// never waited are.
func TestOutsideEdgesASlidingLockWaitDecidesAtTheLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := quota.Policy{Kind: quota.SlidingWindow, Rate: 3, Per: time.Second, Wait: time.Minute}
	for _, combine := range []bool{false, true} {
		_, cfg := manual(t0)
		cfg.Combine, cfg.CombineBatches = policyOf(combine), 1
		db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), cfg)
		l := setup(t, db)
		for i, c := range lockWaitCases {
			key, ref := fmt.Sprintf("sliding-%v-%d", combine, i), fmt.Sprintf("sliding-ref-%v-%d", combine, i)
			consume(t, l, db, key, c.u, p)
			consume(t, l, db, ref, c.u+1, p)
			want := consume(t, l, db, ref, c.n, p)
			tx, err := db.SQL().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			consume(t, l, tx, key, 1, p)
			pid := testdb.BackendPID(t, tx)
			done := make(chan struct{})
			var got quota.Decision
			go func() {
				defer close(done)
				var err error
				if got, err = l.Consume(ctx, db, key, c.n, p); err != nil {
					t.Errorf("%s: %v", key, err)
				}
			}()
			testdb.BlockedBy(t, db, pid, nil)
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			<-done
			if got != want {
				t.Errorf("%s: %d units on %d committed after the lock wait: %+v, want %+v", key, c.n, c.u+1, got, want)
			}
		}
	}
}

// TestOutsideEdgesKeyByIPWithoutAPort: a RemoteAddr that is a bare
// address, as a proxy's forwarding middleware sets it, is charged to that
// address (an IPv6 address to its /64), as with a port.
func TestOutsideEdgesKeyByIPWithoutAPort(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"192.0.2.7":                "ip:192.0.2.7",
		"::ffff:192.0.2.7":         "ip:192.0.2.7",
		"2001:db8::1":              "ip:2001:db8::/64",
		"2001:db8:0:0:abcd::9":     "ip:2001:db8::/64",
		"[2001:db8:0:0:abcd::9]:0": "ip:2001:db8::/64",
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = addr
		if got, err := quota.KeyByIP(r); err != nil || got != want {
			t.Errorf("KeyByIP(%s) = %q, %v; want %q", addr, got, err, want)
		}
	}
}
