package dedup_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/internal/testing/testdb"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func each(t *testing.T, body func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB)) {
	t.Helper()
	eachWith(t, racefree.CombineDefault, body)
}

// eachWith is each with the combiner's policy set: CombineOff for a test
// of a call alone on the pool.
func eachWith(t *testing.T, combine racefree.CombinePolicy, body func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB)) {
	t.Helper()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock, Combine: combine}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		body(t, dedup.New(db), clock, db)
	})
}

// observeAll has n goroutines observe ev at once.
func observeAll(t *testing.T, log *dedup.Log, db *racefree.DB, ev dedup.Event, n int, window time.Duration) []*dedup.Observation {
	t.Helper()
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out []*dedup.Observation
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := log.Observe(context.Background(), db, ev, window)
			if err != nil {
				t.Errorf("observe: %v", err)
				return
			}
			mu.Lock()
			out = append(out, o)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func winners(obs []*dedup.Observation) (w []*dedup.Observation) {
	for _, o := range obs {
		if o.Process {
			w = append(w, o)
		}
	}
	return w
}

func TestOneProcessorPerWindowAndExactCounts(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		const n = 64
		window := time.Minute
		ev := dedup.Event{Source: "billing", Level: "error", Message: "charge 1234 failed: timeout after 3012ms"}
		first := observeAll(t, log, db, ev, n, window)
		if w := winners(first); len(w) != 1 || w[0].Fence != 1 {
			t.Fatalf("window 1: %d processors; want exactly 1 with fence 1", len(w))
		}
		counts := make([]int, 0, n)
		for _, o := range first {
			counts = append(counts, int(o.Count))
		}
		sort.Ints(counts)
		for i, c := range counts {
			if c != i+1 {
				t.Fatalf("counts seen by the observers are %v; want each of 1..%d once", counts, n)
			}
		}

		clock.Advance(window)
		second := observeAll(t, log, db, dedup.Event{Source: "billing", Level: "error", Message: "Charge 99 failed: timeout after 15ms"}, n, window)
		w := winners(second)
		if len(w) != 1 || w[0].Fence != 2 {
			t.Fatalf("window 2: %d processors; want exactly 1 with fence 2", len(w))
		}
		if w[0].Fingerprint != first[0].Fingerprint {
			t.Fatal("normalised variants of one message must share a fingerprint")
		}
		last, err := log.Observe(context.Background(), db, ev, window)
		if err != nil || last.Count != 2*n+1 || !last.FirstSeen.Equal(t0) || !last.LastSeen.Equal(t0.Add(window)) {
			t.Fatalf("figures: %+v, %v", last, err)
		}
	})
}

func TestRecordOnlyAtTheCurrentFence(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		ev := dedup.Event{Source: "s", Level: "warn", Message: "disk full", Fingerprint: "disk-full"}
		o1, err := log.Observe(ctx, db, ev, time.Minute)
		if err != nil || !o1.Process {
			t.Fatalf("%+v, %v", o1, err)
		}
		clock.Advance(time.Minute)
		o2, err := log.Observe(ctx, db, ev, time.Minute)
		if err != nil || !o2.Process || o2.Fence != o1.Fence+1 {
			t.Fatalf("re-election: %+v, %v", o2, err)
		}
		// The stalled first winner comes back.
		err = log.Record(ctx, db, "disk-full", o1.Fence, dedup.Result{Classification: "stale", ExternalID: "T-1"})
		if !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("stale record: %v, want ErrStaleFence", err)
		}
		if err := log.Record(ctx, db, "disk-full", o2.Fence, dedup.Result{Classification: "infra", ExternalID: "T-2"}); err != nil {
			t.Fatal(err)
		}
		// A later re-election leaves the recorded result alone.
		clock.Advance(time.Minute)
		if o3, err := log.Observe(ctx, db, ev, time.Minute); err != nil || !o3.Process {
			t.Fatalf("third window: %+v, %v", o3, err)
		}
		r, err := log.Get(ctx, db, "disk-full")
		if err != nil || r.Classification != "infra" || r.ExternalID != "T-2" || r.ResultFence != o2.Fence || r.Message != "disk full" {
			t.Fatalf("stored: %+v, %v", r, err)
		}
		if err := log.Record(ctx, db, "unknown", 1, dedup.Result{}); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("unknown fingerprint: %v, want ErrNotFound", err)
		}
	})
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		ok := dedup.Event{Source: "s", Level: "l", Message: "m"}
		for _, tc := range []struct {
			ev     dedup.Event
			window time.Duration
		}{
			{dedup.Event{Level: "l", Message: "m"}, 0},
			{dedup.Event{Source: "s", Message: "m"}, 0},
			{dedup.Event{Source: "s", Level: "l"}, 0},
			{dedup.Event{Source: "s", Level: "l", Message: "\xff"}, 0},
			{ok, -time.Second},
			{ok, 31 * 24 * time.Hour},
		} {
			if _, err := log.Observe(ctx, db, tc.ev, tc.window); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Observe(%+v, %v): %v, want ErrInvalidInput", tc.ev, tc.window, err)
			}
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM racefree_claims) + (SELECT count(*) FROM racefree_dedup_events)`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d rows, %v; want none", n, err)
		}
	})
}

func TestNormalise(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Timeout after 3012ms on 10.0.0.5":                      "timeout after <n>ms on <n>.<n>.<n>.<n>",
		"user 3f2a9c1e-0b7d-4c7e-9a51-2f1d3c4b5a69 not   found": "user <id> not found",
		"request deadbeef42 failed":                             "request <id> failed",
		"  Leading and trailing  ":                              "leading and trailing",
	} {
		if got := dedup.Normalise(in); got != want {
			t.Errorf("Normalise(%q) = %q, want %q", in, got, want)
		}
	}
}
