package quota_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
)

// sliding is 5 units per second-long sliding window.
var sliding = quota.Policy{Kind: quota.SlidingWindow, Rate: 5, Per: time.Second, Wait: time.Minute}

// slidingModel is the sliding-window counter computed from the log of
// every admitted charge, not from a stored pair of counts: the units of
// the current aligned window, plus those of the previous one weighted by
// its overlap with [now − W, now], compared exactly.
type slidingModel struct {
	w, limit int64
	log      []charge
}

type charge struct{ at, n int64 }

// counts sums the log's units in the aligned window of now and in the one
// before it.
func (m *slidingModel) counts(now int64) (start, cur, last int64) {
	start = now - now%m.w
	for _, c := range m.log {
		switch {
		case c.at >= start:
			cur += c.n
		case c.at >= start-m.w:
			last += c.n
		}
	}
	return start, cur, last
}

func (m *slidingModel) fits(now, n int64) bool {
	start, cur, last := m.counts(now)
	return last*(m.w-(now-start))+(cur+n)*m.w <= m.limit*m.w
}

// remaining is the most units that fit at now, found by trying each.
func (m *slidingModel) remaining(now int64) int64 {
	r := -m.limit
	for k := m.limit; k > -m.limit; k-- {
		if m.fits(now, k) {
			return k
		}
	}
	return r
}

// first returns the first instant from now at which ok holds, by trying
// each millisecond.
func (m *slidingModel) first(now int64, ok func(int64) bool) int64 {
	for t := now; t <= now+3*m.w; t++ {
		if ok(t) {
			return t
		}
	}
	panic("never")
}

func (m *slidingModel) consume(now, n int64) quota.Decision {
	allowed := m.fits(now, n)
	if allowed {
		m.log = append(m.log, charge{now, n})
	}
	reset := m.first(now, func(t int64) bool { return m.remaining(t) == m.limit })
	d := quota.Decision{Allowed: allowed, Remaining: m.remaining(now), ResetAt: racefree.FromMillis(reset),
		ResetAfter: time.Duration(reset-now) * time.Millisecond}
	if !allowed {
		d.RetryAfter = time.Duration(m.first(now, func(t int64) bool { return m.fits(t, n) })-now) * time.Millisecond
	}
	return d
}

// TestSlidingWindowMatchesAModel drives the sliding-window counter with an
// injected clock, mostly across the windows' boundaries at the exact
// millisecond (on it, one before, one after), and compares every decision,
// denials' RetryAfter included, with slidingModel. The admitted charges
// then obey the documented bounds: at most Rate in any aligned window, and
// at most Rate + ⌊Rate × (Per − 2ms) / Per⌋ in any interval of length Per.
// Each policy takes 100 charges, 300 with RACEFREE_LONG=1.
func TestSlidingWindowMatchesAModel(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	policies := []quota.Policy{
		{Kind: quota.SlidingWindow, Rate: 5, Per: 100 * time.Millisecond, Wait: time.Minute},
		{Kind: quota.SlidingWindow, Rate: 3, Per: 7 * time.Millisecond, Wait: time.Minute},
		{Kind: quota.SlidingWindow, Rate: 12, Per: 1000 * time.Millisecond, Wait: time.Minute},
		{Kind: quota.SlidingWindow, Rate: 2, Per: time.Millisecond, Wait: time.Minute},
	}
	steps := testdb.Scale(100, 300)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		l := setup(t, db)
		rng := rand.New(rand.NewPCG(3, 4))
		for i, p := range policies {
			clock.Set(t0.Add(time.Duration(rng.IntN(1000)) * time.Millisecond))
			w := p.Per.Milliseconds()
			m := slidingModel{w: w, limit: p.Rate}
			key := fmt.Sprintf("sliding-%d", i)
			for step := range steps {
				now := racefree.Millis(clock.Now())
				toBoundary := w - now%w
				switch rng.IntN(7) {
				case 0:
					clock.Advance(time.Duration(toBoundary) * time.Millisecond)
				case 1:
					clock.Advance(time.Duration(toBoundary-1) * time.Millisecond)
				case 2:
					clock.Advance(time.Duration(toBoundary+1) * time.Millisecond)
				case 3:
					clock.Advance(time.Duration(rng.Int64N(w+1)) * time.Millisecond)
				case 4:
					clock.Advance(time.Duration(toBoundary+w+rng.Int64N(2)) * time.Millisecond) // skip a window
				}
				n := 1 + rng.Int64N(p.Rate)
				if rng.IntN(2) == 0 {
					n = 1
				}
				now = racefree.Millis(clock.Now())
				want := m.consume(now, n)
				got := consume(t, l, db, key, n, p)
				if got != want {
					t.Fatalf("policy %d step %d at +%dms (%dms into its window), n %d: got %+v, want %+v", i, step, now-racefree.Millis(t0), now%w, n, got, want)
				}
			}
			slidingBounds(t, p, m.log)
		}
	})
}

// slidingBounds checks the documented bounds on the admitted charges.
func slidingBounds(t *testing.T, p quota.Policy, log []charge) {
	t.Helper()
	w, limit := p.Per.Milliseconds(), p.Rate
	sliding := limit
	if w >= 2 {
		sliding = limit + limit*(w-2)/w
	}
	for _, from := range log {
		var aligned, interval int64
		for _, c := range log {
			if c.at/w == from.at/w {
				aligned += c.n
			}
			if c.at >= from.at && c.at < from.at+w {
				interval += c.n
			}
		}
		if aligned > limit {
			t.Fatalf("%d units in the window of %d, more than the limit %d", aligned, from.at, limit)
		}
		if interval > sliding {
			t.Fatalf("%d units in [%d, %d), more than %d", interval, from.at, from.at+w, sliding)
		}
	}
}

// TestSlidingWindowConcurrentAdmitsWhatTheModelSays: 40 units charged in
// one window weigh 20 halfway through the next, so of 200 concurrent
// charges of one unit at a limit of 50 exactly 30 are admitted, on each
// engine, and each denial says when to retry.
func TestSlidingWindowConcurrentAdmitsWhatTheModelSays(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	p := quota.Policy{Kind: quota.SlidingWindow, Rate: 50, Per: time.Hour, Wait: 2 * time.Minute}
	testdb.EachPath(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0.Add(10 * time.Minute))
		l := setup(t, db)
		m := slidingModel{w: p.Per.Milliseconds(), limit: p.Rate}
		m.log = append(m.log, charge{racefree.Millis(clock.Now()), 40})
		consume(t, l, db, "hot", 40, p)
		clock.Set(t0.Add(90 * time.Minute))
		want := 0
		for now := racefree.Millis(clock.Now()); m.fits(now, 1); want++ {
			m.log = append(m.log, charge{now, 1})
		}
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
					t.Error(err)
				}
				if d.Allowed {
					allowed++
				} else if d.RetryAfter <= 0 {
					t.Errorf("denied with RetryAfter %s", d.RetryAfter)
				}
			}()
		}
		wg.Wait()
		if got := allowed; got != want || want != 30 {
			t.Fatalf("%d of 200 allowed, the model says %d (want 30)", got, want)
		}
	})
}

func TestSlidingWindowDenialWritesNothingAndSaysExactlyWhen(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	p := quota.Policy{Kind: quota.SlidingWindow, Rate: 10, Per: time.Second, Wait: time.Minute}
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		l := setup(t, db)
		if d := consume(t, l, db, "s", 10, p); !d.Allowed || d.Remaining != 0 || !d.ResetAt.Equal(t0.Add(2*time.Second)) {
			t.Fatalf("10 units: %+v", d)
		}
		tat, used := row(t, db, "s", quota.SlidingWindow)
		clock.Set(t0.Add(500 * time.Millisecond))
		// Nothing fits before the next window, where the 10 units weigh
		// 10 × (1000 − e) / 1000: one more fits from e = 100 ms on.
		want := quota.Decision{Remaining: 0, ResetAt: t0.Add(2 * time.Second), ResetAfter: 1500 * time.Millisecond, RetryAfter: 600 * time.Millisecond}
		if got := consume(t, l, db, "s", 1, p); got != want {
			t.Fatalf("denial: %+v, want %+v", got, want)
		}
		if gotTat, gotUsed := row(t, db, "s", quota.SlidingWindow); gotTat != tat || gotUsed != used {
			t.Fatalf("denial wrote: (%d, %d), was (%d, %d)", gotTat, gotUsed, tat, used)
		}
		clock.Set(t0.Add(1099 * time.Millisecond))
		if d := consume(t, l, db, "s", 1, p); d.Allowed || d.RetryAfter != time.Millisecond {
			t.Fatalf("1 ms early: %+v, want denied for 1ms", d)
		}
		clock.Set(t0.Add(1100 * time.Millisecond))
		if d := consume(t, l, db, "s", 1, p); !d.Allowed || d.Remaining != 0 || !d.ResetAt.Equal(t0.Add(3*time.Second)) {
			t.Fatalf("on time: %+v, want allowed with 0 remaining, full at +3s", d)
		}
		if d := consume(t, l, db, "s", 1, p); d.Allowed || d.RetryAfter != 100*time.Millisecond {
			t.Fatalf("the next unit: %+v, want denied for 100ms", d)
		}
		// Two windows on, nothing counts.
		clock.Set(t0.Add(3 * time.Second))
		if d := consume(t, l, db, "s", 10, p); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("two windows on: %+v, want all 10 allowed", d)
		}
	})
}

func TestSlidingWindowInput(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := setup(t, db)
		huge := quota.Policy{Kind: quota.SlidingWindow, Rate: quota.MaxUnits, Per: 30 * 24 * time.Hour}
		for _, c := range []struct {
			n int64
			p quota.Policy
		}{{6, sliding}, {0, sliding}, {1, huge}} {
			if _, err := l.Consume(context.Background(), db, "k", c.n, c.p); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Consume(%d, %+v): %v, want ErrInvalidInput", c.n, c.p, err)
			}
			if _, err := l.Refund(context.Background(), db, "k", c.n, c.p); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Refund(%d, %+v): %v, want ErrInvalidInput", c.n, c.p, err)
			}
			if _, err := l.ConsumeAll(context.Background(), db, []quota.Request{{Key: "k", N: c.n, Policy: c.p}}); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("ConsumeAll(%d, %+v): %v, want ErrInvalidInput", c.n, c.p, err)
			}
		}
		if tat, _ := row(t, db, "k", quota.SlidingWindow); tat != -1 {
			t.Fatalf("bad input wrote a counter")
		}
		// The largest product that fits is accepted.
		ok := quota.Policy{Kind: quota.SlidingWindow, Rate: (1 << 61) / (366 * 24 * 3600 * 1000), Per: quota.MaxPer, Wait: time.Minute}
		if d, err := l.Consume(context.Background(), db, "k", ok.Rate, ok); err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("the largest sliding window: %+v, %v", d, err)
		}
	})
}

// TestSlidingWindowConsumeAllAndShadow: a sliding window joins ConsumeAll's
// all-or-nothing, and a Shadow sliding window never denies and charges
// nothing when its limit refuses.
func TestSlidingWindowConsumeAllAndShadow(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		ctx := context.Background()
		reqs := []quota.Request{{Key: "a", N: 2, Policy: sliding}, {Key: "a", N: 2, Policy: window}}
		for i := range 2 {
			if d, err := l.ConsumeAll(ctx, db, reqs); err != nil || !d.Allowed {
				t.Fatalf("request %d: %+v, %v", i+1, d, err)
			}
		}
		tat, used := row(t, db, "a", quota.SlidingWindow)
		// 4 + 2 > 5: the sliding window refuses, the fixed window is not charged.
		if d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "a", N: 1, Policy: window}, {Key: "a", N: 2, Policy: sliding}}); err != nil || d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("over the sliding limit: %+v, %v", d, err)
		}
		if _, u := row(t, db, "a", quota.FixedWindow); u != 4 {
			t.Fatalf("the fixed window was charged by a denied request: used %d, want 4", u)
		}
		if gotTat, gotUsed := row(t, db, "a", quota.SlidingWindow); gotTat != tat || gotUsed != used {
			t.Fatalf("denial wrote: (%d, %d), was (%d, %d)", gotTat, gotUsed, tat, used)
		}
		p := sliding
		p.Shadow = true
		d := consume(t, l, db, "a", 2, p)
		if !d.Allowed || !d.ShadowDenied || d.RetryAfter <= 0 {
			t.Fatalf("shadow over the limit: %+v", d)
		}
		if _, gotUsed := row(t, db, "a", quota.SlidingWindow); gotUsed != used {
			t.Fatalf("shadow denial charged: used %d, was %d", gotUsed, used)
		}
	})
}

// TestSlidingWindowRefund: a refund gives back units of the current
// window only, never above the limit.
func TestSlidingWindowRefund(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		ctx := context.Background()
		consume(t, l, db, "r", 4, sliding)
		clock.Set(t0.Add(1500 * time.Millisecond))
		// The 4 units now weigh 2 and cannot be refunded: they are the
		// previous window's.
		consume(t, l, db, "r", 2, sliding)
		d, err := l.Refund(ctx, db, "r", 5, sliding)
		if err != nil || d.Remaining != 3 {
			t.Fatalf("refund of 5 after 2 charged: %+v, %v; want 3 remaining", d, err)
		}
		if d := consume(t, l, db, "r", 4, sliding); d.Allowed {
			t.Fatalf("4 units with 3 remaining: %+v", d)
		}
		if d := consume(t, l, db, "r", 3, sliding); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("3 units with 3 remaining: %+v", d)
		}
		// Halfway through the next window those 3 units weigh
		// ⌈3 × 500 / 1000⌉ = 2: they are the previous window's and cannot
		// be refunded.
		clock.Set(t0.Add(2500 * time.Millisecond))
		if d, err := l.Refund(ctx, db, "r", 1, sliding); err != nil || d.Remaining != 3 {
			t.Fatalf("refund of the previous window's units: %+v, %v; want nothing refunded, 3 remaining", d, err)
		}
	})
}

// TestSlidingWindowNeedsItsMigration: before migration 016 a sliding
// window is ErrSchemaOutdated and writes nothing, while the other kinds
// work; after it, it works.
func TestSlidingWindowNeedsItsMigration(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated, Clock: racefree.NewManualClock(t0)})
		if _, err := db.MigrateUpTo(ctx, quota.SlidingWindowMigration-1); err != nil {
			t.Fatal(err)
		}
		l := setup(t, db)
		_, err1 := l.Consume(ctx, db, "k", 1, sliding)
		_, err2 := l.Refund(ctx, db, "k", 1, sliding)
		_, err3 := l.ConsumeAll(ctx, db, []quota.Request{{Key: "k", N: 1, Policy: sliding}})
		for i, err := range []error{err1, err2, err3} {
			if !errors.Is(err, racefree.ErrSchemaOutdated) {
				t.Errorf("operation %d before migration %d: %v, want ErrSchemaOutdated", i+1, quota.SlidingWindowMigration, err)
			}
		}
		if n := rowsOf(t, db, "racefree_quotas", ""); n != 0 {
			t.Fatalf("%d rows written, want none", n)
		}
		if d, err := l.Consume(ctx, db, "k", 1, window); err != nil || !d.Allowed {
			t.Fatalf("a fixed window before migration %d: %+v, %v", quota.SlidingWindowMigration, d, err)
		}
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		if d, err := l.Consume(ctx, db, "k", 1, sliding); err != nil || !d.Allowed || d.Remaining != 4 {
			t.Fatalf("after migration %d: %+v, %v", quota.SlidingWindowMigration, d, err)
		}
		// The fixed window's counter survived the migration (SQLite
		// rebuilds the table): one unit before, one now.
		if d, err := l.Consume(ctx, db, "k", 1, window); err != nil || !d.Allowed || d.Remaining != 3 {
			t.Fatalf("the fixed window's counter after migration %d: %+v, %v; want 3 remaining", quota.SlidingWindowMigration, d, err)
		}
	})
}

// TestSlidingWindowMiddlewareHeaders: the RateLimit headers of a sliding
// window name its limit and window, and count down to the instant nothing
// is counted any more.
func TestSlidingWindowMiddlewareHeaders(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		p := quota.Policy{Name: "s", Kind: quota.SlidingWindow, Rate: 2, Per: 1500 * time.Millisecond, Wait: time.Minute}
		mw, err := l.Middleware(db, p, func(*http.Request) (string, error) { return "k", nil })
		if err != nil {
			t.Fatal(err)
		}
		h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		for i, want := range []struct {
			status                int
			rateLimit, retryAfter string
			retryAfterMs          string
		}{
			{200, `"s";r=1;t=3`, "", ""}, // nothing counted 2 windows on: 3 s
			{200, `"s";r=0;t=3`, "", ""},
			{429, `"s";r=0;t=3`, "3", `"retry_after_ms":2250`}, // 2 units weigh 1 from 750 ms into the next window
		} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
			if w.Code != want.status || w.Header().Get("RateLimit") != want.rateLimit || w.Header().Get("Retry-After") != want.retryAfter ||
				!strings.Contains(w.Body.String(), want.retryAfterMs) {
				t.Fatalf("request %d: %d RateLimit %q Retry-After %q %s; want %+v", i+1, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"), w.Body, want)
			}
			if got, want := w.Header().Get("RateLimit-Policy"), `"s";q=2;w=2`; got != want {
				t.Fatalf("RateLimit-Policy %q, want %q", got, want)
			}
		}
	})
}

// TestSlidingWindowReapKeepsWhatStillCounts: a sliding-window counter is
// reaped from the first millisecond it counts nothing, two windows after
// its last charge's window began, and not before: a reap in the next
// window leaves the units that still weigh on it.
func TestSlidingWindowReapKeepsWhatStillCounts(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0.Add(900 * time.Millisecond))
		ctx := context.Background()
		l := setup(t, db)
		consume(t, l, db, "s", 5, sliding)
		clock.Set(t0.Add(1999 * time.Millisecond))
		if n, err := l.Reap(ctx, db); err != nil || n != 0 {
			t.Fatalf("reap while the units still weigh: %d, %v; want 0", n, err)
		}
		// 999 ms into the next window the 5 units still weigh 5 × 1 / 1000:
		// 5 more do not fit before it ends.
		if d := consume(t, l, db, "s", 5, sliding); d.Allowed || d.RetryAfter != time.Millisecond {
			t.Fatalf("after the reap: %+v, want denied for 1ms", d)
		}
		clock.Set(t0.Add(2 * time.Second))
		if n, err := l.Reap(ctx, db); err != nil || n != 1 {
			t.Fatalf("reap once nothing counts: %d, %v; want 1", n, err)
		}
		if d := consume(t, l, db, "s", 5, sliding); !d.Allowed {
			t.Fatalf("reaped key: %+v", d)
		}
	})
}
