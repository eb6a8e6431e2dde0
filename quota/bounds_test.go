package quota_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/quota"
)

// TestGCRABucketBounds: a GCRA policy whose bucket takes longer than
// MaxRefill to fill (Burst × ⌈Per/Rate⌉ ms, the products the statements
// compute) is an InputError that writes nothing, on every operation, on
// both engines, where without the bound PostgreSQL fails the charge
// (SQLSTATE 22003) and SQLite turns to floating point; at the bound, and
// with n and Burst at MaxUnits, charges decide exactly: the bucket
// empties, the next unit waits one interval, nothing goes negative.
func TestGCRABucketBounds(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		ctx := context.Background()
		perMax := quota.MaxPer.Milliseconds()
		maxBurst := quota.MaxRefill.Milliseconds() / perMax // 1 per MaxPer: T = MaxPer
		for _, c := range []struct {
			name string
			p    quota.Policy
		}{
			{"1 per MaxPer, a burst of 3×10^8 (overflows BIGINT)", quota.Policy{Kind: quota.GCRA, Rate: 1, Per: quota.MaxPer, Burst: 300_000_000}},
			{"1 per MaxPer, one past MaxRefill", quota.Policy{Kind: quota.GCRA, Rate: 1, Per: quota.MaxPer, Burst: maxBurst + 1}},
			// T = ⌈MaxPer/7⌉ rounds up: 700 × T is 500 ms past MaxRefill.
			{"7 per MaxPer, a burst of 700", quota.Policy{Kind: quota.GCRA, Rate: 7, Per: quota.MaxPer, Burst: 700}},
			{"1 per hour, a burst of MaxUnits", quota.Policy{Kind: quota.GCRA, Rate: 1, Per: time.Hour, Burst: quota.MaxUnits}},
		} {
			p := c.p
			p.Wait = time.Minute
			if err := p.Validate(); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%s: Validate: %v, want ErrInvalidInput", c.name, err)
			}
			_, err1 := l.Consume(ctx, db, "big", 1, p)
			_, err2 := l.Refund(ctx, db, "big", 1, p)
			_, err3 := l.ConsumeAll(ctx, db, []quota.Request{{Key: "big", N: 1, Policy: p}})
			_, err4 := l.Middleware(db, p, quota.KeyByIP)
			for i, err := range []error{err1, err2, err3, err4} {
				var ie *racefree.InputError
				if !errors.As(err, &ie) || ie.Field != "policy.burst" {
					t.Errorf("%s: operation %d: %v, want an InputError on policy.burst", c.name, i+1, err)
				}
			}
		}
		if tat, _ := row(t, db, "big", quota.GCRA); tat != -1 {
			t.Fatalf("a refused policy wrote a counter (tat %d)", tat)
		}

		for _, c := range []struct {
			name string
			p    quota.Policy
			t    int64 // the emission interval, ms
		}{
			{"1 per MaxPer at MaxRefill", quota.Policy{Kind: quota.GCRA, Rate: 1, Per: quota.MaxPer, Burst: maxBurst}, perMax},
			{"7 per MaxPer, a burst of 699", quota.Policy{Kind: quota.GCRA, Rate: 7, Per: quota.MaxPer, Burst: 699}, (perMax + 6) / 7},
			{"n and Burst at MaxUnits", quota.Policy{Kind: quota.GCRA, Rate: quota.MaxUnits, Per: quota.MaxUnits * time.Millisecond, Burst: quota.MaxUnits}, 1},
		} {
			clock.Set(t0)
			p, key, b := c.p, c.name, c.p.Burst
			p.Wait = time.Minute
			if err := p.Validate(); err != nil {
				t.Fatalf("%s: Validate: %v", c.name, err)
			}
			span := time.Duration(b*c.t) * time.Millisecond
			d := consume(t, l, db, key, b, p)
			if !d.Allowed || d.Remaining != 0 || !d.ResetAt.Equal(t0.Add(span)) || d.ResetAfter != span {
				t.Fatalf("%s: the whole bucket at once: %+v; want allowed, 0 remaining, full again in %s", c.name, d, span)
			}
			d = consume(t, l, db, key, 1, p)
			if d.Allowed || d.Remaining != 0 || d.RetryAfter != time.Duration(c.t)*time.Millisecond || !d.ResetAt.Equal(t0.Add(span)) {
				t.Fatalf("%s: one more unit: %+v; want denied for one interval (%d ms), 0 remaining", c.name, d, c.t)
			}
			d = consume(t, l, db, key, b, p)
			if d.Allowed || d.Remaining != 0 || d.RetryAfter != span {
				t.Fatalf("%s: the whole bucket again: %+v; want denied for %s", c.name, d, span)
			}
			if d, err := l.Refund(ctx, db, key, b, p); err != nil || d.Remaining != b {
				t.Fatalf("%s: refund of the whole bucket: %+v, %v; want %d remaining", c.name, d, err, b)
			}
			clock.Advance(span)
			if d := consume(t, l, db, key, b, p); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("%s: the whole bucket after it refilled: %+v", c.name, d)
			}
			if tat, _ := row(t, db, key, quota.GCRA); tat != racefree.Millis(t0)+2*b*c.t {
				t.Fatalf("%s: counter %d, want %d", c.name, tat, racefree.Millis(t0)+2*b*c.t)
			}
		}
	})
}
