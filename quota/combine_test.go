package quota_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/tenant"
)

// expect returns the decision of charging n units at t0 to a fresh key
// of p that u units were charged to at t0.
func expect(p quota.Policy, u, n int64) quota.Decision {
	if p.Kind == quota.FixedWindow {
		if u+n <= p.Rate {
			return quota.Decision{Allowed: true, Remaining: p.Rate - u - n, ResetAt: t0.Add(p.Per), ResetAfter: p.Per}
		}
		return quota.Decision{Remaining: p.Rate - u, ResetAt: t0.Add(p.Per), ResetAfter: p.Per, RetryAfter: p.Per}
	}
	step := p.Per / time.Duration(p.Rate)
	if u+n <= p.Burst {
		return quota.Decision{Allowed: true, Remaining: p.Burst - u - n, ResetAt: t0.Add(time.Duration(u+n) * step),
			ResetAfter: time.Duration(u+n) * step}
	}
	return quota.Decision{Remaining: p.Burst - u, ResetAt: t0.Add(time.Duration(u) * step),
		ResetAfter: time.Duration(u) * step, RetryAfter: time.Duration(u+n-p.Burst) * step}
}

// TestABatchOfConsumesGivesEachCallerItsOwnDecision sends a batch of
// charges on distinct keys (racefree.Config.Combine), each key charged a
// different number of units before, so that some charges are refused and
// every decision differs: on PostgreSQL one statement over arrays
// (consume_gcra_many, consume_window_many), on SQLite the statements one
// by one in one transaction. Each caller gets the decision it would get
// alone, to the millisecond. On PostgreSQL it runs again as the
// application role, which row-level security binds, for another tenant:
// the batch sets the tenant first.
func TestABatchOfConsumesGivesEachCallerItsOwnDecision(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	cfg.Combine, cfg.CombineBatches = racefree.CombineOn, 1
	testdb.EachDSN(t, func(t *testing.T, d string) {
		db := testdb.Open(t, d, cfg)
		batchOfConsumes(t, db, context.Background())
		if db.Engine() != racefree.Postgres {
			return
		}
		app, err := dsn.Open(context.Background(), testdb.AppDSN(t, db, d), &racefree.Config{Clock: clock, Combine: racefree.CombineOn, CombineBatches: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer app.Close()
		acme, err := tenant.With(context.Background(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		batchOfConsumes(t, app, acme)
	})
}

// batchOfConsumes is TestABatchOfConsumesGivesEachCallerItsOwnDecision on
// db, for the tenant ctx names.
func batchOfConsumes(t *testing.T, db *racefree.DB, ctx context.Context) {
	t.Helper()
	policies := []quota.Policy{
		{Kind: quota.GCRA, Rate: 10, Per: time.Second, Burst: 10, Wait: time.Minute},
		{Kind: quota.FixedWindow, Rate: 10, Per: time.Second, Wait: time.Minute},
	}
	l := setup(t, db)
	const keys, n = 11, 3
	before := func(i int) int64 { return int64(i*7) % keys } // 0 to 10, each once
	for _, p := range policies {
		key := func(i int) string { return fmt.Sprintf("%s-%02d", p.Kind, i) }
		for i := range keys {
			if u := before(i); u > 0 {
				if _, err := l.Consume(ctx, db, key(i), u, p); err != nil {
					t.Fatal(err)
				}
			}
		}
		got := make([]quota.Decision, keys)
		calls := make([]func(), keys)
		for i := range calls {
			calls[i] = func() {
				d, err := l.Consume(ctx, db, key(i), n, p)
				if err != nil {
					t.Errorf("%s: %v", key(i), err)
				}
				got[i] = d
			}
		}
		gated(t, ctx, l, db, calls)
		refused := 0
		for i := range keys {
			want := expect(p, before(i), n)
			if got[i] != want {
				t.Errorf("%s, charged %d before: %+v, want %+v", key(i), before(i), got[i], want)
			}
			if !want.Allowed {
				refused++
			}
		}
		if refused == 0 || refused == keys {
			t.Fatalf("%s: %d of %d refused: the batch must hold both", p.Kind, refused, keys)
		}
	}
}

// TestABatchDecidesOnTheCountersItLocked has a batch of charges wait for
// the row locks of a caller's transaction that charged two of its keys,
// then commits that transaction (PostgreSQL: SQLite has one writer and no
// snapshot older than the write lock). The batch's statement over arrays
// decides and explains each refusal from the committed counters, not from
// the older versions of its snapshot: a charge that fitted the snapshot's
// counter is refused, and a refusal's RetryAfter and Remaining are the
// committed counter's.
func TestABatchDecidesOnTheCountersItLocked(t *testing.T) {
	t.Parallel()
	_, cfg := manual(t0)
	cfg.Combine, cfg.CombineBatches = racefree.CombineOn, 1
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), cfg)
	l := setup(t, db)
	ctx := context.Background()
	for _, p := range []quota.Policy{
		{Kind: quota.GCRA, Rate: 1, Per: time.Second, Burst: 2, Wait: time.Minute},
		{Kind: quota.FixedWindow, Rate: 2, Per: time.Second, Wait: time.Minute},
	} {
		a, b, c := string(p.Kind)+"-a", string(p.Kind)+"-b", string(p.Kind)+"-c"
		consume(t, l, db, a, 1, p)
		consume(t, l, db, b, 1, p)
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		consume(t, l, tx, a, 1, p) // full once tx commits
		consume(t, l, tx, b, 1, p)
		pid := testdb.BackendPID(t, tx)
		var da, db2, dc quota.Decision
		call := func(d *quota.Decision, key string, n int64) func() {
			return func() {
				var err error
				if *d, err = l.Consume(ctx, db, key, n, p); err != nil {
					t.Errorf("%s: %v", key, err)
				}
			}
		}
		wait := together(t, ctx, l, db, call(&da, a, 1), call(&db2, b, 2), call(&dc, c, 1))
		testdb.BlockedBy(t, db, pid, nil)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		wait()
		// From the committed counters (2 units used): a's 1 unit does not
		// fit (it fits the snapshot's 1), b's 2 units are refused for as
		// long as 2 units take to come back, and c is a fresh key.
		if want := expect(p, 2, 1); da != want {
			t.Errorf("%s after the lock wait: %+v, want %+v", a, da, want)
		}
		if want := expect(p, 2, 2); db2 != want {
			t.Errorf("%s after the lock wait: %+v, want %+v", b, db2, want)
		}
		if want := expect(p, 0, 1); dc != want {
			t.Errorf("%s: %+v, want %+v", c, dc, want)
		}
	}
}

// TestCombinedChargesOfOneKeyAdmitExactlyTheLimit charges one hot key from
// 200 goroutines with the combiner on, beside 100 charges of keys of their
// own, so that batches hold several keys (on PostgreSQL statements over
// arrays, and several batches at once, each waiting for the hot key's
// lock): exactly the limit is admitted on the hot key, every other charge
// is admitted, every refusal says when to retry, and every charge, of each
// kind (GCRA, fixed and sliding window), ran in a batch.
func TestCombinedChargesOfOneKeyAdmitExactlyTheLimit(t *testing.T) {
	t.Parallel()
	_, cfg := manual(t0)
	cfg.Combine = racefree.CombineOn
	limits := []quota.Policy{
		{Kind: quota.GCRA, Rate: 1, Per: time.Hour, Burst: 50, Wait: 2 * time.Minute},
		{Kind: quota.FixedWindow, Rate: 50, Per: time.Hour, Wait: 2 * time.Minute},
		{Kind: quota.SlidingWindow, Rate: 50, Per: time.Hour, Wait: 2 * time.Minute},
	}
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		l := setup(t, db)
		consume(t, l, db, "warm", 1, limits[0]) // registers the tenant
		for _, p := range limits {
			var (
				wg            sync.WaitGroup
				mu            sync.Mutex
				allowed, cold int
			)
			charge := func(key string) {
				defer wg.Done()
				d, err := l.Consume(context.Background(), db, key, 1, p)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Errorf("%s %s: %v", p.Kind, key, err)
				case d.Allowed && key == "hot":
					allowed++
				case d.Allowed:
					cold++
				case key != "hot":
					t.Errorf("%s %s: a fresh key refused: %+v", p.Kind, key, d)
				case d.RetryAfter <= 0:
					t.Errorf("%s: denied with RetryAfter %s", p.Kind, d.RetryAfter)
				}
			}
			before := db.CombineStats().Ops
			for i := range 300 {
				wg.Add(1)
				if i%3 == 2 {
					go charge(fmt.Sprintf("cold-%d", i))
				} else {
					go charge("hot")
				}
			}
			wg.Wait()
			if allowed != 50 || cold != 100 {
				t.Fatalf("%s: %d of 200 charges of the hot key allowed, %d of 100 fresh keys; want 50 and 100", p.Kind, allowed, cold)
			}
			if ran := db.CombineStats().Ops - before; ran < 300 {
				t.Errorf("%s: %d of 300 charges ran in a batch of the combiner", p.Kind, ran)
			}
		}
		if s := db.CombineStats(); s.MaxBatch < 2 {
			t.Errorf("no batch held two charges: %+v", s)
		}
	})
}

// TestChargesOfAHotKeyShareBatchesOnSQLite queues 200 concurrent charges
// of one key (limit 50) behind a batch held in flight, for each kind
// (GCRA, fixed and sliding window): exactly the limit is admitted, and
// every refusal says when to retry. On SQLite, whose batch runs its
// charges one after the other, they share batches (fewer batches than
// charges, the largest of CombineMax), and the charges, all of one unit,
// fold (wire.Op.Fold); on PostgreSQL (which pipelines,
// and runs a batch's charges as one statement over arrays) a batch never
// holds two charges of one key: one batch each.
func TestChargesOfAHotKeyShareBatchesOnSQLite(t *testing.T) {
	t.Parallel()
	_, cfg := manual(t0)
	cfg.Combine, cfg.CombineBatches = racefree.CombineOn, 1
	limits := []quota.Policy{
		{Kind: quota.GCRA, Rate: 1, Per: time.Hour, Burst: 50, Wait: 2 * time.Minute},
		{Kind: quota.FixedWindow, Rate: 50, Per: time.Hour, Wait: 2 * time.Minute},
		{Kind: quota.SlidingWindow, Rate: 50, Per: time.Hour, Wait: 2 * time.Minute},
	}
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := setup(t, db)
		consume(t, l, db, "warm", 1, limits[0]) // registers the tenant
		for _, p := range limits {
			const charges = 200
			var (
				mu      sync.Mutex
				allowed int
			)
			calls := make([]func(), charges)
			for i := range calls {
				calls[i] = func() {
					d, err := l.Consume(ctx, db, "hot", 1, p)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						t.Errorf("%s: %v", p.Kind, err)
					case d.Allowed:
						allowed++
					case d.RetryAfter <= 0:
						t.Errorf("%s: denied with RetryAfter %s", p.Kind, d.RetryAfter)
					}
				}
			}
			before := db.CombineStats()
			together(t, ctx, l, db, calls...)()
			s := db.CombineStats()
			if allowed != 50 {
				t.Fatalf("%s: %d of %d charges of the hot key allowed; want 50", p.Kind, allowed, charges)
			}
			batches, ops := s.Batches-before.Batches, s.Ops-before.Ops
			if ops != charges+1 || s.Failed != before.Failed {
				t.Fatalf("%s: combiner %+v after %+v: want the gate's charge and the %d in batches, none failed", p.Kind, s, before, charges)
			}
			switch db.Engine() {
			case racefree.SQLite:
				if batches >= ops || s.MaxBatch != 64 {
					t.Errorf("%s: %d charges in %d batches, the largest of %d; want them to share batches of up to CombineMax (64)", p.Kind, ops, batches, s.MaxBatch)
				}
				// Charges of one size fold, of every kind.
				if folded := s.Folded - before.Folded; folded != charges {
					t.Errorf("%s: %d of the %d charges folded; want all", p.Kind, folded, charges)
				}
			default:
				if batches != ops || s.MaxBatch != 1 {
					t.Errorf("%s: %d charges in %d batches, the largest of %d; want one batch each: no batch holds two of one key", p.Kind, ops, batches, s.MaxBatch)
				}
			}
		}
	})
}

// TestChargesOfOneKeyDecideInTurn queues charges of one key, of several
// sizes, in a known order behind a batch held in flight, for each kind,
// and gives each caller the decision it gets alone, to the millisecond:
// the same charges, one after the other, each in a transaction of its own,
// on another key. On SQLite they share one batch, each charge deciding on
// the counter the one before it left, and a refusal that a later charge
// of the key follows reads the counter it was refused on in the batch
// (state.sql, right after the charge), before the later charges move it; on PostgreSQL they
// run in that order, one batch each.
func TestChargesOfOneKeyDecideInTurn(t *testing.T) {
	t.Parallel()
	_, cfg := manual(t0)
	cfg.Combine, cfg.CombineBatches = racefree.CombineOn, 1
	limits := []quota.Policy{
		{Kind: quota.GCRA, Rate: 10, Per: time.Second, Burst: 10, Wait: time.Minute},
		{Kind: quota.FixedWindow, Rate: 10, Per: time.Second, Wait: time.Minute},
		{Kind: quota.SlidingWindow, Rate: 10, Per: time.Second, Wait: time.Minute},
	}
	// 16 charges, more than a sort that keeps equal keys in place by luck
	// orders; refusals before allowed charges (5 at 7 used, then 2 and 1).
	sizes := []int64{3, 4, 5, 2, 1, 1, 2, 3, 1, 4, 2, 1, 5, 1, 3, 1}
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := setup(t, db)
		consume(t, l, db, "warm", 1, limits[0]) // registers the tenant
		for _, p := range limits {
			alone := make([]quota.Decision, len(sizes))
			for i, n := range sizes {
				tx, err := db.SQL().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				alone[i] = consume(t, l, tx, string(p.Kind)+"-alone", n, p)
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			got := make([]quota.Decision, len(sizes))
			calls := make([]func(), len(sizes))
			for i, n := range sizes {
				calls[i] = func() {
					d, err := l.Consume(ctx, db, string(p.Kind)+"-hot", n, p)
					if err != nil {
						t.Errorf("%s, charge %d: %v", p.Kind, i, err)
					}
					got[i] = d
				}
			}
			before := db.CombineStats()
			inTurn(t, ctx, l, db, calls...)()
			refused := 0
			for i := range sizes {
				if got[i] != alone[i] {
					t.Errorf("%s, charge %d of %d units: %+v, want %+v as alone", p.Kind, i, sizes[i], got[i], alone[i])
				}
				if !alone[i].Allowed {
					refused++
				}
			}
			if refused == 0 || refused == len(sizes) || alone[2].Allowed || !alone[3].Allowed {
				t.Fatalf("%s: %d of %d refused, the third %v, the fourth %v: want a refusal followed by an allowed charge", p.Kind, refused, len(sizes), alone[2].Allowed, alone[3].Allowed)
			}
			s := db.CombineStats()
			batches := int64(1 + len(sizes)) // the gate's, then one each
			if db.Engine() == racefree.SQLite {
				batches = 2 // the gate's, then one of all
			}
			if got := s.Batches - before.Batches; got != batches || s.Failed != before.Failed {
				t.Errorf("%s: %d batches (%+v), want %d, none failed", p.Kind, got, s, batches)
			}
		}
	})
}

// TestACombinedChargeGivesUpAtItsWait holds the write lock (SQLite) or the
// counter's row lock (PostgreSQL) in an open transaction with the combiner
// on: a charge whose batch cannot be answered within Policy.Wait (or, with
// NoWait, the caller's deadline) gives up then, as alone, with the
// policy's degraded decision, and charges nothing. On PostgreSQL, which
// got the batch's statements and its commit in one pipeline, the server
// ends the batch at that deadline too (wire.ServerBound): no session
// is left waiting for the lock, to commit the charge once it is free.
func TestACombinedChargeGivesUpAtItsWait(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := setup(t, db)
		consume(t, l, db, "k", 1, gcra)
		tat0, _ := row(t, db, "k", quota.GCRA)
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		consume(t, l, tx, "k", 1, gcra) // the lock, until tx ends
		closed, open := gcra, gcra
		closed.Wait = 200 * time.Millisecond
		open.Wait, open.OnUnavailable = quota.NoWait, quota.FailOpen
		bounded := func(what string, ctx context.Context, p quota.Policy) (d quota.Decision, err error) {
			err = testdb.Within(t, 5*time.Second, what+": a charge bounded by 200ms", func() error {
				d, err = l.Consume(ctx, db, "k", 1, p)
				return err
			})
			return d, err
		}
		d, err := bounded("fail closed", ctx, closed)
		if !errors.Is(err, racefree.ErrUnavailable) || d.Allowed || !d.Degraded {
			t.Fatalf("fail closed: %+v, %v; want denied, Degraded, ErrUnavailable", d, err)
		}
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		d, err = bounded("the caller's deadline", cctx, open)
		if err != nil || !d.Allowed || !d.Degraded {
			t.Fatalf("fail open on the caller's deadline: %+v, %v; want allowed, Degraded", d, err)
		}
		if db.Engine() == racefree.Postgres {
			pid := testdb.BackendPID(t, tx)
			testdb.Unblocked(t, db, pid, 5*time.Second)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if tat, _ := row(t, db, "k", quota.GCRA); tat != tat0 {
			t.Errorf("the counter after the charges that gave up: tat %d, want %d as before them", tat, tat0)
		}
		if s := db.CombineStats(); s.Failed < 2 {
			t.Errorf("combiner %+v: want the two batches that gave up", s)
		}
	})
}

// gated runs calls in one batch of db's combiner (together) and waits
// for them; it fails unless they shared one batch.
func gated(t *testing.T, ctx context.Context, l *quota.Limiter, db *racefree.DB, calls []func()) {
	t.Helper()
	before := db.CombineStats()
	together(t, ctx, l, db, calls...)()
	// The gate's batch of one, and one batch of the calls.
	if s := db.CombineStats(); s.Batches != before.Batches+2 || s.Ops != before.Ops+1+int64(len(calls)) {
		t.Fatalf("combiner %+v after %+v: want the gate's batch of one and one of %d", s, before, len(calls))
	}
}

// together queues calls so that they share one batch of db's combiner
// (Config.CombineBatches 1): a gate's charge, held in flight behind the
// lock of a transaction (a row lock on PostgreSQL, the write lock on
// SQLite), keeps them queued until all are, then the transaction rolls
// back and the next batch takes them all (testdb.Behind). It returns once
// the gate's batch is done; wait waits for the calls. The gate charges
// the tenant ctx names.
func together(t *testing.T, ctx context.Context, l *quota.Limiter, db *racefree.DB, calls ...func()) (wait func()) {
	t.Helper()
	gate := quota.Policy{Kind: quota.GCRA, Rate: 1, Per: time.Second, Burst: 1000, Wait: time.Minute}
	_, wait = testdb.Behind(t, db,
		func(tx *sql.Tx) error { _, err := l.Consume(ctx, tx, "gate", 1, gate); return err },
		func() error { _, err := l.Consume(ctx, db, "gate", 1, gate); return err },
		calls...)
	return wait
}

// inTurn is together, named where the order of the calls is what the test
// is about: testdb.Behind queues them in the order given.
func inTurn(t *testing.T, ctx context.Context, l *quota.Limiter, db *racefree.DB, calls ...func()) (wait func()) {
	t.Helper()
	return together(t, ctx, l, db, calls...)
}

// policyOf is the Config.Combine that turns the combiner on or, explicitly,
// off (the default is on).
func policyOf(on bool) racefree.CombinePolicy {
	if on {
		return racefree.CombineOn
	}
	return racefree.CombineOff
}
