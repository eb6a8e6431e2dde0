package quota_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/quota"
)

// The tests of this file try what the first two rounds left out: a
// policy's name and Per at their edges, GCRA's interval rounded up, a
// sliding window's key counted in the previous window alone, ConsumeAll's
// ShadowDenied and Replayed beside other requests, a consumption key
// bound to its quota key and Burst, Reap over two scopes, a sliding
// refund larger than the count, and a zoned IPv6 client.

// TestOutside2EdgesPolicyNamesAndPer holds Validate's alphabet and bounds
// of a name (1 to 64 of A-Z, a-z, 0-9, '_', '-', '.') and its whole
// milliseconds of Per: a dotted name and one of exactly 64 are taken, 65
// refused; a Per of 1.5ms is refused, by Validate and by Consume.
func TestOutside2EdgesPolicyNamesAndPer(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"api.v1", "a.b-c_d.9", strings.Repeat("n", 64)} {
		p := window
		p.Name = name
		if err := p.Validate(); err != nil {
			t.Errorf("a policy named %q: %v, want it valid", name, err)
		}
	}
	p := window
	p.Name = strings.Repeat("n", 65)
	if err := p.Validate(); !errors.Is(err, racefree.ErrInvalidInput) {
		t.Errorf("a policy name of 65 characters: %v, want ErrInvalidInput", err)
	}
	for _, kind := range []quota.Kind{quota.GCRA, quota.FixedWindow, quota.SlidingWindow} {
		p := quota.Policy{Kind: kind, Rate: 1, Per: 1500 * time.Microsecond, Burst: 1}
		if err := p.Validate(); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("%s with Per 1.5ms: %v, want ErrInvalidInput", kind, err)
		}
	}
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		p := quota.Policy{Kind: quota.FixedWindow, Rate: 1, Per: 1500 * time.Microsecond, Wait: time.Minute}
		if _, err := l.Consume(context.Background(), db, "k", 1, p); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Fatalf("consume under Per 1.5ms: %v, want ErrInvalidInput", err)
		}
	})
}

// TestOutside2EdgesGCRAIntervalIsRoundedUp charges a bucket of one under 3
// units per 10 ms, whose emission interval is ⌈10/3⌉ = 4 ms: the next unit
// is refused 3 ms later (retry in 1 ms) and allowed at exactly 4 ms, so the
// long-run rate never exceeds Rate per Per.
func TestOutside2EdgesGCRAIntervalIsRoundedUp(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		p := quota.Policy{Kind: quota.GCRA, Rate: 3, Per: 10 * time.Millisecond, Burst: 1, Wait: time.Minute}
		if d := consume(t, l, db, "k", 1, p); !d.Allowed || !d.ResetAt.Equal(t0.Add(4*time.Millisecond)) {
			t.Fatalf("the first unit: %+v; want allowed, full again in 4ms", d)
		}
		clock.Set(t0.Add(3 * time.Millisecond))
		if d := consume(t, l, db, "k", 1, p); d.Allowed || d.RetryAfter != time.Millisecond {
			t.Fatalf("a unit 3ms later: %+v; want refused, retry in 1ms", d)
		}
		clock.Set(t0.Add(4 * time.Millisecond))
		if d := consume(t, l, db, "k", 1, p); !d.Allowed {
			t.Fatalf("a unit 4ms later: %+v; want allowed", d)
		}
	})
}

// TestOutside2EdgesASlidingKeyCountedInThePreviousWindowOnly: a sliding
// window's key whose units all fell in the previous window is full again
// when that window's weight is gone, one window after the current one
// began (ResetAt), on a refusal and on a refund, which finds nothing of
// the current window to give back.
func TestOutside2EdgesASlidingKeyCountedInThePreviousWindowOnly(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		ctx := context.Background()
		p := quota.Policy{Kind: quota.SlidingWindow, Rate: 10, Per: time.Second, Wait: time.Minute}
		if d := consume(t, l, db, "k", 10, p); !d.Allowed {
			t.Fatalf("the first window's 10: %+v", d)
		}
		clock.Set(t0.Add(1500 * time.Millisecond)) // weight 5 of the previous window's 10
		want := t0.Add(2 * time.Second)
		d := consume(t, l, db, "k", 6, p)
		if d.Allowed || d.Remaining != 5 || !d.ResetAt.Equal(want) || d.ResetAfter != 500*time.Millisecond {
			t.Fatalf("6 more half a window later: %+v; want refused, 5 remaining, full again at %v", d, want)
		}
		r, err := l.Refund(ctx, db, "k", 1, p)
		if err != nil || r.Remaining != 5 || !r.ResetAt.Equal(want) {
			t.Fatalf("a refund in the next window: %+v, %v; want 5 remaining, full again at %v", r, err, want)
		}
	})
}

// TestOutside2EdgesConsumeAllCarriesShadowDeniedAndReplayed holds two of
// ConsumeAll's figures beside other requests: a shadow policy's refusal
// is ShadowDenied in the call's decision whichever request comes first,
// and a replayed consumption key makes the call Replayed also when
// another request of it was charged anew.
func TestOutside2EdgesConsumeAllCarriesShadowDeniedAndReplayed(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		ctx := context.Background()
		shadow := quota.Policy{Kind: quota.FixedWindow, Rate: 1, Per: time.Hour, Wait: time.Minute, Shadow: true}
		consume(t, l, db, "s", 1, shadow)
		for i, reqs := range [][]quota.Request{
			{{Key: "s", N: 1, Policy: shadow}, {Key: "o1", N: 1, Policy: window}},
			{{Key: "o2", N: 1, Policy: window}, {Key: "s", N: 1, Policy: shadow}},
		} {
			d, err := l.ConsumeAll(ctx, db, reqs)
			if err != nil || !d.Allowed || !d.ShadowDenied {
				t.Fatalf("order %d: a spent shadow policy beside one with room: %+v, %v; want allowed and ShadowDenied", i+1, d, err)
			}
		}

		reqs := []quota.Request{{Key: "r", N: 1, Policy: window, ConsumptionKey: "id-r"}, {Key: "fresh", N: 1, Policy: window}}
		if d, err := l.ConsumeAll(ctx, db, reqs); err != nil || !d.Allowed || d.Replayed {
			t.Fatalf("the first call: %+v, %v", d, err)
		}
		d, err := l.ConsumeAll(ctx, db, reqs)
		if err != nil || !d.Allowed || !d.Replayed {
			t.Fatalf("the call again, its consumption key replayed and its other request charged: %+v, %v; want allowed and Replayed", d, err)
		}
		if _, used := row(t, db, "fresh", quota.FixedWindow); used != 2 {
			t.Fatalf("the request without a consumption key: %d used, want 2 (charged each time)", used)
		}
	})
}

// TestOutside2EdgesAConsumptionKeyIsBoundToItsKeyAndBurst: a consumption
// key sent again for another quota key under the same policy, or under a
// GCRA policy that differs in its Burst alone, is a reused key, refused,
// and the second request is not charged.
func TestOutside2EdgesAConsumptionKeyIsBoundToItsKeyAndBurst(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		ctx := context.Background()
		if _, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "x", N: 1, Policy: window, ConsumptionKey: "order-1"}}); err != nil {
			t.Fatal(err)
		}
		_, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "y", N: 1, Policy: window, ConsumptionKey: "order-1"}})
		if !errors.Is(err, quota.ErrConsumptionKeyReused) {
			t.Errorf("the key sent for another quota key: %v, want ErrConsumptionKeyReused", err)
		}
		if _, used := row(t, db, "y", quota.FixedWindow); used != -1 {
			t.Errorf("the other quota key after the refused reuse: %d used, want no counter", used)
		}
		if _, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "b", N: 1, Policy: gcra, ConsumptionKey: "order-2"}}); err != nil {
			t.Fatal(err)
		}
		larger := gcra
		larger.Burst++
		_, err = l.ConsumeAll(ctx, db, []quota.Request{{Key: "b", N: 1, Policy: larger, ConsumptionKey: "order-2"}})
		if !errors.Is(err, quota.ErrConsumptionKeyReused) {
			t.Errorf("the key sent under a larger Burst: %v, want ErrConsumptionKeyReused", err)
		}
	})
}

// TestOutside2EdgesReapKeepsToItsScope: two Limiters of different scopes
// each hold an expired counter and an expired consumption key of one key;
// each one's Reap deletes and counts its own two rows, not the other's.
func TestOutside2EdgesReapKeepsToItsScope(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, _ *quota.Limiter, clock *racefree.ManualClock) {
		ctx := context.Background()
		var ls []*quota.Limiter
		for _, scope := range []string{"a", "b"} {
			l, err := quota.New(db, &quota.Options{Scope: scope, LedgerKeep: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "k", N: 1, Policy: window, ConsumptionKey: "c"}}); err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		clock.Advance(time.Minute)
		for i, l := range ls {
			if n, err := l.Reap(ctx, db); err != nil || n != 2 {
				t.Errorf("scope %d's reap: %d, %v; want 2 (its counter and its consumption key)", i+1, n, err)
			}
		}
	})
}

// TestOutside2EdgesASlidingRefundNeverGoesBelowZero refunds more units
// than the current window counted: the count stops at 0, so the key
// holds exactly Rate afterwards, not Rate plus what was over-refunded.
func TestOutside2EdgesASlidingRefundNeverGoesBelowZero(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		ctx := context.Background()
		p := quota.Policy{Kind: quota.SlidingWindow, Rate: 5, Per: time.Second, Wait: time.Minute}
		consume(t, l, db, "k", 2, p)
		r, err := l.Refund(ctx, db, "k", 5, p)
		if err != nil || r.Remaining != 5 {
			t.Fatalf("a refund of 5 after 2: %+v, %v; want 5 remaining", r, err)
		}
		if d := consume(t, l, db, "k", 5, p); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("the whole Rate after the refund: %+v; want allowed, 0 remaining", d)
		}
		if d := consume(t, l, db, "k", 1, p); d.Allowed {
			t.Fatalf("one more: %+v; want refused", d)
		}
	})
}

// TestOutside2EdgesKeyByIPDropsTheZone keys an IPv6 client with a zone
// (a link-local address) by its /64, as the same address without the
// zone, never by an invalid prefix that every zoned client would share.
func TestOutside2EdgesKeyByIPDropsTheZone(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"[fe80::1%eth0]:1234":       "ip:fe80::/64",
		"fe80::1%eth0":              "ip:fe80::/64",
		"[fe80::1:2:3:4%en1]:80":    "ip:fe80::/64",
		"[fe80:0:0:1::7%eth0]:1234": "ip:fe80:0:0:1::/64",
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = addr
		if got, err := quota.KeyByIP(r); err != nil || got != want {
			t.Errorf("KeyByIP(%s) = %q, %v; want %q", addr, got, err, want)
		}
	}
}
