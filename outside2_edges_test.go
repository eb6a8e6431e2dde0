package racefree_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
)

// A second round from outside of the combiner's commit verdicts and of
// the transactions it rests on (combine.go, writer.go, tx.go): each test
// holds one promise at the point where a slip would break it. They reuse
// the tables and helpers of outside_edges_test.go (edgesDB, edgesOp,
// logRow, lockGate, edgesBehind).

// TestEdges2AnotherTenantsOperationHoldsNoKeyBack: an operation of
// another group (tenant) that a batch passes over holds back nothing of
// the batch's own group: queued a (group g), k (group h), k (group g),
// the batch led by a takes g's k with it, and h's k runs in the next
// one; only an operation of the batch's own group passed over keeps the
// later ones of its key waiting.
func TestEdges2AnotherTenantsOperationHoldsNoKeyBack(t *testing.T) {
	t.Parallel()
	eachEdges(t, racefree.Config{}, func(t *testing.T, db *racefree.DB) {
		other := edgesOp("k", logRow("hk"))
		other.Group = "h"
		ops := []*wire.Op{edgesOp("a", logRow("a")), other, edgesOp("k", logRow("gk"))}
		before := db.CombineStats()
		for i, err := range combineBehind(t, db, ops...) {
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		if s := db.CombineStats(); s.Batches-before.Batches != 3 || s.MaxBatch != 2 {
			t.Fatalf("%d batches, the largest of %d; want 3 (the held one, g's a and k, h's k), the largest of 2 (%+v)",
				s.Batches-before.Batches, s.MaxBatch, s)
		}
	})
}

// TestEdges2ARefusedBatchRunsOnce: a batch that the database refused
// (one operation's UNIQUE violation: known to have committed nothing, and
// no transient conflict) is never run again: each of its operations ran
// once in it, and every caller is told to run its operation alone (false,
// no error), whether the batch ran on SQLite's writer, in a *sql.Tx (a
// pool of one connection) or in PostgreSQL's pipeline; the combiner
// counts one failed batch and no unknown outcome. Only ErrRetryable runs
// a batch again.
func TestEdges2ARefusedBatchRunsOnce(t *testing.T) {
	t.Parallel()
	for _, pool := range []int{1, 10} {
		t.Run(fmt.Sprintf("pool%d", pool), func(t *testing.T) {
			t.Parallel()
			eachEdges(t, racefree.Config{MaxOpenConns: pool, TxAttempts: 3, TxBackoff: time.Millisecond}, func(t *testing.T, db *racefree.DB) {
				testdb.ExecAll(t, db, logRow("taken"))
				runs := 0
				read := edgesOp("a")
				read.Stmts = []*wire.Statement{{Query: `SELECT v FROM edges_gate WHERE k = 'gate'`, Rows: func(r wire.Rows) error {
					runs++
					for r.Next() {
					}
					return nil
				}}}
				ops := []*wire.Op{read, edgesOp("taken", logRow("taken"))}
				ran := make([]bool, len(ops))
				errs := make([]error, len(ops))
				var calls []func()
				for i, op := range ops {
					calls = append(calls, func() { ran[i], errs[i] = wire.Of(db).Combine(context.Background(), op) })
				}
				before := db.CombineStats()
				edgesBehind(t, db, calls...)
				for i := range ops {
					if ran[i] || errs[i] != nil {
						t.Errorf("call %d: ran %v, %v; want false, nil: its batch committed nothing, it runs alone", i, ran[i], errs[i])
					}
				}
				if runs > 1 {
					t.Errorf("the refused batch ran %d times; want once: only a transient conflict runs a batch again", runs)
				}
				s := db.CombineStats()
				if s.Failed-before.Failed != 1 || s.Unknown != before.Unknown {
					t.Errorf("%+v; want one failed batch and no unknown outcome", s)
				}
				if n := testdb.Strings(t, db, `SELECT k FROM edges_log`); len(n) != 1 {
					t.Errorf("edges_log holds %v; want the row there before, alone", n)
				}
			})
		})
	}
}

// TestEdges2ACallCancelledInTheQueueRanNowhere: a combined call whose
// context ends while it waits in the queue leaves it and is told true with
// the context's error: its operation never ran, and it must not be run
// alone either (false would send its caller on to run it); the batch
// held in flight then commits without it.
func TestEdges2ACallCancelledInTheQueueRanNowhere(t *testing.T) {
	t.Parallel()
	eachEdges(t, racefree.Config{}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		lock := lockGate(t, db)
		held := make(chan error, 1)
		go func() {
			_, err := wire.Of(db).Combine(ctx, edgesOp("gate", `UPDATE edges_gate SET v = v + 1 WHERE k = 'gate'`))
			held <- err
		}()
		testdb.WaitCombiner(t, db, "the held batch in flight", func(s racefree.CombineStats) bool { return s.Running == 1 })
		cctx, cancel := context.WithCancel(ctx)
		type answer struct {
			ran bool
			err error
		}
		got := make(chan answer, 1)
		go func() {
			ran, err := wire.Of(db).Combine(cctx, edgesOp("c", logRow("c")))
			got <- answer{ran, err}
		}()
		testdb.WaitCombiner(t, db, "the call queued", func(s racefree.CombineStats) bool { return s.Queued == 1 })
		cancel()
		a := <-got
		if !a.ran || !errors.Is(a.err, context.Canceled) {
			t.Errorf("a call cancelled in the queue: ran %v, %v; want true, context.Canceled", a.ran, a.err)
		}
		if s := db.CombineStats(); s.Queued != 0 {
			t.Errorf("%+v; want nothing queued once the call gave up", s)
		}
		if err := lock.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := <-held; err != nil {
			t.Fatalf("the held batch: %v", err)
		}
		if n := testdb.Strings(t, db, `SELECT k FROM edges_log`); len(n) != 0 {
			t.Errorf("edges_log holds %v; want nothing: the cancelled operation never ran", n)
		}
	})
}

// TestEdges2ABackoffCutShortCommittedNothing: InTx whose attempt met a
// transient conflict known to have committed nothing (ErrRetryable and
// ErrNotCommitted), and whose context ends before the next attempt, stops
// with the context's error still marked ErrNotCommitted: nothing
// committed, so a combined batch in that case lets its operations run
// alone rather than telling them an unknown outcome. fn ran once.
func TestEdges2ABackoffCutShortCommittedNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{TxAttempts: 3, TxBackoff: time.Hour}, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		runs := 0
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			runs++
			cancel()
			return racefree.NotCommitted(fmt.Errorf("a conflict: %w", racefree.ErrRetryable))
		})
		if !errors.Is(err, context.Canceled) || !errors.Is(err, racefree.ErrNotCommitted) {
			t.Errorf("InTx whose backoff its context cut short: %v; want context.Canceled, marked ErrNotCommitted", err)
		}
		if runs != 1 {
			t.Errorf("fn ran %d times; want once", runs)
		}
	})
}

// TestEdges2ReadTxRetriesATransientConflict: ReadTx runs fn again after a
// transient conflict (ErrRetryable), as InTx does, and returns nil once an
// attempt succeeds.
func TestEdges2ReadTxRetriesATransientConflict(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{TxAttempts: 3, TxBackoff: time.Millisecond}, func(t *testing.T, db *racefree.DB) {
		runs := 0
		err := db.ReadTx(context.Background(), func(tx *sql.Tx) error {
			runs++
			if runs == 1 {
				return fmt.Errorf("a conflict: %w", racefree.ErrRetryable)
			}
			var one int
			return tx.QueryRow(`SELECT 1`).Scan(&one)
		})
		if err != nil || runs != 2 {
			t.Errorf("ReadTx after one transient conflict: %v after %d runs; want nil after 2", err, runs)
		}
	})
}

// TestEdges2CanManyOnEveryEngineThatBindsManyForms: wire.DB.CanMany says
// whether the engine binds Many forms (both engines do: SQLite over JSON
// arrays, PostgreSQL over arrays), not whether it pipelines (PostgreSQL
// alone): a primitive that asks it sets its Many forms on SQLite too.
func TestEdges2CanManyOnEveryEngineThatBindsManyForms(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		if !wire.Of(db).CanMany() {
			t.Errorf("CanMany on %s: false; want true", db.Engine())
		}
		if got, want := wire.Of(db).CanPipeline(), db.Engine() == racefree.Postgres; got != want {
			t.Errorf("CanPipeline on %s: %v; want %v", db.Engine(), got, want)
		}
	})
}
