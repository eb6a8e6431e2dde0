package dedup_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// combined is each with the combiner on, one batch at a time
// (Config.CombineBatches 1), so that a batch held in flight (hold) makes
// the next calls queue behind it.
func combined(t *testing.T, body func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB)) {
	t.Helper()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock, Combine: racefree.CombineOn, CombineBatches: 1}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		body(t, dedup.New(db), clock, db)
	})
}

// behind runs calls behind a batch that a claim's row lock holds in
// flight: each call starts once the previous one queued, so the queue
// holds them in the order given, and all are queued when the held batch
// commits. It returns once every call returned, with the combiner's
// figures from before the held batch. The held batch is a claim acquire of
// its own key, "gate", in dedup's namespace.
func behind(t *testing.T, db *racefree.DB, calls ...func()) (before racefree.CombineStats) {
	t.Helper()
	ctx := context.Background()
	claims := claim.NewNamespace(db, dedup.Namespace)
	gate, err := claims.Acquire(ctx, db, "gate", "g", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	before, wait := testdb.Behind(t, db,
		func(tx *sql.Tx) error {
			_, err := claims.Renew(ctx, tx, "gate", "g", gate.Fence, time.Hour)
			return err
		},
		func() error { _, err := claims.Acquire(ctx, db, "gate", "g", time.Hour); return err },
		calls...)
	wait()
	return before
}

// TestABatchOfObservesGivesEachCallerItsOwnObservation sends a batch of
// observes of distinct fingerprints (racefree.Config.Combine; on
// PostgreSQL one statement per form over arrays), each fingerprint with
// its own past: its own number of earlier windows (so its own fence and
// count), some held by another holder, some observed and recorded before.
// Each caller gets the Observation it would get alone, each new event is
// stored with its own text, an event stored before keeps its text and its
// result, and the batch commits once.
func TestABatchOfObservesGivesEachCallerItsOwnObservation(t *testing.T) {
	t.Parallel()
	combined(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		claims := claim.NewNamespace(db, dedup.Namespace)
		const n = 12
		fp := func(i int) string { return fmt.Sprintf("fp-%02d", i) }
		held := func(i int) bool { return i%3 == 0 }             // by another holder
		seen := func(i int) bool { return !held(i) && i%4 == 1 } // observed and recorded before
		window := time.Hour
		// Fingerprint i has had i windows; then it is held, or seen, or
		// neither.
		for i := range n {
			for range i {
				c, err := claims.Acquire(ctx, db, fp(i), "old", window)
				if err != nil {
					t.Fatal(err)
				}
				if err := claims.Release(ctx, db, fp(i), "old", c.Fence); err != nil {
					t.Fatal(err)
				}
			}
			switch {
			case held(i):
				if _, err := claims.Acquire(ctx, db, fp(i), fmt.Sprintf("other-%d", i), window); err != nil {
					t.Fatal(err)
				}
			case seen(i):
				o, err := log.Observe(ctx, db, dedup.Event{Source: "old", Level: "warn", Message: fmt.Sprintf("old %d", i), Fingerprint: fp(i)}, window)
				if err != nil || !o.Process {
					t.Fatalf("earlier observe of %s: %+v, %v", fp(i), o, err)
				}
				if err := log.Record(ctx, db, fp(i), o.Fence, dedup.Result{Classification: fmt.Sprintf("r-%d", i)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		event := func(i int) dedup.Event {
			return dedup.Event{Source: fmt.Sprintf("src-%d", i), Level: "error", Message: fmt.Sprintf("new %d", i), Fingerprint: fp(i)}
		}
		var got [n]*dedup.Observation
		calls := make([]func(), n)
		for i := range calls {
			calls[i] = func() {
				o, err := log.Observe(ctx, db, event(i), window)
				if err != nil {
					t.Errorf("observe %s: %v", fp(i), err)
				}
				got[i] = o
			}
		}
		before := behind(t, db, calls...)
		if s := db.CombineStats(); s.Batches != before.Batches+2 || s.Ops != before.Ops+1+n || s.Failed != before.Failed {
			t.Errorf("combiner %+v after %+v: want the held batch, then one batch of the %d observes", s, before, n)
		}
		for i, o := range got {
			if o == nil {
				continue
			}
			earlier := 0
			if held(i) || seen(i) {
				earlier = 1
			}
			want := dedup.Observation{Fingerprint: fp(i), Process: earlier == 0, Fence: int64(i + 1), Count: int64(i + earlier + 1),
				LastSeen: t0}
			if o.Fingerprint != want.Fingerprint || o.Process != want.Process || o.Fence != want.Fence || o.Count != want.Count || !o.LastSeen.Equal(t0) {
				t.Errorf("observe %s: %+v; want %+v", fp(i), o, want)
			}
		}
		for i := range n {
			r, err := log.Get(ctx, db, fp(i))
			switch {
			case err != nil:
				t.Errorf("event %s: %v", fp(i), err)
			case seen(i):
				if r.Source != "old" || r.Message != fmt.Sprintf("old %d", i) || r.Classification != fmt.Sprintf("r-%d", i) {
					t.Errorf("event %s observed before: %+v; want its first text and its result", fp(i), r)
				}
			default:
				if ev := event(i); r.Source != ev.Source || r.Level != ev.Level || r.Message != ev.Message || r.Classification != "" {
					t.Errorf("event %s: %+v; want %+v", fp(i), r, ev)
				}
			}
		}
	})
}

// TestObserveAndCallsOnItsClaimTakeTurns queues an observe, a claim
// acquire of the same fingerprint in dedup's namespace, an observe of
// another fingerprint and a second observe of the first, in that order:
// the calls on one claim run in the order they came, each on the state the
// one before it left, so the acquire finds the claim held by the first
// observer and the second observe is a duplicate (count 3, not to
// process), while the observe of the other fingerprint processes. A
// batch holds the claim once when one of its calls there has forms over
// arrays, as the acquire has on both engines, so on each: {observe
// shared, observe x}, {acquire shared}, {observe shared}.
func TestObserveAndCallsOnItsClaimTakeTurns(t *testing.T) {
	t.Parallel()
	combined(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		claims := claim.NewNamespace(db, dedup.Namespace)
		var (
			first, other, again *dedup.Observation
			acquired            *claim.Claim
			errs                [4]error
		)
		observe := func(fp string, o **dedup.Observation, err *error) func() {
			return func() {
				*o, *err = log.Observe(ctx, db, dedup.Event{Source: "s", Level: "l", Message: "m", Fingerprint: fp}, time.Minute)
			}
		}
		before := behind(t, db,
			observe("shared", &first, &errs[0]),
			func() { acquired, errs[1] = claims.Acquire(ctx, db, "shared", "app", time.Minute) },
			observe("x", &other, &errs[2]),
			observe("shared", &again, &errs[3]),
		)
		s := db.CombineStats()
		batches, shape := int64(4), "the held one, {observe shared, observe x}, {acquire shared}, {observe shared}"
		if got := s.Batches - before.Batches; got != batches {
			t.Errorf("batches: got %d, want %d: %s (%+v)", got, batches, shape, s)
		}
		if errs[0] != nil || !first.Process || first.Count != 1 || first.Fence != 1 {
			t.Errorf("observe of shared: %+v, %v; want the first count, fence 1, to process", first, errs[0])
		}
		var heldErr *claim.HeldError
		if !errors.As(errs[1], &heldErr) || heldErr.Claim.Count != 2 || heldErr.Claim.Fence != 1 {
			t.Errorf("acquire of shared after the observe: %+v, %v; want ErrHeld by the observer, count 2", acquired, errs[1])
		}
		if errs[2] != nil || !other.Process || other.Count != 1 {
			t.Errorf("observe of x: %+v, %v", other, errs[2])
		}
		if errs[3] != nil || again.Process || again.Count != 3 || again.Fence != 1 {
			t.Errorf("second observe of shared: %+v, %v; want a duplicate, count 3, fence 1", again, errs[3])
		}
	})
}

// TestObservesOfAFailedBatchRunAlone: a batch that fails as a whole (here
// another operation of the tenant whose statement fails, in the same
// batch on SQLite) commits nothing, and each observe in it runs alone with
// the outcome it has alone: counted once, elected, its event stored.
func TestObservesOfAFailedBatchRunAlone(t *testing.T) {
	t.Parallel()
	combined(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		var (
			obs  [2]*dedup.Observation
			errs [2]error
		)
		observe := func(i int) func() {
			return func() {
				obs[i], errs[i] = log.Observe(ctx, db, dedup.Event{Source: "s", Level: "l", Message: "m", Fingerprint: fmt.Sprintf("f%d", i)}, time.Minute)
			}
		}
		before := behind(t, db, observe(0), func() {
			// Fails in every batch; its caller would run it alone.
			_, _ = wire.Of(db).Combine(ctx, &wire.Op{Group: tenant.Default, Key: "broken",
				Stmts: []*wire.Statement{{Query: `INSERT INTO no_such_table (k) VALUES (1)`}}})
		}, observe(1))
		if db.Engine() == racefree.SQLite && db.CombineStats().Failed == before.Failed {
			t.Fatalf("no batch failed: %+v", db.CombineStats())
		}
		for i, o := range obs {
			if errs[i] != nil || o.Fingerprint != fmt.Sprintf("f%d", i) || !o.Process || o.Count != 1 || o.Fence != 1 || !o.FirstSeen.Equal(t0) {
				t.Errorf("observe f%d: %+v, %v; want the first count, fence 1, to process", i, o, errs[i])
			}
			if _, err := log.Get(ctx, db, fmt.Sprintf("f%d", i)); err != nil {
				t.Errorf("event f%d: %v", i, err)
			}
		}
	})
}

// TestCombinedObservesOfOneFingerprint: with the combiner on, many
// observers of one fingerprint, each also observing one of its own (so
// that batches form), elect exactly one processor per window and count
// every occurrence; given the caller's transaction, Observe runs in it,
// not through the combiner, and rolls back with it.
func TestCombinedObservesOfOneFingerprint(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock, Combine: racefree.CombineOn}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		log := dedup.New(db)
		ctx := context.Background()
		const n = 32
		window := time.Minute
		hot := dedup.Event{Source: "billing", Level: "error", Message: "charge failed", Fingerprint: "hot"}
		// The tenant's first call registers it, alone.
		if _, err := log.Observe(ctx, db, dedup.Event{Source: "s", Level: "l", Message: "warm"}, window); err != nil {
			t.Fatal(err)
		}
		for w := range 2 {
			var (
				mu   sync.Mutex
				wg   sync.WaitGroup
				hots []*dedup.Observation
			)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					o, err := log.Observe(ctx, db, hot, window)
					if err != nil {
						t.Errorf("observe hot: %v", err)
						return
					}
					mu.Lock()
					hots = append(hots, o)
					mu.Unlock()
					own, err := log.Observe(ctx, db, dedup.Event{Source: "s", Level: "l", Message: "m", Fingerprint: fmt.Sprintf("own-%d", i)}, window)
					if err != nil || !own.Process || own.Count != int64(w+1) || own.Fence != int64(w+1) {
						t.Errorf("observe own-%d in window %d: %+v, %v", i, w+1, own, err)
					}
				}()
			}
			wg.Wait()
			if ws := winners(hots); len(ws) != 1 || ws[0].Fence != int64(w+1) {
				t.Fatalf("window %d: %d processors; want exactly 1 with fence %d", w+1, len(ws), w+1)
			}
			counts := make([]int, 0, n)
			for _, o := range hots {
				counts = append(counts, int(o.Count))
			}
			sort.Ints(counts)
			for i, c := range counts {
				if c != w*n+i+1 {
					t.Fatalf("window %d: counts seen by the observers are %v; want each of %d..%d once", w+1, counts, w*n+1, (w+1)*n)
				}
			}
			clock.Advance(window)
		}
		if s := db.CombineStats(); s.Ops == 0 {
			t.Errorf("no observe went through the combiner: %+v", s)
		}

		// The caller's transaction: no combiner, the rollback takes all. An
		// operation that entered the combiner fails the test at once: on
		// SQLite its batch would wait for this transaction's write lock.
		boom := errors.New("caller failed")
		ops := db.CombineStats().Ops
		var (
			inTx    *dedup.Observation
			inTxErr error
		)
		done := make(chan struct{})
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			go func() {
				defer close(done)
				inTx, inTxErr = log.Observe(ctx, tx, dedup.Event{Source: "s", Level: "l", Message: "m", Fingerprint: "in-tx"}, window)
			}()
			for {
				select {
				case <-done:
					return boom
				default:
				}
				if s := db.CombineStats(); s.Queued > 0 || s.Running > 0 {
					t.Errorf("Observe given the caller's transaction entered the combiner: %+v", s)
					return boom
				}
				runtime.Gosched()
			}
		})
		<-done
		if inTxErr != nil || !inTx.Process || inTx.Count != 1 {
			t.Errorf("observe in the caller's transaction: %+v, %v", inTx, inTxErr)
		}
		if !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if _, err := log.Get(ctx, db, "in-tx"); !errors.Is(err, racefree.ErrNotFound) {
			t.Errorf("event after the caller's rollback: %v, want ErrNotFound", err)
		}
		if _, err := claim.NewNamespace(db, dedup.Namespace).Get(ctx, db, "in-tx"); !errors.Is(err, racefree.ErrNotFound) {
			t.Errorf("claim after the caller's rollback: %v, want ErrNotFound", err)
		}
		if got := db.CombineStats().Ops; got != ops {
			t.Errorf("the caller's transaction went through the combiner: %d operations, want %d", got, ops)
		}
	})
}

// TestACombinedObserveGivesUpAtItsDeadline holds the write lock (SQLite) or
// the fingerprint's claim row (PostgreSQL) in an open transaction: an
// observe, whose batch is a transaction of two statements (the claim's,
// then the event's), whose caller's context has a deadline of 200 ms,
// returns the context's error at that deadline, not when the lock is
// free, having stored nothing.
func TestACombinedObserveGivesUpAtItsDeadline(t *testing.T) {
	t.Parallel()
	combined(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		claims := claim.NewNamespace(db, dedup.Namespace)
		c, err := claims.Acquire(ctx, db, "fp", "old", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := claims.Release(ctx, db, "fp", "old", c.Fence); err != nil {
			t.Fatal(err)
		}
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `UPDATE racefree_claims SET count = count WHERE key = 'fp'`); err != nil {
			t.Fatal(err)
		}
		failed := db.CombineStats().Failed
		err = testdb.Within(t, 5*time.Second, "an observe bounded by 200ms", func() error {
			cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			_, err := log.Observe(cctx, db, dedup.Event{Source: "s", Level: "error", Message: "m", Fingerprint: "fp"}, time.Minute)
			return err
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("observe past its deadline: %v; want context.DeadlineExceeded", err)
		}
		if s := db.CombineStats(); s.Failed-failed != 1 {
			t.Errorf("combiner %+v: want the batch that gave up (%d before)", s, failed)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if o, err := log.Get(ctx, db, "fp"); !errors.Is(err, racefree.ErrNotFound) {
			t.Errorf("the event after the observe that gave up: %+v, %v; want none", o, err)
		}
		if after, err := claims.Get(ctx, db, "fp"); err != nil || after.Fence != c.Fence || after.Count != 1 {
			t.Errorf("the claim after the observe that gave up: %+v, %v; want fence %d, one attempt, as before", after, err, c.Fence)
		}
	})
}
