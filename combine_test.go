package racefree_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
)

// await receives from ch, or fails the test after a minute: a combiner
// that never answers a caller fails the test rather than hanging it.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("waiting for %s: no answer after a minute", what)
		panic("unreachable")
	}
}

// TestCombinerBatches runs operations through wire.DB.Combine behind a batch
// that a row lock holds in flight, one batch at a time, so that the next
// batches form from known queues, and checks each promise of Combine on
// them.
func TestCombinerBatches(t *testing.T) {
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		testdb.ExecAll(t, db,
			`CREATE TABLE combine_t (k TEXT PRIMARY KEY, v BIGINT NOT NULL)`,
			`CREATE TABLE combine_child (k TEXT PRIMARY KEY, parent TEXT REFERENCES combine_t (k) DEFERRABLE INITIALLY DEFERRED)`,
			`INSERT INTO combine_t (k, v) VALUES ('z', 0)`,
		)
		op := func(group, key string, queries ...string) *wire.Op {
			o := &wire.Op{Group: group, Key: key}
			for _, q := range queries {
				o.Stmts = append(o.Stmts, &wire.Statement{Query: q})
			}
			return o
		}
		// run is a primitive's call: the op combined, or alone when its
		// batch failed as a whole.
		run := func(ctx context.Context, o *wire.Op) error {
			ran, err := wire.Of(db).Combine(ctx, o)
			if ran {
				return err
			}
			return db.InTx(ctx, func(tx *sql.Tx) error {
				for _, st := range o.Stmts {
					if _, err := tx.ExecContext(ctx, st.Query); err != nil {
						return err
					}
				}
				return nil
			})
		}
		// hold puts a batch in flight and holds it there with a row lock:
		// with CombineBatches 1, the next operations queue behind it.
		// release lets it commit and waits for it.
		hold := func() (release func()) {
			t.Helper()
			lock, err := db.SQL().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lock.ExecContext(ctx, `UPDATE combine_t SET v = v WHERE k = 'z'`); err != nil {
				t.Fatal(err)
			}
			held := make(chan error, 1)
			go func() { held <- run(ctx, op("g", "z", `UPDATE combine_t SET v = v + 1 WHERE k = 'z'`)) }()
			testdb.WaitCombiner(t, db, "the held batch", func(s racefree.CombineStats) bool { return s.Running == 1 })
			return func() {
				t.Helper()
				if err := lock.Commit(); err != nil {
					t.Fatal(err)
				}
				if err := await(t, held, "the held batch"); err != nil {
					t.Fatalf("held batch: %v", err)
				}
			}
		}
		// behind queues ops behind a batch held in flight, releases it,
		// and returns each op's outcome.
		behind := func(ops ...*wire.Op) []error {
			t.Helper()
			release := hold()
			errs := make([]error, len(ops))
			done := make(chan int, len(ops))
			for i, o := range ops {
				go func() { errs[i] = run(ctx, o); done <- i }()
				testdb.WaitCombiner(t, db, "the queue", func(s racefree.CombineStats) bool { return s.Queued == i+1 })
			}
			release()
			for range ops {
				await(t, done, "the queued operations")
			}
			return errs
		}
		value := func(k string) int64 {
			t.Helper()
			var v int64
			err := db.QueryRowContext(ctx, `SELECT v FROM combine_t WHERE k = '`+k+`'`).Scan(&v)
			if err != nil {
				t.Fatalf("row %s: %v", k, wire.Of(db).InterpretError(err))
			}
			return v
		}

		// Operations of two groups never share a batch. Two operations on
		// one key run in the order they came: on PostgreSQL (which
		// pipelines) never in one batch, the later after the earlier
		// committed; on SQLite in one, one after the other.
		before := db.CombineStats()
		for i, err := range behind(
			op("g", "k1", `INSERT INTO combine_t (k, v) VALUES ('k1', 1)`),
			op("g", "k1", `UPDATE combine_t SET v = v * 10 WHERE k = 'k1'`),
			op("g", "k2", `INSERT INTO combine_t (k, v) VALUES ('k2', 2)`),
			op("h", "k3", `INSERT INTO combine_t (k, v) VALUES ('k3', 3)`),
		) {
			if err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
		}
		s := db.CombineStats()
		batches, largest, shape := int64(4), 2, "the held one, {k1, k2}, {k1}, {k3}"
		if db.Engine() == racefree.SQLite {
			batches, largest, shape = 3, 3, "the held one, {k1, k1, k2}, {k3}"
		}
		if got := s.Batches - before.Batches; got != batches {
			t.Errorf("batches: got %d, want %d: %s (%+v)", got, batches, shape, s)
		}
		if got := s.MaxBatch; got != largest {
			t.Errorf("largest batch: got %d, want %d: %s", got, largest, shape)
		}
		if got, want := value("k1"), int64(10); got != want {
			t.Errorf("k1: got %d, want %d: the update ran before the insert", got, want)
		}

		// One operation's failure fails none of the others: a statement
		// that breaks a UNIQUE constraint, and a deferred constraint that
		// fails the commit itself. Every caller is answered after its
		// batch committed: an op answered nil is there.
		errs := behind(
			op("g", "k4", `INSERT INTO combine_t (k, v) VALUES ('k4', 4)`),
			op("g", "z2", `INSERT INTO combine_t (k, v) VALUES ('z', 5)`),
			op("g", "k5", `INSERT INTO combine_t (k, v) VALUES ('k5', 5)`),
		)
		if errs[0] != nil || errs[2] != nil {
			t.Fatalf("the others failed with the failing op: %v", errs)
		}
		if err := wire.Of(db).InterpretError(errs[1]); !errors.Is(err, racefree.ErrConflict) {
			t.Fatalf("the failing op: got %v, want ErrConflict", err)
		}
		value("k4")
		value("k5")
		errs = behind(
			op("g", "k6", `INSERT INTO combine_t (k, v) VALUES ('k6', 6)`),
			op("g", "c1", `INSERT INTO combine_child (k, parent) VALUES ('c1', 'nobody')`),
		)
		if errs[0] != nil || errs[1] == nil {
			t.Fatalf("got %v, want the first op to succeed and the second to fail at commit", errs)
		}
		value("k6")
		if db.CombineStats().Failed < 2 {
			t.Errorf("failed batches: %+v, want 2", db.CombineStats())
		}

		// A caller that gives up while its op waits: the op never runs.
		release := hold()
		cctx, cancel := context.WithCancel(ctx)
		gave := make(chan error, 1)
		go func() {
			ran, err := wire.Of(db).Combine(cctx, op("g", "k7", `INSERT INTO combine_t (k, v) VALUES ('k7', 7)`))
			if !ran {
				err = errors.New("reported not run: its caller would run it alone")
			}
			gave <- err
		}()
		testdb.WaitCombiner(t, db, "the queue", func(s racefree.CombineStats) bool { return s.Queued == 1 })
		cancel()
		if err := await(t, gave, "the cancelled call"); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled op: got %v, want context.Canceled", err)
		}
		release()
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM combine_t WHERE k = 'k7'`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("cancelled op: %d rows (%v), want none", n, err)
		}

		// A caller whose context ended before it called: never in a
		// batch, whether none is in flight (it would lead one, on a
		// context of its own) or one is (it would queue for the next).
		done, stop := context.WithCancel(ctx)
		stop()
		for _, inFlight := range []bool{false, true} {
			release := func() {}
			if inFlight {
				release = hold()
			}
			ran, err := wire.Of(db).Combine(done, op("g", "k8", `INSERT INTO combine_t (k, v) VALUES ('k8', 8)`))
			if !ran || !errors.Is(err, context.Canceled) {
				t.Fatalf("a call with a done context, batch in flight %v: ran %v, %v; want true, context.Canceled", inFlight, ran, err)
			}
			release()
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM combine_t WHERE k = 'k8'`).Scan(&n); err != nil || n != 0 {
				t.Fatalf("a call with a done context, batch in flight %v: %d rows (%v), want none", inFlight, n, err)
			}
		}
	})
}

// TestCombinerUnknownOutcome cuts a batch's connection once the server
// committed it, before its answer reaches the client (testdb.CutReply): the
// outcome is unknown to the callers, so each gets the error a call alone
// gets when its commit's answer is lost (ErrUnavailable), and none of
// them runs alone or again: each row was added to once, by the batch. A
// pipeline alone, cut the same way, gets the same error, and one the
// server refused matches ErrNotCommitted.
func TestCombinerUnknownOutcome(t *testing.T) {
	dsn := testdb.NewDSN(t, racefree.Postgres)
	direct := testdb.Open(t, dsn, nil)
	proxy, cut := testdb.NewCutReply(t, dsn)
	db := testdb.Open(t, cut, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1})
	ctx := context.Background()
	keys := []string{"k1", "k2", "k3", "k4"}
	if _, err := direct.ExecContext(ctx, `CREATE TABLE combine_u (k TEXT PRIMARY KEY, v BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := direct.ExecContext(ctx, `INSERT INTO combine_u (k, v) VALUES ($1, 0)`, k); err != nil {
			t.Fatal(err)
		}
	}
	before := db.CombineStats()
	var calls []func() error
	for _, k := range keys {
		calls = append(calls, func() error {
			st := &wire.Statement{Query: `UPDATE combine_u SET v = v + 1 WHERE k = $1`, Args: []any{k}}
			ran, err := wire.Of(db).Combine(ctx, &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{st}})
			if ran {
				return err
			}
			// A primitive's fallback: the op alone.
			_, err = db.ExecContext(ctx, st.Query, st.Args...)
			return err
		})
	}
	for i, err := range testdb.CutBatch(t, db, direct, proxy, calls...) {
		if !errors.Is(err, racefree.ErrUnavailable) {
			t.Errorf("call %d: got %v, want ErrUnavailable: the batch may have committed", i, err)
		}
	}
	for _, k := range keys {
		var v int64
		if err := direct.QueryRowContext(ctx, `SELECT v FROM combine_u WHERE k = $1`, k).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != 1 {
			t.Errorf("%s: added to %d times, want once (the batch, which committed)", k, v)
		}
	}
	// The answer is the one a pipeline alone gets when its commit's
	// answer is lost, and it is not run again either.
	proxy.LoseNextPipeline()
	err := wire.Of(db).Pipeline(ctx, &wire.Statement{Query: `UPDATE combine_u SET v = v + 1 WHERE k = 'k1'`})
	proxy.Wait(t)
	if !errors.Is(err, racefree.ErrUnavailable) || errors.Is(err, racefree.ErrNotCommitted) {
		t.Errorf("a pipeline alone, cut: got %v, want ErrUnavailable, not ErrNotCommitted", err)
	}
	// The server's refusal is known to have committed nothing.
	err = wire.Of(db).Pipeline(ctx, &wire.Statement{Query: `UPDATE combine_u SET v = v + 1 WHERE k = 'k1'`},
		&wire.Statement{Query: `INSERT INTO combine_u (k, v) VALUES ('k1', 0)`})
	if !errors.Is(err, racefree.ErrConflict) || !errors.Is(err, racefree.ErrNotCommitted) {
		t.Errorf("a pipeline the server refused: got %v, want ErrConflict and ErrNotCommitted", err)
	}
	var v int64
	if err := direct.QueryRowContext(ctx, `SELECT v FROM combine_u WHERE k = 'k1'`).Scan(&v); err != nil || v != 2 {
		t.Errorf("k1 after a pipeline alone, cut: %d (%v), want 2", v, err)
	}
	s := db.CombineStats()
	if got := s.Unknown - before.Unknown; got != 1 {
		t.Errorf("unknown outcomes: got %d, want 1 (%+v)", got, s)
	}
	if s.Failed != before.Failed {
		t.Errorf("failed batches: %d, want none: the cut batch is no failure (%+v)", s.Failed-before.Failed, s)
	}
}

// heldCombiner holds db's combined batches in flight with a row lock:
// call starts one more Combine call, on a key of its own, and checks,
// once the combiner has it, how many operations are queued and how many
// run in batches; release lets every batch commit, checks each call
// succeeded and that each operation ran once, and returns the combiner's
// figures.
func heldCombiner(t *testing.T, db *racefree.DB) (call func(queued, running int), release func() racefree.CombineStats) {
	t.Helper()
	ctx := context.Background()
	testdb.ExecAll(t, db,
		`CREATE TABLE combine_q (k TEXT PRIMARY KEY, v BIGINT NOT NULL)`,
		`INSERT INTO combine_q (k, v) VALUES ('z', 0)`,
	)
	lock, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback() }) // on a failure: lets the batches end
	if _, err := lock.ExecContext(ctx, `UPDATE combine_q SET v = v WHERE k = 'z'`); err != nil {
		t.Fatal(err)
	}
	// Every operation adds one to the locked row: each batch waits for
	// the lock, in flight, until it is released.
	done := make(chan error, 64)
	calls := 0
	call = func(queued, running int) {
		t.Helper()
		calls++
		op := &wire.Op{Group: "g", Key: fmt.Sprint("k", calls), Stmts: []*wire.Statement{
			{Query: `UPDATE combine_q SET v = v + 1 WHERE k = 'z'`},
		}}
		go func() {
			ran, err := wire.Of(db).Combine(ctx, op)
			if err == nil && !ran {
				err = errors.New("its batch failed: reported not run")
			}
			done <- err
		}()
		testdb.WaitCombiner(t, db, fmt.Sprintf("call %d", calls), func(s racefree.CombineStats) bool {
			return s.Queued+s.Running == calls
		})
		if s := db.CombineStats(); s.Queued != queued || s.Running != running {
			t.Fatalf("after call %d: %d queued and %d running, want %d and %d", calls, s.Queued, s.Running, queued, running)
		}
	}
	release = func() racefree.CombineStats {
		t.Helper()
		if err := lock.Commit(); err != nil {
			t.Fatal(err)
		}
		for range calls {
			if err := await(t, done, "the calls"); err != nil {
				t.Fatal(err)
			}
		}
		var v int64
		if err := db.QueryRowContext(ctx, `SELECT v FROM combine_q WHERE k = 'z'`).Scan(&v); err != nil || v != int64(calls) {
			t.Fatalf("the row: %d (%v), want %d: each operation once", v, err, calls)
		}
		return db.CombineStats()
	}
	return call, release
}

// TestCombinerStartsAnotherBatchAtAQuarterOfCombineMax holds batches in
// flight with a row lock and counts, after each call, the operations
// queued and running: with one batch in flight a call queues until a
// quarter of CombineMax (here 3 of 12) would wait, and the call that
// makes it so starts a second batch with the waiting ones, not one call
// earlier nor later; with CombineBatches (2) in flight, every call
// queues, however many wait. A quarter above the floor of 2 tells a
// quarter from another fraction of CombineMax. Without CombineBatches,
// the bound is 2 on PostgreSQL (half of MaxOpenConns 4 here, the same)
// and 1 on SQLite, whose every call then queues behind the one batch. With
// neither set and a pool of 16, PostgreSQL's defaults: the second batch
// starts when 8 would wait (a quarter of CombineMax 32), and no third
// starts however many wait (CombineBatches 2, not half the pool).
func TestCombinerStartsAnotherBatchAtAQuarterOfCombineMax(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  racefree.Config
	}{
		{"CombineBatches 2", racefree.Config{Combine: racefree.CombineOn, CombineMax: 12, CombineBatches: 2}},
		{"CombineBatches unset, MaxOpenConns 4", racefree.Config{Combine: racefree.CombineOn, CombineMax: 12, MaxOpenConns: 4}},
		{"both unset, MaxOpenConns 16", racefree.Config{Combine: racefree.CombineOn, MaxOpenConns: 16}},
	} {
		t.Run(c.name, func(t *testing.T) {
			testdb.Each(t, &c.cfg, func(t *testing.T, db *racefree.DB) {
				call, release := heldCombiner(t, db)
				if c.cfg.CombineBatches == 0 && db.Engine() == racefree.SQLite {
					for q := range 8 {
						call(q, 1) // one batch at a time: every call queues
					}
					release()
					return
				}
				if c.cfg.CombineMax == 0 {
					call(0, 1)
					for q := 1; q <= 7; q++ {
						call(q, 1) // under a quarter of 32: it queues
					}
					call(0, 9) // 8 would wait: a second batch, with the seven queued
					for q := 1; q <= 8; q++ {
						call(q, 9) // two in flight: it queues, however many wait
					}
					release()
					return
				}
				call(0, 1) // none in flight: it leads at once
				call(1, 1) // one in flight, 1 would wait: it queues
				call(2, 1) // 2 would wait, under a quarter of 12
				call(0, 4) // 3 would wait: a second batch, with the two queued
				for q := 1; q <= 4; q++ {
					call(q, 4) // the bound in flight: it queues
				}
				release()
			})
		})
	}
}

// TestCombinerBatchHoldsAtMostCombineMax queues three operations behind
// a batch in flight, with CombineMax 2: the next batch takes two of
// them, the one after the third; no batch holds more than CombineMax.
func TestCombinerBatchHoldsAtMostCombineMax(t *testing.T) {
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineMax: 2, CombineBatches: 1}, func(t *testing.T, db *racefree.DB) {
		call, release := heldCombiner(t, db)
		for q := range 4 {
			call(q, 1)
		}
		s := release()
		if s.MaxBatch != 2 || s.Batches != 3 {
			t.Fatalf("%d batches, the largest of %d; want 3 (1, 2, 1), the largest of 2 (CombineMax)", s.Batches, s.MaxBatch)
		}
	})
}

// TestCombinerYieldsOnlyWhenOthersMayJoin checks when a caller about to
// take a batch yields the processor first (CombineStats.Yields), which
// costs a wake-up of another thread: only when other callers may be about
// to join it, because it was handed the lead (others were queued) or the
// last batch answered more callers than its leader. A lone caller, one
// batch of one after another, never yields.
func TestCombinerYieldsOnlyWhenOthersMayJoin(t *testing.T) {
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		testdb.ExecAll(t, db,
			`CREATE TABLE combine_y (k TEXT PRIMARY KEY, v BIGINT NOT NULL)`,
			`INSERT INTO combine_y (k, v) VALUES ('a', 0)`,
		)
		lone := func() {
			t.Helper()
			op := &wire.Op{Group: "g", Key: "lone", Stmts: []*wire.Statement{{Query: `UPDATE combine_y SET v = v + 1 WHERE k = 'a'`}}}
			if ran, err := wire.Of(db).Combine(ctx, op); !ran || err != nil {
				t.Fatalf("a lone call: ran %v, %v", ran, err)
			}
		}
		for range 20 {
			lone()
		}
		if s := db.CombineStats(); s.Yields != 0 || s.Batches != 20 {
			t.Fatalf("20 calls one after another: %d yields in %d batches, want none in 20", s.Yields, s.Batches)
		}
		call, release := heldCombiner(t, db)
		call(0, 1)
		call(1, 1)
		call(2, 1)
		call(3, 1)
		// The held batch's leader followed batches of one: it did not
		// yield. The first queued call was handed the lead: it yielded,
		// then took the other two.
		if s := release(); s.Yields != 1 || s.Batches != 22 || s.MaxBatch != 3 {
			t.Fatalf("a held batch and three queued calls: %d yields, %d batches (the largest %d), want 1 yield, 22 batches (the largest 3)", s.Yields, s.Batches, s.MaxBatch)
		}
		lone() // the last batch answered three callers: it yields
		lone() // the last batch answered one: it does not
		if s := db.CombineStats(); s.Yields != 2 {
			t.Fatalf("two lone calls after a batch of three: %d yields in all, want 2", s.Yields)
		}
	})
}

// TestCombinerPreparesWhatItsBatchesRan: on SQLite a batch of several
// operations runs in a transaction, where it uses only the preparations
// the pool already holds, and then prepares on the pool the statements it
// ran unprepared, so that the next batches run them prepared (a profile
// at one client once put half of a claim's CPU in parsing). PostgreSQL
// keeps no preparations of its own.
func TestCombinerPreparesWhatItsBatchesRan(t *testing.T) {
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		testdb.ExecAll(t, db,
			`CREATE TABLE combine_p (k TEXT PRIMARY KEY, v BIGINT NOT NULL)`,
			`INSERT INTO combine_p (k, v) VALUES ('gate', 0), ('a', 0), ('b', 0)`,
		)
		const bump = `UPDATE combine_p SET v = v + 2 WHERE k = ?1`
		q := bump
		if db.Engine() == racefree.Postgres {
			q = strings.ReplaceAll(bump, "?1", "$1")
		}
		if wire.Of(db).PreparedAlready(q) != nil {
			t.Fatal("prepared before any batch ran it")
		}
		combine := func(k string) func() {
			return func() {
				op := &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{{Query: q, Args: []any{k}}}}
				if ran, err := wire.Of(db).Combine(ctx, op); !ran || err != nil {
					t.Errorf("%s: ran %v, %v", k, ran, err)
				}
			}
		}
		_, wait := testdb.Behind(t, db,
			func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `UPDATE combine_p SET v = v WHERE k = 'gate'`)
				return err
			},
			func() error {
				_, err := wire.Of(db).Combine(ctx, &wire.Op{Group: "g", Key: "gate", Stmts: []*wire.Statement{{Query: `UPDATE combine_p SET v = v + 1 WHERE k = 'gate'`}}})
				return err
			},
			combine("a"), combine("b"))
		wait()
		if s := db.CombineStats(); s.MaxBatch != 2 {
			t.Fatalf("the largest batch: %d, want the two calls in one", s.MaxBatch)
		}
		got := wire.Of(db).PreparedAlready(q)
		if db.Engine() == racefree.Postgres {
			if got != nil {
				t.Fatal("PostgreSQL: a preparation kept, want none")
			}
			return
		}
		if got == nil {
			t.Fatal("SQLite: the batch's statement is not prepared after it")
		}
	})
}

// TestCombinerRunsEveryStatementOfAnOp runs operations through
// wire.DB.Combine alone and in a batch, on both engines: every statement of an
// operation runs, in order, with its own RowsAffected; a Dest statement
// that finds no row makes the operation's error ErrNotFound while the
// later statements still run, and one that finds its row fills Dest; an
// operation's Begin runs before its statements, once per batch, however
// many operations of the batch carry it.
func TestCombinerRunsEveryStatementOfAnOp(t *testing.T) {
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		testdb.ExecAll(t, db,
			`CREATE TABLE combine_s (k TEXT PRIMARY KEY, v BIGINT NOT NULL)`,
			`CREATE TABLE combine_begins (n BIGINT NOT NULL)`,
			`INSERT INTO combine_s (k, v) VALUES ('z', 0)`,
		)
		st := func(q string, dest ...any) *wire.Statement { return &wire.Statement{Query: q, Dest: dest} }
		combine := func(op *wire.Op) error {
			t.Helper()
			ran, err := wire.Of(db).Combine(ctx, op)
			if !ran {
				t.Fatalf("op %s: its batch failed (%v)", op.Key, err)
			}
			return err
		}
		value := func(k string) int64 {
			t.Helper()
			var v int64
			if err := db.QueryRowContext(ctx, `SELECT v FROM combine_s WHERE k = '`+k+`'`).Scan(&v); err != nil {
				t.Fatalf("row %s: %v", k, err)
			}
			return v
		}
		begins := func() int {
			t.Helper()
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM combine_begins`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		affected := func(op *wire.Op, want ...int64) {
			t.Helper()
			for i, s := range op.Stmts {
				if want[i] >= 0 && s.RowsAffected != want[i] {
					t.Errorf("op %s, statement %d: RowsAffected %d, want %d", op.Key, i, s.RowsAffected, want[i])
				}
			}
		}

		// Three statements of one op alone, each with its own count.
		op := &wire.Op{Group: "g", Key: "a", Stmts: []*wire.Statement{
			st(`INSERT INTO combine_s (k, v) VALUES ('a', 1)`),
			st(`INSERT INTO combine_s (k, v) VALUES ('b', 2)`),
			st(`UPDATE combine_s SET v = v + 10 WHERE k IN ('a', 'b')`),
		}}
		if err := combine(op); err != nil {
			t.Fatal(err)
		}
		affected(op, 1, 1, 2)
		if a, b := value("a"), value("b"); a != 11 || b != 12 {
			t.Fatalf("a %d, b %d; want 11, 12: every statement, in order", a, b)
		}

		// An op alone whose second statement fails commits nothing of
		// the first: its batch failed whole, and its caller runs it alone.
		op = &wire.Op{Group: "g", Key: "x", Stmts: []*wire.Statement{
			st(`INSERT INTO combine_s (k, v) VALUES ('x', 1)`),
			st(`INSERT INTO combine_s (k, v) VALUES ('a', 1)`),
		}}
		if ran, err := wire.Of(db).Combine(ctx, op); ran || err != nil {
			t.Fatalf("an op whose statement fails: ran %v, %v; want false, nil (its caller runs it alone)", ran, err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM combine_s WHERE k = 'x'`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("an op whose second statement failed: its first wrote %d rows (%v), want none", n, err)
		}

		// A Dest that finds no row, one that finds its row, then a write.
		var none, found int64
		op = &wire.Op{Group: "g", Key: "d", Stmts: []*wire.Statement{
			st(`SELECT v FROM combine_s WHERE k = 'nobody'`, &none),
			st(`SELECT v FROM combine_s WHERE k = 'a'`, &found),
			st(`INSERT INTO combine_s (k, v) VALUES ('c', 3)`),
		}}
		if err := combine(op); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("a Dest with no row: %v, want ErrNotFound", err)
		}
		if found != 11 {
			t.Errorf("the Dest that finds its row: %d, want 11", found)
		}
		value("c")              // the write after the missing row ran
		affected(op, -1, -1, 1) // a SELECT's count is the engine's

		// An op with a Begin alone: the Begin runs, then each statement.
		op = &wire.Op{Group: "g", Key: "b",
			Begin: []*wire.Statement{st(`INSERT INTO combine_begins (n) VALUES (1)`)},
			Stmts: []*wire.Statement{
				st(`UPDATE combine_s SET v = v + 1 WHERE k = 'a'`),
				st(`UPDATE combine_s SET v = v + 1 WHERE k IN ('a', 'b')`),
			}}
		if err := combine(op); err != nil {
			t.Fatal(err)
		}
		affected(op, 1, 2)
		if n, a := begins(), value("a"); n != 1 || a != 13 {
			t.Fatalf("an op with a Begin alone: %d begins, a %d; want 1, 13", n, a)
		}
		op = &wire.Op{Group: "g", Key: "b1",
			Begin: []*wire.Statement{st(`INSERT INTO combine_begins (n) VALUES (1)`)},
			Stmts: []*wire.Statement{st(`UPDATE combine_s SET v = v + 1 WHERE k = 'b'`)}}
		if err := combine(op); err != nil {
			t.Fatal(err)
		}
		affected(op, 1)
		if n, b := begins(), value("b"); n != 2 || b != 14 {
			t.Fatalf("an op of one statement with a Begin alone: %d begins, b %d; want 2, 14", n, b)
		}

		// Two ops with a Begin in one batch, queued behind one held in
		// flight by a row lock: the Begin runs once.
		lock, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lock.Rollback() })
		if _, err := lock.ExecContext(ctx, `UPDATE combine_s SET v = v WHERE k = 'z'`); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 3)
		for i, k := range []string{"held", "q1", "q2"} {
			op := &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{st(`UPDATE combine_s SET v = v + 1 WHERE k = 'z'`)}}
			if i > 0 {
				op.Begin = []*wire.Statement{st(`INSERT INTO combine_begins (n) VALUES (1)`)}
			}
			go func() { done <- combine(op) }()
			testdb.WaitCombiner(t, db, "the calls", func(s racefree.CombineStats) bool { return s.Running == 1 && s.Queued == i })
		}
		if err := lock.Commit(); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := await(t, done, "the batches"); err != nil {
				t.Fatal(err)
			}
		}
		if s := db.CombineStats(); s.MaxBatch != 2 {
			t.Errorf("the largest batch: %d, want 2 (q1 and q2)", s.MaxBatch)
		}
		if n, z := begins(), value("z"); n != 3 || z != 3 {
			t.Fatalf("a batch of two ops with a Begin: %d begins in all, z %d; want 3 (one for the batch), 3", n, z)
		}
	})
}

// TestCombinerManyFormsOnPostgres: on PostgreSQL, which pipelines, a
// batch of two or more operations whose statements have Many forms runs
// each form once over arrays (the rows it writes say so), and hands each
// returned row, whatever its order, to the operation at its place: each
// caller reads its own value, RowsAffected 1, or ErrNotFound when its row
// did not come back. An operation alone runs its own Query, not the Many
// form.
func TestCombinerManyFormsOnPostgres(t *testing.T) {
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1})
	ctx := context.Background()
	testdb.ExecAll(t, db,
		`CREATE TABLE combine_m (k TEXT PRIMARY KEY, v BIGINT NOT NULL, many BOOLEAN NOT NULL DEFAULT false)`,
		`INSERT INTO combine_m (k, v) VALUES ('z', 0)`,
	)
	insert := func(k string, v int64) *wire.Op {
		return &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{{
			Query: `INSERT INTO combine_m (k, v) VALUES ($1, $2)`,
			Many: `WITH a AS (SELECT * FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS a(k, v, i)),
				ins AS (INSERT INTO combine_m (k, v, many) SELECT k, v, true FROM a RETURNING k)
				SELECT a.i FROM a JOIN ins USING (k) ORDER BY a.i DESC`,
			Args: []any{k, v},
		}}}
	}
	read := func(k string, dest *int64) *wire.Op {
		return &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{{
			Query: `SELECT v FROM combine_m WHERE k = $1`,
			Many:  `SELECT a.i, m.v FROM unnest($1::text[]) WITH ORDINALITY AS a(k, i) JOIN combine_m AS m USING (k) ORDER BY a.i DESC`,
			Args:  []any{k},
			Dest:  []any{dest},
		}}}
	}
	combine := func(op *wire.Op) error {
		ran, err := wire.Of(db).Combine(ctx, op)
		if !ran {
			return fmt.Errorf("op %s: its batch failed (%v)", op.Key, err)
		}
		return err
	}
	// behind runs ops in one batch, queued behind one held in flight by
	// a row lock, and returns their errors.
	behind := func(ops ...*wire.Op) []error {
		t.Helper()
		errs := make([]error, len(ops))
		calls := make([]func(), len(ops))
		for i, op := range ops {
			calls[i] = func() { errs[i] = combine(op) }
		}
		_, wait := testdb.Behind(t, db,
			func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `UPDATE combine_m SET v = v WHERE k = 'z'`)
				return err
			},
			func() error {
				return combine(&wire.Op{Group: "g", Key: "z", Stmts: []*wire.Statement{{Query: `UPDATE combine_m SET v = v + 1 WHERE k = 'z'`}}})
			},
			calls...)
		wait()
		return errs
	}
	row := func(k string) (v int64, many bool) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT v, many FROM combine_m WHERE k = $1`, k).Scan(&v, &many); err != nil {
			t.Fatalf("row %s: %v", k, err)
		}
		return v, many
	}

	solo := insert("solo", 1)
	if err := combine(solo); err != nil {
		t.Fatal(err)
	}
	if v, many := row("solo"); v != 1 || many || solo.Stmts[0].RowsAffected != 1 {
		t.Fatalf("an op alone: v %d, by the Many form %v, RowsAffected %d; want 1, false (its own Query), 1", v, many, solo.Stmts[0].RowsAffected)
	}

	ops := []*wire.Op{insert("m1", 10), insert("m2", 20), insert("m3", 30)}
	for i, err := range behind(ops...) {
		if err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
		if ops[i].Stmts[0].RowsAffected != 1 {
			t.Errorf("insert %d: RowsAffected %d, want 1", i, ops[i].Stmts[0].RowsAffected)
		}
	}
	for i, k := range []string{"m1", "m2", "m3"} {
		if v, many := row(k); v != int64(10*(i+1)) || !many {
			t.Errorf("%s: v %d, by the Many form %v; want %d, true", k, v, many, 10*(i+1))
		}
	}
	if s := db.CombineStats(); s.MaxBatch != 3 {
		t.Fatalf("the largest batch: %d, want 3", s.MaxBatch)
	}

	// Two, PostgreSQL's ManyFrom, are the fewest a Many form runs for.
	for i, err := range behind(insert("p1", 1), insert("p2", 2)) {
		if err != nil {
			t.Fatalf("insert p%d: %v", i+1, err)
		}
	}
	for _, k := range []string{"p1", "p2"} {
		if _, many := row(k); !many {
			t.Errorf("%s of a batch of two: not by the Many form; want it (ManyFrom 2)", k)
		}
	}

	var v1, v2, v3 int64 = -1, -1, -1
	reads := []*wire.Op{read("m1", &v1), read("m15", &v2), read("m3", &v3)}
	errs := behind(reads...)
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], racefree.ErrNotFound) {
		t.Fatalf("reads: %v; want nil, ErrNotFound, nil", errs)
	}
	if v1 != 10 || v3 != 30 || v2 != -1 {
		t.Fatalf("reads: %d, %d, %d; want 10, untouched, 30: each row to its own caller", v1, v2, v3)
	}
	for i, want := range []int64{1, 0, 1} {
		if got := reads[i].Stmts[0].RowsAffected; got != want {
			t.Errorf("read %d: RowsAffected %d, want %d", i, got, want)
		}
	}
}

// TestCombinerRunsTheOperationsOfOneKeyInTheirOrder queues operations on
// five keys, eight on each, behind a batch held in flight by a row lock
// (Config.CombineBatches 1), and sees in a log the order they ran in:
// the operations of each key run in the order they came, on either
// engine. On SQLite (which runs a batch's statements one after the other)
// they share one batch of 40, more than a sort that keeps equal keys in
// place by luck (insertion sort, up to 12) orders; on PostgreSQL (which
// pipelines) a batch holds each key once: eight batches of five. Each
// operation's second statement reads a row, which every other operation
// misses, and its third is IfMissed: it runs only after that miss, and
// only where the operation's batch runs another of its key right after it
// (on SQLite, the first seven of each key), never for an operation alone
// or last of its key, nor in a pipeline. Then operations whose statements have Many forms keep their keys
// apart on every engine, and an operation passed over (here for its form)
// holds back the later ones of its key: none joins a batch ahead of it.
func TestCombinerRunsTheOperationsOfOneKeyInTheirOrder(t *testing.T) {
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		id := `id INTEGER PRIMARY KEY` // SQLite: the rowid, which grows with each insert
		if db.Engine() == racefree.Postgres {
			id = `id BIGSERIAL PRIMARY KEY`
		}
		testdb.ExecAll(t, db,
			`CREATE TABLE combine_o (`+id+`, k TEXT NOT NULL, i BIGINT NOT NULL)`,
			`CREATE TABLE combine_f (i BIGINT NOT NULL)`,
			`CREATE TABLE combine_oz (k TEXT PRIMARY KEY, v BIGINT NOT NULL)`,
			`INSERT INTO combine_oz (k, v) VALUES ('z', 0)`,
		)
		// logged is an op on key k that logs i in the order it runs; with
		// many, its statement has a Many form (PostgreSQL's, which no batch
		// here runs: none holds two such ops; run, it would fail the batch
		// for want of its arrays, and the test with it).
		logged := func(k string, i int, many bool) *wire.Op {
			st := &wire.Statement{Query: fmt.Sprintf(`INSERT INTO combine_o (k, i) VALUES ('%s', %d)`, k, i)}
			if many {
				st.Many = `INSERT INTO combine_o (k, i) SELECT k, i FROM unnest($1::text[], $2::bigint[]) AS a(k, i)`
			}
			return &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{st}}
		}
		// behind queues ops, in this order, behind a batch held in flight,
		// releases it and waits for them.
		behind := func(ops ...*wire.Op) {
			t.Helper()
			lock, err := db.SQL().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Rollback()
			if _, err := lock.ExecContext(ctx, `UPDATE combine_oz SET v = v WHERE k = 'z'`); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, len(ops)+1)
			combine := func(op *wire.Op) {
				ran, err := wire.Of(db).Combine(ctx, op)
				switch {
				case errors.Is(err, racefree.ErrNotFound):
					err = nil // a Dest that found no row: the op's outcome
				case err == nil && !ran:
					err = fmt.Errorf("op %s: its batch failed: reported not run", op.Key)
				}
				done <- err
			}
			go combine(&wire.Op{Group: "g", Key: "z", Stmts: []*wire.Statement{{Query: `UPDATE combine_oz SET v = v + 1 WHERE k = 'z'`}}})
			testdb.WaitCombiner(t, db, "the held batch", func(s racefree.CombineStats) bool { return s.Running == 1 })
			for i, op := range ops {
				go combine(op)
				testdb.WaitCombiner(t, db, "the queue", func(s racefree.CombineStats) bool { return s.Queued == i+1 })
			}
			if err := lock.Commit(); err != nil {
				t.Fatal(err)
			}
			for range len(ops) + 1 {
				if err := await(t, done, "the operations"); err != nil {
					t.Fatal(err)
				}
			}
		}
		// ran returns the i logged for each key, in the order they ran.
		ran := func() map[string][]int {
			t.Helper()
			rows, err := db.QueryContext(ctx, `SELECT k, i FROM combine_o ORDER BY id`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			got := map[string][]int{}
			for rows.Next() {
				var k string
				var i int
				if err := rows.Scan(&k, &i); err != nil {
					t.Fatal(err)
				}
				got[k] = append(got[k], i)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return got
		}

		// withMiss adds to op a read that finds its row, or, with miss, none,
		// then an IfMissed statement that logs i.
		withMiss := func(op *wire.Op, i int, miss bool) *wire.Op {
			read := `SELECT 1`
			if miss {
				read = `SELECT 1 WHERE 1 = 0`
			}
			op.Stmts = append(op.Stmts, &wire.Statement{Query: read, Dest: []any{new(int64)}},
				&wire.Statement{Query: fmt.Sprintf(`INSERT INTO combine_f (i) VALUES (%d)`, i), IfMissed: true})
			return op
		}
		const keys, each = 5, 8
		var ops []*wire.Op
		missedFollowed := 0 // on SQLite: the IfMissed statements that run
		for i := range keys * each {
			ops = append(ops, withMiss(logged(fmt.Sprint("k", i%keys), i, false), i, i%2 == 1))
			if i%2 == 1 && i+keys < keys*each {
				missedFollowed++
			}
		}
		before := db.CombineStats()
		behind(ops...)
		for k, got := range ran() {
			for j := 1; j < len(got); j++ {
				if got[j] < got[j-1] {
					t.Fatalf("key %s ran its operations in the order %v, not in the order they came", k, got)
				}
			}
		}
		s := db.CombineStats()
		batches, largest, followed := int64(1+each), keys, 0
		if db.Engine() == racefree.SQLite {
			batches, largest, followed = 2, keys*each, missedFollowed
		}
		if got := s.Batches - before.Batches; got != batches || s.MaxBatch != largest {
			t.Errorf("%d batches, the largest of %d; want %d (the held one and the queued), the largest of %d (%+v)", got, s.MaxBatch, batches, largest, s)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM combine_f`).Scan(&n); err != nil || n != followed {
			t.Errorf("IfMissed statements: %d ran (%v), want %d: one for each operation that missed and that its batch ran another of its key right after", n, err, followed)
		}
		// An op alone that missed: its IfMissed statement does not run.
		alone := withMiss(logged("alone", 0, false), -1, true)
		if ran, err := wire.Of(db).Combine(ctx, alone); !ran || !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("an op alone: ran %v, %v; want true, ErrNotFound", ran, err)
		}
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM combine_f WHERE i = -1`).Scan(&n); err != nil || n != 0 {
			t.Errorf("an op alone ran its IfMissed statement (%d rows, %v)", n, err)
		}

		// x leads its batch; m1 and m2 (Many forms) never share one, on
		// either engine; m3 (no Many form, like x) waits for them although
		// its form would join x's batch. On SQLite, whose batches mix
		// forms, m1 joins x's.
		before = db.CombineStats()
		behind(logged("x", 100, false), logged("m", 101, true), logged("m", 102, true), logged("m", 103, false))
		if got, want := ran()["m"], []int{101, 102, 103}; !slices.Equal(got, want) {
			t.Errorf("key m ran %v, want %v: in the order its operations came", got, want)
		}
		var want int64 = 5
		which := "the held one, {x}, {m 101}, {m 102}, {m 103}"
		if db.Engine() == racefree.SQLite {
			want, which = 4, "the held one, {x, m 101}, {m 102}, {m 103}"
		}
		if got := db.CombineStats().Batches - before.Batches; got != want {
			t.Errorf("%d batches, want %d: %s", got, want, which)
		}
	})
}

// TestCombinerManyFormsOnSQLite: on SQLite, which does not pipeline, the
// operations of a batch that share their Many forms, when they are eight
// or more (the engine's ManyFrom), run each form once in the batch's
// transaction, over one JSON array of their Args (?1), and each returned
// row, whatever its order, goes to the operation at its place, which a
// RETURNING clause finds through ?2 (hex of the operation's Key to its
// place): each caller reads its own value, RowsAffected 1, or
// ErrNotFound when its row did not come back. Fewer than eight, or one
// alone, run their own Query. Operations of other forms, or with no Many
// form, share the batch (SQLite batches mix forms, as they did before
// there were Many forms on SQLite) and run their own statements in it. A
// Many form that names a place twice, or one out of range, fails the
// batch, and its operations run alone.
func TestCombinerManyFormsOnSQLite(t *testing.T) {
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1})
	ctx := context.Background()
	testdb.ExecAll(t, db,
		`CREATE TABLE combine_m (k TEXT PRIMARY KEY, v BIGINT NOT NULL, many BOOLEAN NOT NULL DEFAULT false)`,
		`INSERT INTO combine_m (k, v) VALUES ('z', 0)`,
	)
	const manyFrom = 8 // the SQLite engine's ManyFrom
	// insert writes its row, and says whether the Many form wrote it.
	insert := func(k string, v int64) *wire.Op {
		return &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{{
			Query: `INSERT INTO combine_m (k, v) VALUES (?1, ?2)`,
			Many: `INSERT INTO combine_m (k, v, many) SELECT j.value ->> 0, j.value ->> 1, true FROM json_each(?1) AS j
				RETURNING ?2 ->> ('$."' || hex(k) || '"')`,
			Args: []any{k, v},
		}}}
	}
	// read reads its row, the Many form's rows in reverse order.
	read := func(k string, dest *int64) *wire.Op {
		return &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{{
			Query: `SELECT v FROM combine_m WHERE k = ?1`,
			Many: `SELECT j.key + 1, m.v FROM json_each(?1) AS j JOIN combine_m AS m ON m.k = j.value ->> 0
				ORDER BY j.key DESC`,
			Args: []any{k},
			Dest: []any{dest},
		}}}
	}
	// bump has no Many form.
	bump := func(k string) *wire.Op {
		return &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{{Query: `UPDATE combine_m SET v = v + 1 WHERE k = 'z'`}}}
	}
	combine := func(op *wire.Op) error {
		ran, err := wire.Of(db).Combine(ctx, op)
		if !ran {
			return fmt.Errorf("op %s: its batch failed (%v)", op.Key, err)
		}
		return err
	}
	// behind runs ops in one batch, queued behind one held in flight by
	// SQLite's write lock, and returns their errors.
	behind := func(ops ...*wire.Op) []error {
		t.Helper()
		errs := make([]error, len(ops))
		calls := make([]func(), len(ops))
		for i, op := range ops {
			calls[i] = func() { errs[i] = combine(op) }
		}
		_, wait := testdb.Behind(t, db,
			func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `UPDATE combine_m SET v = v WHERE k = 'z'`)
				return err
			},
			func() error { return combine(bump("held")) },
			calls...)
		wait()
		return errs
	}
	row := func(k string) (v int64, many bool) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT v, many FROM combine_m WHERE k = ?1`, k).Scan(&v, &many); err != nil {
			t.Fatalf("row %s: %v", k, err)
		}
		return v, many
	}
	keys := func(prefix string, n int) []string {
		ks := make([]string, n)
		for i := range ks {
			ks[i] = fmt.Sprintf("%s%02d", prefix, i)
		}
		return ks
	}

	solo := insert("solo", 1)
	if err := combine(solo); err != nil {
		t.Fatal(err)
	}
	if v, many := row("solo"); v != 1 || many || solo.Stmts[0].RowsAffected != 1 {
		t.Fatalf("an op alone: v %d, by the Many form %v, RowsAffected %d; want 1, false (its own Query), 1", v, many, solo.Stmts[0].RowsAffected)
	}

	// Fewer than ManyFrom: each its own Query, in one batch.
	var few []*wire.Op
	for i, k := range keys("f", manyFrom-1) {
		few = append(few, insert(k, int64(i)))
	}
	before := db.CombineStats()
	for i, err := range behind(few...) {
		if err != nil || few[i].Stmts[0].RowsAffected != 1 {
			t.Fatalf("insert %d of %d: %v, RowsAffected %d", i, len(few), err, few[i].Stmts[0].RowsAffected)
		}
	}
	for i, k := range keys("f", manyFrom-1) {
		if v, many := row(k); v != int64(i) || many {
			t.Errorf("%s in a batch of %d: v %d, by the Many form %v; want %d, false", k, manyFrom-1, v, many, i)
		}
	}
	if s := db.CombineStats(); s.MaxBatch != manyFrom-1 || s.Many != before.Many {
		t.Fatalf("combiner %+v: want a batch of %d, none by Many forms", s, manyFrom-1)
	}

	// ManyFrom inserts, a key holding a quote and a backslash among them,
	// and two ops with no Many form: one batch, the inserts by their Many
	// form, once.
	ks := append(keys("m", manyFrom-1), `q"\`)
	var ops []*wire.Op
	for i, k := range ks {
		ops = append(ops, insert(k, int64(10*(i+1))))
	}
	ops = append(ops, bump("b1"), bump("b2"))
	before = db.CombineStats()
	for i, err := range behind(ops...) {
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		if ops[i].Stmts[0].RowsAffected != 1 {
			t.Errorf("op %d: RowsAffected %d, want 1", i, ops[i].Stmts[0].RowsAffected)
		}
	}
	for i, k := range ks {
		if v, many := row(k); v != int64(10*(i+1)) || !many {
			t.Errorf("%s: v %d, by the Many form %v; want %d, true", k, v, many, 10*(i+1))
		}
	}
	if v, _ := row("z"); v != 4 {
		t.Errorf("z: %d, want 4 (two held batches, two ops with no Many form)", v)
	}
	if s := db.CombineStats(); s.MaxBatch != len(ops) || s.Many != before.Many+int64(len(ks)) {
		t.Fatalf("combiner %+v after %+v: want one batch of %d, %d of them by Many forms", s, before, len(ops), len(ks))
	}

	// Reads: each row to its own caller, a missing row ErrNotFound.
	got := make([]int64, len(ks))
	var reads []*wire.Op
	for i, k := range ks {
		got[i] = -1
		if i == 3 {
			k = "nobody"
		}
		reads = append(reads, read(k, &got[i]))
	}
	errs := behind(reads...)
	for i := range ks {
		want, wantErr, affected := int64(10*(i+1)), error(nil), int64(1)
		if i == 3 {
			want, wantErr, affected = -1, racefree.ErrNotFound, 0
		}
		if got[i] != want || !errors.Is(errs[i], wantErr) || errs[i] != nil && wantErr == nil || reads[i].Stmts[0].RowsAffected != affected {
			t.Errorf("read %d: %d, %v, RowsAffected %d; want %d, %v, %d: each row to its own caller", i, got[i], errs[i], reads[i].Stmts[0].RowsAffected, want, wantErr, affected)
		}
	}

	// A Many form that names one place twice fails its batch: every op
	// runs alone (Combine reports false), none got another's row.
	var twice []*wire.Op
	for _, k := range keys("t", manyFrom) {
		twice = append(twice, &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{{
			Query: `SELECT 1`,
			Many:  `SELECT 1, 1 FROM json_each(?1)`,
			Args:  []any{k},
			Dest:  []any{new(int64)},
		}}})
	}
	for i, err := range behind(twice...) {
		if err == nil || !strings.Contains(err.Error(), "its batch failed") {
			t.Errorf("op %d of a Many form that names place 1 twice: %v, want its batch failed", i, err)
		}
	}
}

// TestASQLiteBatchReadsTheClockUnderItsWriteLock: a SQLite batch binds the
// engine's clock of its statements (wire.Statement.Clock, nil) to the
// process clock read once it holds the write lock. A batch that waited for
// the lock decides at a time after the wait, as each statement reading
// the clock itself would; its statements share the one reading; and once
// the batch is over, the statements name the engine's clock again, so that
// one run alone afterwards reads the clock anew.
func TestASQLiteBatchReadsTheClockUnderItsWriteLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), &racefree.Config{Combine: racefree.CombineOn})
	testdb.ExecAll(t, db, `CREATE TABLE combine_c (k TEXT PRIMARY KEY, bound BOOLEAN NOT NULL, at BIGINT NOT NULL)`)
	insert := func(k string) *wire.Statement {
		return &wire.Statement{
			Query: `INSERT INTO combine_c (k, bound, at) VALUES (?1, ?2 IS NOT NULL, COALESCE(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)))`,
			Args:  []any{k, nil}, Clock: 2}
	}
	op := &wire.Op{Group: "g", Key: "c", Stmts: []*wire.Statement{insert("a"), insert("b")}}
	lock, err := db.SQL().BeginTx(ctx, nil) // the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.ExecContext(ctx, `INSERT INTO combine_c (k, bound, at) VALUES ('lock', false, 0)`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ran, err := wire.Of(db).Combine(ctx, op)
		if err == nil && !ran {
			err = errors.New("the batch did not run")
		}
		done <- err
	}()
	testdb.WaitCombiner(t, db, "the batch", func(s racefree.CombineStats) bool { return s.Running == 1 })
	// Not a wait for an event: the clock moves on while the batch waits
	// for the lock, so that a clock read before the lock is told apart.
	time.Sleep(20 * time.Millisecond)
	released := racefree.Millis(time.Now())
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := await(t, done, "the batch"); err != nil {
		t.Fatal(err)
	}
	clockReadUnderTheLock(t, db, "combine_c", released, op.Stmts)
}

// clockReadUnderTheLock checks what a batch that waited for the write
// lock until released bound as its statements' clock (stmts, whose
// second argument is the clock, inserted rows "a" and "b" of table with
// whether the clock was bound and its value): one reading, at or after
// released, and nil again in their arguments once the batch is over.
func clockReadUnderTheLock(t *testing.T, db *racefree.DB, table string, released int64, stmts []*wire.Statement) {
	t.Helper()
	var at [2]int64
	for i, k := range []string{"a", "b"} {
		var bound bool
		if err := db.QueryRowContext(context.Background(), `SELECT bound, at FROM `+table+` WHERE k = ?`, k).Scan(&bound, &at[i]); err != nil {
			t.Fatal(err)
		}
		if !bound || at[i] < released {
			t.Errorf("%s: the clock bound %v, at %d; want bound, at or after %d, when the lock was released", k, bound, at[i], released)
		}
	}
	if at[0] != at[1] {
		t.Errorf("the batch's statements at %d and %d; want one reading of the clock", at[0], at[1])
	}
	for i, st := range stmts {
		if st.Args[1] != nil {
			t.Errorf("statement %d's clock after the batch: %v; want nil, the engine's clock, again", i, st.Args[1])
		}
	}
}

// TestCombinerManyFormsRunOnGenericPlans runs rounds of four inserts at
// once through the combiner on a PostgreSQL pool of one connection, so
// that they share pipelined batches and run their Many form, and reads
// from that connection how PostgreSQL planned the form: on its generic
// plan at every run (wire.GenericPlanner), never for its values, and the
// connection plans as PostgreSQL chooses once the batches are over.
func TestCombinerManyFormsRunOnGenericPlans(t *testing.T) {
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), &racefree.Config{Combine: racefree.CombineOn, MaxOpenConns: 1})
	ctx := context.Background()
	testdb.ExecAll(t, db, `CREATE TABLE combine_g (k TEXT PRIMARY KEY, v BIGINT NOT NULL)`)
	const many = `-- combine_g many
		WITH a AS (SELECT * FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS a(k, v, i)),
		ins AS (INSERT INTO combine_g (k, v) SELECT k, v FROM a RETURNING k)
		SELECT a.i FROM a JOIN ins USING (k)`
	var runs, custom int
	for round := 0; runs < 6; round++ {
		if round == 300 {
			t.Fatalf("after %d rounds the Many form ran %d times, want 6: no batches of two or more formed", round, runs)
		}
		errs := make(chan error, 4)
		for w := range 4 {
			go func() {
				k := fmt.Sprintf("k%d-%d", round, w)
				_, err := wire.Of(db).Combine(ctx, &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{{
					Query: `INSERT INTO combine_g (k, v) VALUES ($1, $2)`, Many: many, Args: []any{k, int64(w)},
				}}})
				errs <- err
			}()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		runs, custom = 0, 0
		if err := db.QueryRowContext(ctx, `SELECT COALESCE(sum(generic_plans + custom_plans), 0), COALESCE(sum(custom_plans), 0)
			FROM pg_prepared_statements WHERE statement LIKE '-- combine_g many%'`).Scan(&runs, &custom); err != nil {
			t.Fatal(err)
		}
	}
	if custom != 0 {
		t.Errorf("the Many form: %d of its %d runs planned for their values, want every run on the generic plan", custom, runs)
	}
	var mode string
	if err := db.QueryRowContext(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode); err != nil || mode != "auto" {
		t.Errorf("the connection's plan_cache_mode after the batches: %q (%v), want auto", mode, err)
	}
}

// TestCombinerWaitsForAConnectionNoLongerThanItsDeadline: on PostgreSQL,
// where the server bounds a batch's statements, the batch's wait for a
// pooled connection is the client's alone, and it too ends at the
// earliest Deadline of its operations. With the only connection held
// elsewhere, a batch bounded to 300 ms gives up then and commits
// nothing, and its operation is handed back to run alone, as on SQLite;
// it does not wait for the connection (up to the combiner's minute) and
// commit once its caller had long given up.
func TestCombinerWaitsForAConnectionNoLongerThanItsDeadline(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), &racefree.Config{Combine: racefree.CombineOn, MaxOpenConns: 1})
	testdb.ExecAll(t, db, `CREATE TABLE w (k TEXT PRIMARY KEY, v BIGINT NOT NULL)`)
	ctx := context.Background()
	held, err := db.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	op := insert("bounded", 1)
	op.Deadline = time.Now().Add(300 * time.Millisecond)
	out := testdb.Within(t, 20*time.Second, "a batch bounded to 300 ms, every connection held", func() combined {
		ran, err := wire.Of(db).Combine(ctx, op)
		return combined{ran, err}
	})
	if out.ran {
		t.Fatalf("the batch ran (%v); want it handed back, past its deadline", out.err)
	}
	if s := db.CombineStats(); s.Failed != 1 || s.Batches != 0 {
		t.Fatalf("combiner %+v; want one batch failed, none committed", s)
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	testdb.WaitCombiner(t, db, "an idle combiner", func(s racefree.CombineStats) bool { return s.Running == 0 && s.Queued == 0 })
	if got := rows(t, db, "bounded"); got != 0 {
		t.Fatalf("a batch past its deadline committed %d rows", got)
	}
}
