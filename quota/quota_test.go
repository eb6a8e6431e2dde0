package quota_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// gcra is 10 units per second (one every 100 ms), bursts of 5.
var gcra = quota.Policy{Kind: quota.GCRA, Rate: 10, Per: time.Second, Burst: 5, Wait: time.Minute}

// window is 5 units per second-long window.
var window = quota.Policy{Kind: quota.FixedWindow, Rate: 5, Per: time.Second, Wait: time.Minute}

func setup(t *testing.T, db *racefree.DB) *quota.Limiter {
	t.Helper()
	l, err := quota.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func manual(at time.Time) (*racefree.ManualClock, *racefree.Config) {
	c := racefree.NewManualClock(at)
	return c, &racefree.Config{Clock: c}
}

// eachOnAClock runs body on each engine (testdb.Each, one after another)
// with a limiter, on a manual clock set to t0 as each engine's run begins.
func eachOnAClock(t *testing.T, body func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock)) {
	t.Helper()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		body(t, db, setup(t, db), clock)
	})
}

// row reads the counter of key, or -1s when it has none.
func row(t *testing.T, db *racefree.DB, key string, kind quota.Kind) (tat, used int64) {
	t.Helper()
	q := `SELECT tat, used FROM racefree_quotas WHERE key = ? AND kind = ?`
	if db.Engine() == racefree.Postgres {
		q = `SELECT tat, used FROM racefree_quotas WHERE key = $1 AND kind = $2`
	}
	err := db.QueryRowContext(context.Background(), q, key, string(kind)).Scan(&tat, &used)
	if errors.Is(err, sql.ErrNoRows) {
		return -1, -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return tat, used
}

func consume(t *testing.T, l *quota.Limiter, db racefree.Executor, key string, n int64, p quota.Policy) quota.Decision {
	t.Helper()
	d, err := l.Consume(context.Background(), db, key, n, p)
	if err != nil {
		t.Fatalf("consume %s %d: %v", key, n, err)
	}
	return d
}

func TestConcurrentConsumeAdmitsExactlyTheLimit(t *testing.T) {
	t.Parallel()
	_, cfg := manual(t0)
	limits := []quota.Policy{
		{Kind: quota.GCRA, Rate: 1, Per: time.Hour, Burst: 50, Wait: 2 * time.Minute},
		{Kind: quota.FixedWindow, Rate: 50, Per: time.Hour, Wait: 2 * time.Minute},
		{Kind: quota.SlidingWindow, Rate: 50, Per: time.Hour, Wait: 2 * time.Minute},
	}
	testdb.EachPath(t, cfg, func(t *testing.T, db *racefree.DB) {
		l := setup(t, db)
		for _, p := range limits {
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				allowed int
			)
			for range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d, err := l.Consume(context.Background(), db, "hot", 1, p)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						t.Errorf("%s: %v", p.Kind, err)
					}
					if d.Allowed {
						allowed++
					} else if d.RetryAfter <= 0 {
						t.Errorf("%s: denied with RetryAfter %s", p.Kind, d.RetryAfter)
					}
				}()
			}
			wg.Wait()
			if got, want := allowed, 50; got != want {
				t.Fatalf("%s: %d of 200 allowed, want %d", p.Kind, got, want)
			}
		}
	})
}

func TestGCRADenialWritesNothingAndSaysExactlyWhen(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.EachPath(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		l := setup(t, db)
		for i := range 5 {
			d := consume(t, l, db, "k", 1, gcra)
			if !d.Allowed || d.Remaining != int64(4-i) {
				t.Fatalf("charge %d: %+v, want allowed with %d remaining", i+1, d, 4-i)
			}
		}
		tat, used := row(t, db, "k", quota.GCRA)
		d := consume(t, l, db, "k", 1, gcra)
		if got, want := d, (quota.Decision{RetryAfter: 100 * time.Millisecond, ResetAt: t0.Add(500 * time.Millisecond), ResetAfter: 500 * time.Millisecond}); got != want {
			t.Fatalf("denial: %+v, want %+v", got, want)
		}
		if gotTat, gotUsed := row(t, db, "k", quota.GCRA); gotTat != tat || gotUsed != used {
			t.Fatalf("denial wrote: (%d, %d), was (%d, %d)", gotTat, gotUsed, tat, used)
		}
		d = consume(t, l, db, "k", 3, gcra)
		if got, want := d.RetryAfter, 300*time.Millisecond; d.Allowed || got != want {
			t.Fatalf("3 units: %+v, want denied for %s", d, want)
		}
		clock.Advance(99 * time.Millisecond)
		if d := consume(t, l, db, "k", 1, gcra); d.Allowed || d.RetryAfter != time.Millisecond {
			t.Fatalf("1 ms early: %+v, want denied for 1ms", d)
		}
		clock.Advance(time.Millisecond)
		if d := consume(t, l, db, "k", 1, gcra); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("on time: %+v, want allowed with 0 remaining", d)
		}
	})
}

func TestFixedWindowDenialWritesNothingAndSaysExactlyWhen(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0.Add(250 * time.Millisecond))
	testdb.EachPath(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0.Add(250 * time.Millisecond))
		l := setup(t, db)
		if d := consume(t, l, db, "w", 4, window); !d.Allowed || d.Remaining != 1 || !d.ResetAt.Equal(t0.Add(time.Second)) {
			t.Fatalf("4 units: %+v", d)
		}
		tat, used := row(t, db, "w", quota.FixedWindow)
		if d := consume(t, l, db, "w", 2, window); d.Allowed || d.RetryAfter != 750*time.Millisecond || d.Remaining != 1 {
			t.Fatalf("2 more units: %+v, want denied for 750ms with 1 remaining", d)
		}
		if gotTat, gotUsed := row(t, db, "w", quota.FixedWindow); gotTat != tat || gotUsed != used {
			t.Fatalf("denial wrote: (%d, %d), was (%d, %d)", gotTat, gotUsed, tat, used)
		}
		if d := consume(t, l, db, "w", 1, window); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("last unit: %+v", d)
		}
		clock.Set(t0.Add(999 * time.Millisecond))
		if d := consume(t, l, db, "w", 1, window); d.Allowed || d.RetryAfter != time.Millisecond {
			t.Fatalf("at the window's last ms: %+v", d)
		}
		clock.Set(t0.Add(time.Second))
		if d := consume(t, l, db, "w", 5, window); !d.Allowed || d.Remaining != 0 || !d.ResetAt.Equal(t0.Add(2*time.Second)) {
			t.Fatalf("next window: %+v", d)
		}
	})
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := setup(t, db)
		cases := []struct {
			key string
			n   int64
			p   quota.Policy
		}{
			{"k", 6, gcra},   // more than the burst
			{"k", 6, window}, // more than the window's limit
			{"k", 6, sliding},
			{"k", 0, gcra},
			{"", 1, gcra},
			{"a\x00b", 1, gcra},
			{"\xff", 1, gcra},
			{"k", 1, quota.Policy{Kind: "leaky", Rate: 1, Per: time.Second, Burst: 1}},
			{"k", 1, quota.Policy{Kind: quota.GCRA, Rate: 2000, Per: time.Second, Burst: 1}},
			{"k", 1, quota.Policy{Kind: quota.GCRA, Rate: 1, Per: time.Second}},
			{"k", 1, quota.Policy{Kind: quota.FixedWindow, Rate: 1, Per: 1500 * time.Microsecond}},
		}
		for _, c := range cases {
			if _, err := l.Consume(context.Background(), db, c.key, c.n, c.p); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Consume(%q, %d, %+v): %v, want ErrInvalidInput", c.key, c.n, c.p, err)
			}
			if _, err := l.Refund(context.Background(), db, c.key, c.n, c.p); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Refund(%q, %d, %+v): %v, want ErrInvalidInput", c.key, c.n, c.p, err)
			}
		}
		var n int
		if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM racefree_quotas`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d rows, %v; want none", n, err)
		}
	})
}

func TestRefundNeverAboveTheLimit(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		for _, p := range []quota.Policy{gcra, window, sliding} {
			consume(t, l, db, "r", 2, p)
			d, err := l.Refund(context.Background(), db, "r", 5, p)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := d.Remaining, int64(5); got != want {
				t.Fatalf("%s: after refunding 5 of 2 charged, %d remaining, want %d", p.Kind, got, want)
			}
			if d := consume(t, l, db, "r", 5, p); !d.Allowed {
				t.Fatalf("%s: the full limit after a refund: %+v", p.Kind, d)
			}
			if d := consume(t, l, db, "r", 1, p); d.Allowed {
				t.Fatalf("%s: one above the limit after a refund: %+v", p.Kind, d)
			}
			d, err = l.Refund(context.Background(), db, "r", 2, p)
			if err != nil || d.Remaining != 2 {
				t.Fatalf("%s: refund 2 of an empty key: %+v, %v; want 2 remaining", p.Kind, d, err)
			}
			if d, err := l.Refund(context.Background(), db, "none", 1, p); err != nil || d.Remaining != 5 {
				t.Fatalf("%s: refund of a key with no counter: %+v, %v", p.Kind, d, err)
			}
		}
	})
}

func TestConsumeAllChargesAllOrNone(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		perSecond := quota.Policy{Kind: quota.GCRA, Rate: 3, Per: 3 * time.Second, Burst: 3, Wait: time.Minute}
		daily := quota.Policy{Kind: quota.FixedWindow, Rate: 4, Per: 24 * time.Hour, Wait: time.Minute}
		reqs := []quota.Request{{Key: "u:sec", N: 1, Policy: perSecond}, {Key: "u:day", N: 1, Policy: daily}}
		ctx := context.Background()
		for i := range 3 {
			if d, err := l.ConsumeAll(ctx, db, reqs); err != nil || !d.Allowed {
				t.Fatalf("request %d: %+v, %v", i+1, d, err)
			}
		}
		before, _ := row(t, db, "u:day", quota.FixedWindow)
		_, usedBefore := row(t, db, "u:day", quota.FixedWindow)
		d, err := l.ConsumeAll(ctx, db, reqs)
		if err != nil || d.Allowed || d.RetryAfter != time.Second {
			t.Fatalf("4th request: %+v, %v; want denied for 1s by the per-second policy", d, err)
		}
		if tat, used := row(t, db, "u:day", quota.FixedWindow); tat != before || used != usedBefore {
			t.Fatalf("the daily policy was charged by a denied request: used %d, was %d", used, usedBefore)
		}
		// On the caller's transaction, under a savepoint: the caller's own
		// writes survive a denial and commit with the charges of a success.
		clock.Advance(time.Second)
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `CREATE TABLE app (v INTEGER)`); err != nil {
				return err
			}
			if d, err := l.ConsumeAll(ctx, tx, reqs); err != nil || !d.Allowed {
				return fmt.Errorf("5th request: %+v, %v", d, err)
			}
			if d, err := l.ConsumeAll(ctx, tx, []quota.Request{{Key: "u:day", N: 1, Policy: daily}, {Key: "u:sec", N: 1, Policy: perSecond}}); err != nil || d.Allowed {
				return fmt.Errorf("6th request: %+v, %v; want denied", d, err)
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO app VALUES (1)`)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, used := row(t, db, "u:day", quota.FixedWindow); used != 4 {
			t.Fatalf("daily used %d, want 4", used)
		}
	})
}

func TestConsumptionKeyChargesOnce(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		ctx := context.Background()
		req := []quota.Request{{Key: "c", N: 2, Policy: gcra, ConsumptionKey: "order-1"}}
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			replayed int
		)
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := l.ConsumeAll(ctx, db, req)
				mu.Lock()
				defer mu.Unlock()
				if err != nil || !d.Allowed || d.Remaining != 3 {
					t.Errorf("replay: %+v, %v; want allowed, 3 remaining", d, err)
				}
				if d.Replayed {
					replayed++
				}
			}()
		}
		wg.Wait()
		if replayed != 19 {
			t.Fatalf("%d of 20 replayed, want 19", replayed)
		}
		if d := consume(t, l, db, "c", 1, gcra); d.Remaining != 2 {
			t.Fatalf("after 20 sends of one consumption key: %+v, want 2 remaining (charged once)", d)
		}
		// A denial records nothing: the same key charges once there is room.
		deny := []quota.Request{{Key: "c", N: 4, Policy: gcra, ConsumptionKey: "order-2"}}
		if d, err := l.ConsumeAll(ctx, db, deny); err != nil || d.Allowed {
			t.Fatalf("too large: %+v, %v", d, err)
		}
		clock.Advance(200 * time.Millisecond)
		if d, err := l.ConsumeAll(ctx, db, deny); err != nil || !d.Allowed || d.Replayed {
			t.Fatalf("retry after the denial: %+v, %v; want a first charge", d, err)
		}
	})
}

func TestShadowModeNeverDenies(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		p := gcra
		p.Shadow = true
		consume(t, l, db, "s", 5, p)
		tat, _ := row(t, db, "s", quota.GCRA)
		d := consume(t, l, db, "s", 1, p)
		if !d.Allowed || !d.ShadowDenied || d.RetryAfter != 100*time.Millisecond {
			t.Fatalf("shadow over the limit: %+v, want allowed, ShadowDenied, RetryAfter 100ms", d)
		}
		if got, _ := row(t, db, "s", quota.GCRA); got != tat {
			t.Fatalf("shadow denial charged: tat %d, was %d", got, tat)
		}
	})
}

// model is a token bucket in integer milliseconds of refill: level ms of
// credit, at most burst*T, one unit costing T. It is GCRA written the
// other way round, to check the statements against.
type model struct {
	level, at int64
	started   bool
}

func (m *model) consume(p quota.Policy, now, n int64) quota.Decision {
	t := (p.Per.Milliseconds() + p.Rate - 1) / p.Rate
	full := p.Burst * t
	if !m.started {
		m.level, m.started = full, true
	} else {
		m.level = min(full, m.level+now-m.at)
	}
	m.at = now
	if m.level >= n*t {
		m.level -= n * t
		return quota.Decision{Allowed: true, Remaining: m.level / t, ResetAt: racefree.FromMillis(now + full - m.level),
			ResetAfter: time.Duration(full-m.level) * time.Millisecond}
	}
	return quota.Decision{Remaining: m.level / t, ResetAt: racefree.FromMillis(now + full - m.level),
		ResetAfter: time.Duration(full-m.level) * time.Millisecond,
		RetryAfter: time.Duration(n*t-m.level) * time.Millisecond}
}

func TestGCRAMatchesATokenBucketModel(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	policies := []quota.Policy{
		{Kind: quota.GCRA, Rate: 10, Per: time.Second, Burst: 5, Wait: time.Minute},
		{Kind: quota.GCRA, Rate: 3, Per: time.Second, Burst: 4, Wait: time.Minute}, // T rounds up to 334 ms
		{Kind: quota.GCRA, Rate: 1, Per: 7 * time.Millisecond, Burst: 1, Wait: time.Minute},
	}
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		l := setup(t, db)
		rng := rand.New(rand.NewPCG(1, 2))
		for i, p := range policies {
			clock.Set(t0)
			var m model
			key := fmt.Sprintf("prop-%d", i)
			t_ := (p.Per.Milliseconds() + p.Rate - 1) / p.Rate
			for step := range 300 {
				// Mostly steps around the boundaries: exactly T, one ms
				// either side, or nothing.
				switch rng.IntN(5) {
				case 0:
					clock.Advance(time.Duration(t_) * time.Millisecond)
				case 1:
					clock.Advance(time.Duration(t_-1) * time.Millisecond)
				case 2:
					clock.Advance(time.Duration(t_+1) * time.Millisecond)
				case 3:
					clock.Advance(time.Duration(rng.Int64N(3*t_*p.Burst)) * time.Millisecond)
				}
				n := 1 + rng.Int64N(p.Burst)
				now := racefree.Millis(clock.Now())
				want := m.consume(p, now, n)
				got := consume(t, l, db, key, n, p)
				if got != want {
					t.Fatalf("policy %d step %d at +%dms, n %d: got %+v, want %+v", i, step, now-racefree.Millis(t0), n, got, want)
				}
			}
		}
	})
}
