package racefree_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
)

// Edges of the combiner (combine.go, writer.go, pipeline.go) found by
// reading its code from outside: each test holds one promise of
// wire.DB.Combine at the point where a slip would break it.

// edgesDB opens a DB on engine with the combiner on, one batch at a time,
// and the tables the edge tests use: edges_gate, whose row 'gate' a
// transaction locks to hold a batch in flight, and edges_log, whose rows
// keep the order they were written in.
func edgesDB(t *testing.T, engine string, cfg racefree.Config) *racefree.DB {
	t.Helper()
	cfg.Combine, cfg.CombineBatches = racefree.CombineOn, 1
	db := testdb.Open(t, testdb.NewDSN(t, engine), &cfg)
	serial := `INTEGER PRIMARY KEY AUTOINCREMENT`
	if engine == racefree.Postgres {
		serial = `BIGSERIAL PRIMARY KEY`
	}
	testdb.ExecAll(t, db,
		`CREATE TABLE edges_gate (k TEXT PRIMARY KEY, v BIGINT NOT NULL)`,
		`INSERT INTO edges_gate (k, v) VALUES ('gate', 0)`,
		`CREATE TABLE edges_log (id `+serial+`, k TEXT NOT NULL UNIQUE, at BIGINT, n BIGINT NOT NULL DEFAULT 0)`,
	)
	return db
}

// eachEdges runs body on each engine, as parallel subtests, with a DB
// made by edgesDB with cfg.
func eachEdges(t *testing.T, cfg racefree.Config, body func(t *testing.T, db *racefree.DB)) {
	t.Helper()
	for _, engine := range testdb.Engines {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			body(t, edgesDB(t, engine, cfg))
		})
	}
}

// edgesOp returns an operation of key k made of queries, which name no
// parameter.
func edgesOp(k string, queries ...string) *wire.Op {
	op := &wire.Op{Group: "g", Key: k}
	for _, q := range queries {
		op.Stmts = append(op.Stmts, &wire.Statement{Query: q})
	}
	return op
}

// logRow returns the statement that writes k's row of edges_log.
func logRow(k string) string { return fmt.Sprintf(`INSERT INTO edges_log (k) VALUES ('%s')`, k) }

// edgesBehind runs calls queued, in the order given, behind a batch held
// in flight by a lock on edges_gate (testdb.Behind), and waits for them.
func edgesBehind(t *testing.T, db *racefree.DB, calls ...func()) {
	t.Helper()
	ctx := context.Background()
	_, wait := testdb.Behind(t, db,
		func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE edges_gate SET v = v WHERE k = 'gate'`)
			return err
		},
		func() error {
			_, err := wire.Of(db).Combine(ctx, edgesOp("gate", `UPDATE edges_gate SET v = v + 1 WHERE k = 'gate'`))
			return err
		},
		calls...)
	wait()
}

// lockGate returns a transaction that holds edges_gate's row 'gate'
// until it ends (at the latest, when the test does): a batch that writes
// the row waits for it.
func lockGate(t *testing.T, db *racefree.DB) *sql.Tx {
	t.Helper()
	ctx := context.Background()
	lock, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Rollback() })
	if _, err := lock.ExecContext(ctx, `UPDATE edges_gate SET v = v WHERE k = 'gate'`); err != nil {
		t.Fatal(err)
	}
	return lock
}

// combineBehind queues ops' calls, in the order given, behind a batch held
// in flight (edgesBehind), and returns each call's error; a call whose
// batch failed without one gets an error that says so.
func combineBehind(t *testing.T, db *racefree.DB, ops ...*wire.Op) []error {
	t.Helper()
	errs := make([]error, len(ops))
	var calls []func()
	for i, op := range ops {
		calls = append(calls, func() {
			ran, err := wire.Of(db).Combine(context.Background(), op)
			if err == nil && !ran {
				err = errors.New("its batch failed")
			}
			errs[i] = err
		})
	}
	edgesBehind(t, db, calls...)
	return errs
}

// TestEdgesABatchRunsItsOperationsInTheOrderOfTheirKeys: operations of
// three keys queued in the order c, a, b share one batch, which runs them
// in the order of their keys, a, b, c, so that two processes' batches
// take their row locks in one order and never deadlock each other.
func TestEdgesABatchRunsItsOperationsInTheOrderOfTheirKeys(t *testing.T) {
	t.Parallel()
	eachEdges(t, racefree.Config{}, func(t *testing.T, db *racefree.DB) {
		var ops []*wire.Op
		for _, k := range []string{"c", "a", "b"} {
			ops = append(ops, edgesOp(k, logRow(k)))
		}
		before := db.CombineStats()
		errs := combineBehind(t, db, ops...)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		if s := db.CombineStats(); s.Batches-before.Batches != 2 {
			t.Fatalf("%d batches, want 2: the held one, then the three keys in one (%+v)", s.Batches-before.Batches, s)
		}
		got := testdb.Strings(t, db, `SELECT k FROM edges_log ORDER BY id`)
		if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
			t.Fatalf("the batch wrote %v, want %v: the order of the keys, not of arrival", got, want)
		}
	})
}

// TestEdgesABatchGivesUpAtTheEarliestDeadlineOfItsOperations: a batch of
// two operations waiting for a lock held elsewhere, one bounded to about
// two seconds and one to a minute, gives up at the earlier deadline,
// commits nothing, and hands both back to run alone; it never waits for
// the later one (or, on SQLite, for the busy timeout).
func TestEdgesABatchGivesUpAtTheEarliestDeadlineOfItsOperations(t *testing.T) {
	t.Parallel()
	eachEdges(t, racefree.Config{}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		lock := lockGate(t, db)
		bump := `UPDATE edges_gate SET v = v + 1 WHERE k = 'gate'`
		t0 := time.Now()
		out := make(chan timed, 3)
		call := func(op *wire.Op) {
			ran, err := wire.Of(db).Combine(ctx, op)
			out <- timed{op.Key, ran, err, time.Since(t0)}
		}
		gate := edgesOp("gate", bump, logRow("gate"))
		gate.Deadline = t0.Add(time.Second)
		go call(gate)
		testdb.WaitCombiner(t, db, "the first batch", func(s racefree.CombineStats) bool { return s.Running == 1 })
		early := edgesOp("early", bump, logRow("early"))
		early.Deadline = t0.Add(2 * time.Second)
		late := edgesOp("late", bump, logRow("late"))
		late.Deadline = t0.Add(time.Minute)
		for i, op := range []*wire.Op{late, early} {
			go call(op)
			testdb.WaitCombiner(t, db, "the queue", func(s racefree.CombineStats) bool { return s.Queued == i+1 })
		}
		for range 3 {
			select {
			case r := <-out:
				if r.ran {
					t.Errorf("%s: ran (%v) in a batch that waited for the lock past its deadline; want handed back", r.key, r.err)
				}
			case <-time.After(8 * time.Second):
				t.Fatalf("8 s on, a batch bounded to 2 s still waits for the lock: %+v", db.CombineStats())
			}
		}
		if s := db.CombineStats(); s.Failed != 2 || s.Batches != 0 {
			t.Fatalf("%+v; want two batches failed, none committed", s)
		}
		if err := lock.Rollback(); err != nil {
			t.Fatal(err)
		}
		if got := testdb.Strings(t, db, `SELECT k FROM edges_log`); len(got) != 0 {
			t.Fatalf("batches past their deadline wrote %v", got)
		}
	})
}

// TestEdgesABatchRunsToItsEndWhenItsLeaderGivesUp: the caller that leads
// a batch and gives up once the batch began (its request cancelled) does
// not end it: the batch runs on a context of its own, commits, and the
// caller is told its operation ran, once.
func TestEdgesABatchRunsToItsEndWhenItsLeaderGivesUp(t *testing.T) {
	t.Parallel()
	eachEdges(t, racefree.Config{}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		lock := lockGate(t, db)
		lctx, cancel := context.WithCancel(ctx)
		defer cancel()
		out := make(chan combined, 1)
		go func() {
			ran, err := wire.Of(db).Combine(lctx, edgesOp("leader", `UPDATE edges_gate SET v = v + 1 WHERE k = 'gate'`, logRow("leader")))
			out <- combined{ran, err}
		}()
		testdb.WaitCombiner(t, db, "the leader's batch", func(s racefree.CombineStats) bool { return s.Running == 1 })
		cancel()
		if err := lock.Rollback(); err != nil {
			t.Fatal(err)
		}
		r := await(t, out, "the leader")
		if !r.ran || r.err != nil {
			t.Fatalf("the leader that gave up: ran %v, %v; want its batch's outcome: ran, no error", r.ran, r.err)
		}
		if got := testdb.Strings(t, db, `SELECT k FROM edges_log`); !slices.Equal(got, []string{"leader"}) {
			t.Fatalf("rows %v, want the leader's once", got)
		}
	})
}

// TestEdgesABatchKeepsTheConfiguredClock: with Config.Clock set, an
// operation's clock parameter (wire.Statement.Clock) carries that clock's
// time (wire.DB.ClockArg), and a batch binds it as it is, alone or with
// others: only the engine's clock (nil) is bound to the batch's reading.
func TestEdgesABatchKeepsTheConfiguredClock(t *testing.T) {
	t.Parallel()
	at := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	eachEdges(t, racefree.Config{Clock: racefree.NewManualClock(at)}, func(t *testing.T, db *racefree.DB) {
		engine := db.Engine()
		ctx := context.Background()
		stamp := func(k string) *wire.Op {
			q := `INSERT INTO edges_log (k, at) VALUES (?1, COALESCE(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)))`
			if engine == racefree.Postgres {
				q = `INSERT INTO edges_log (k, at) VALUES ($1, COALESCE($2::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint))`
			}
			return &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{
				{Query: q, Args: []any{k, wire.Of(db).ClockArg()}, Clock: 2},
				{Query: `UPDATE edges_gate SET v = v + 1 WHERE k = 'gate'`},
			}}
		}
		combine := func(k string) {
			ran, err := wire.Of(db).Combine(ctx, stamp(k))
			if err != nil || !ran {
				t.Errorf("%s: ran %v, %v", k, ran, err)
			}
		}
		combine("alone")
		edgesBehind(t, db, func() { combine("b1") }, func() { combine("b2") })
		var n int
		if err := db.QueryRowContext(ctx, fmt.Sprintf(`SELECT COUNT(*) FROM edges_log WHERE at = %d`, racefree.Millis(at))).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 3 {
			t.Fatalf("%d of 3 rows carry the configured clock's %d: %v", n, racefree.Millis(at),
				testdb.Strings(t, db, `SELECT k || ' ' || CAST(at AS TEXT) FROM edges_log`))
		}
	})
}

// TestEdgesARefusedOperationAloneInItsBatchRunsAlone: a batch of one
// operation of one statement (on SQLite it runs without BEGIN and
// COMMIT) that the database refuses (a UNIQUE violation) committed
// nothing: the caller is told to run it alone (false, no error), and the
// combiner counts a failed batch, not an unknown outcome.
func TestEdgesARefusedOperationAloneInItsBatchRunsAlone(t *testing.T) {
	t.Parallel()
	eachEdges(t, racefree.Config{}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		testdb.ExecAll(t, db, logRow("taken"))
		before := db.CombineStats()
		ran, err := wire.Of(db).Combine(ctx, edgesOp("taken", logRow("taken")))
		if ran || err != nil {
			t.Fatalf("a refused operation alone in its batch: ran %v, %v; want false, nil: it runs alone", ran, err)
		}
		s := db.CombineStats()
		if s.Failed-before.Failed != 1 || s.Unknown != before.Unknown {
			t.Fatalf("%+v; want one failed batch, no unknown outcome", s)
		}
	})
}

// TestEdgesAManyFormThatMissesWithoutDestIsNoError: an operation whose
// Many form has no Dest (a write, such as a release, that returns the
// place of each row it changed) and whose row does not come back is
// answered as its statement alone would be: RowsAffected 0 and no error,
// never ErrNotFound; the one whose row came back gets RowsAffected 1.
func TestEdgesAManyFormThatMissesWithoutDestIsNoError(t *testing.T) {
	t.Parallel()
	eachEdges(t, racefree.Config{}, func(t *testing.T, db *racefree.DB) {
		engine := db.Engine()
		testdb.ExecAll(t, db, logRow("here"))
		n := 2 // PostgreSQL's ManyFrom
		bump := func(k string) *wire.Op {
			return &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{{
				Query: `UPDATE edges_log SET n = n + 1 WHERE k = $1`,
				Many: `WITH a AS (SELECT * FROM unnest($1::text[]) WITH ORDINALITY AS a(k, i)),
					up AS (UPDATE edges_log AS l SET n = n + 1 FROM a WHERE l.k = a.k RETURNING a.i)
					SELECT i FROM up`,
				Args: []any{k},
			}}}
		}
		if engine == racefree.SQLite {
			n = 8 // SQLite's ManyFrom
			bump = func(k string) *wire.Op {
				return &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{{
					Query: `UPDATE edges_log SET n = n + 1 WHERE k = ?1`,
					Many: `UPDATE edges_log SET n = n + 1 WHERE k IN (SELECT j.value ->> 0 FROM json_each(?1) AS j)
						RETURNING ?2 ->> ('$."' || hex(k) || '"')`,
					Args: []any{k},
				}}}
			}
		}
		ops := []*wire.Op{bump("here")}
		for i := range n - 1 {
			ops = append(ops, bump(fmt.Sprint("missing", i)))
		}
		before := db.CombineStats()
		errs := combineBehind(t, db, ops...)
		if s := db.CombineStats(); s.Many-before.Many != int64(n) {
			t.Fatalf("%d operations ran Many forms, want %d (%+v)", s.Many-before.Many, n, s)
		}
		for i, op := range ops {
			want := int64(0)
			if i == 0 {
				want = 1
			}
			if errs[i] != nil || op.Stmts[0].RowsAffected != want {
				t.Errorf("%s: %v, RowsAffected %d; want no error and %d", op.Key, errs[i], op.Stmts[0].RowsAffected, want)
			}
		}
	})
}

// TestEdgesABatchWithADeadlineReportsEachStatementsRows: each statement
// of a batch whose operations have a deadline (on PostgreSQL its
// server-side bound travels after the batch's Begin, wire.ServerBound)
// gets the RowsAffected it reported itself: 1 for an update of a row
// there and for an insert, 0 for an update of a row that is not, in the
// batch's order.
func TestEdgesABatchWithADeadlineReportsEachStatementsRows(t *testing.T) {
	t.Parallel()
	eachEdges(t, racefree.Config{}, func(t *testing.T, db *racefree.DB) {
		testdb.ExecAll(t, db, logRow("a-here"))
		ops := []*wire.Op{
			edgesOp("a-here", `UPDATE edges_log SET n = n + 1 WHERE k = 'a-here'`),
			edgesOp("b-gone", `UPDATE edges_log SET n = n + 1 WHERE k = 'b-gone'`),
			edgesOp("c-new", logRow("c-new")),
		}
		want := []int64{1, 0, 1}
		for _, op := range ops {
			op.Deadline = time.Now().Add(time.Minute)
		}
		before := db.CombineStats()
		errs := combineBehind(t, db, ops...)
		if s := db.CombineStats(); s.Batches-before.Batches != 2 {
			t.Fatalf("%d batches, want 2: the held one, then the three in one (%+v)", s.Batches-before.Batches, s)
		}
		for i, op := range ops {
			if errs[i] != nil || op.Stmts[0].RowsAffected != want[i] {
				t.Errorf("%s: %v, RowsAffected %d; want no error and %d", op.Key, errs[i], op.Stmts[0].RowsAffected, want[i])
			}
		}
	})
}

// TestEdgesCombineStatsCountWhatRan: CombineStats counts every
// operation of a committed batch in Ops (a batch of three adds three),
// keeps in MaxBatch the largest batch, not the last, shows the
// operations waiting (Queued) and in flight (Running) while a batch is
// held, and none of either once every batch ended.
func TestEdgesCombineStatsCountWhatRan(t *testing.T) {
	t.Parallel()
	eachEdges(t, racefree.Config{}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		run := func(k string) func() {
			return func() {
				if ran, err := wire.Of(db).Combine(ctx, edgesOp(k, logRow(k))); !ran || err != nil {
					t.Errorf("%s: ran %v, %v", k, ran, err)
				}
			}
		}
		edgesBehind(t, db, run("a"), run("b"), run("c"))
		run("d")()
		s := db.CombineStats()
		if s.Batches != 3 || s.Ops != 5 || s.MaxBatch != 3 {
			t.Errorf("%+v; want 3 batches (the held one, a b c, d), 5 operations, the largest of 3", s)
		}
		if s.Queued != 0 || s.Running != 0 {
			t.Errorf("%+v; want nothing queued or running once every batch ended", s)
		}
	})
}

// TestEdgesOperationsOfTwoManyFormsRunEachTheirOwn: eight operations of
// one Many form (inserts) queued among eight of another (updates of rows
// there) run each form over its own operations' arguments: on SQLite in
// one batch, form by form, on PostgreSQL in a batch per form; every
// insert writes its row, every update finds its own, and all sixteen
// run as Many forms.
func TestEdgesOperationsOfTwoManyFormsRunEachTheirOwn(t *testing.T) {
	t.Parallel()
	eachEdges(t, racefree.Config{}, func(t *testing.T, db *racefree.DB) {
		engine := db.Engine()
		ctx := context.Background()
		ins := &wire.Statement{
			Query: `INSERT INTO edges_log (k) VALUES (?1)`,
			Many: `INSERT INTO edges_log (k) SELECT j.value ->> 0 FROM json_each(?1) AS j
				RETURNING ?2 ->> ('$."' || hex(k) || '"')`,
		}
		bump := &wire.Statement{
			Query: `UPDATE edges_log SET n = n + 1 WHERE k = ?1`,
			Many: `UPDATE edges_log SET n = n + 1 WHERE k IN (SELECT j.value ->> 0 FROM json_each(?1) AS j)
				RETURNING ?2 ->> ('$."' || hex(k) || '"')`,
		}
		if engine == racefree.Postgres {
			ins = &wire.Statement{
				Query: `INSERT INTO edges_log (k) VALUES ($1)`,
				Many: `WITH a AS (SELECT * FROM unnest($1::text[]) WITH ORDINALITY AS a(k, i)),
					ins AS (INSERT INTO edges_log (k) SELECT k FROM a RETURNING k)
					SELECT a.i FROM a JOIN ins USING (k)`,
			}
			bump = &wire.Statement{
				Query: `UPDATE edges_log SET n = n + 1 WHERE k = $1`,
				Many: `WITH a AS (SELECT * FROM unnest($1::text[]) WITH ORDINALITY AS a(k, i)),
					up AS (UPDATE edges_log AS l SET n = n + 1 FROM a WHERE l.k = a.k RETURNING a.i)
					SELECT i FROM up`,
			}
		}
		op := func(form *wire.Statement, k string) *wire.Op {
			return &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{{Query: form.Query, Many: form.Many, Args: []any{k}}}}
		}
		var ops []*wire.Op
		for i := range 8 {
			testdb.ExecAll(t, db, logRow(fmt.Sprint("old", i)))
			ops = append(ops, op(ins, fmt.Sprint("new", i)), op(bump, fmt.Sprint("old", i)))
		}
		before := db.CombineStats()
		errs := combineBehind(t, db, ops...)
		for i, o := range ops {
			if errs[i] != nil || o.Stmts[0].RowsAffected != 1 {
				t.Errorf("%s: %v, RowsAffected %d; want no error and 1", o.Key, errs[i], o.Stmts[0].RowsAffected)
			}
		}
		if s := db.CombineStats(); s.Many-before.Many != 16 || s.Failed != before.Failed {
			t.Errorf("%+v; want all 16 operations run as Many forms, no batch failed", s)
		}
		var news, bumped int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM edges_log WHERE k LIKE 'new%'`).Scan(&news); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM edges_log WHERE k LIKE 'old%' AND n = 1`).Scan(&bumped); err != nil {
			t.Fatal(err)
		}
		if news != 8 || bumped != 8 {
			t.Fatalf("%d rows inserted and %d updated once, want 8 and 8", news, bumped)
		}
	})
}
