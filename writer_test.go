package racefree_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	sqlitedriver "modernc.org/sqlite"
)

// The combiner's writer (writer.go): on SQLite a batch of two or more
// operations runs on a connection kept out of the pool while batches
// follow one another, its transaction begun and ended by statements.
// These tests hold it to what a batch in a *sql.Tx promises, and to
// giving the pool back.

// writerDB opens a SQLite DB with the combiner on, one batch at a time,
// and a table w (k, v).
func writerDB(t *testing.T, maxConns int) (*racefree.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "racefree.db")
	db := testdb.Open(t, "sqlite:"+path, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1, MaxOpenConns: maxConns})
	testdb.ExecAll(t, db,
		`CREATE TABLE w (k TEXT PRIMARY KEY, v BIGINT NOT NULL)`,
		`CREATE TABLE w_child (k TEXT PRIMARY KEY, parent TEXT REFERENCES w (k) DEFERRABLE INITIALLY DEFERRED)`,
		`INSERT INTO w (k, v) VALUES ('gate', 0)`)
	return db, path
}

// combined is one operation's outcome: whether its batch ran it, and
// its error.
type combined struct {
	ran bool
	err error
}

// batchOf runs ops as one batch: it holds a batch in flight behind a
// write transaction, queues ops behind it (CombineBatches 1), lets it
// go, and returns each op's outcome.
func batchOf(t *testing.T, db *racefree.DB, ops ...*wire.Op) []combined {
	t.Helper()
	return batchOfThen(t, db, nil, ops...)
}

// batchOfThen is batchOf, calling queued (when not nil) once ops are
// queued, just before it lets the batch in flight go.
func batchOfThen(t *testing.T, db *racefree.DB, queued func(), ops ...*wire.Op) []combined {
	t.Helper()
	ctx := context.Background()
	lock, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.ExecContext(ctx, `UPDATE w SET v = v WHERE k = 'gate'`); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() {
		_, err := wire.Of(db).Combine(ctx, &wire.Op{Group: "g", Key: "gate", Stmts: []*wire.Statement{{Query: `UPDATE w SET v = v + 1 WHERE k = 'gate'`}}})
		held <- err
	}()
	testdb.WaitCombiner(t, db, "the held batch", func(s racefree.CombineStats) bool { return s.Running == 1 })
	before := db.CombineStats().Queued
	out := make([]combined, len(ops))
	var wg sync.WaitGroup
	for i, o := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].ran, out[i].err = wire.Of(db).Combine(ctx, o)
		}()
		testdb.WaitCombiner(t, db, "the queue", func(s racefree.CombineStats) bool { return s.Queued == before+i+1 })
	}
	if queued != nil {
		queued()
	}
	if err := lock.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := await(t, held, "the held batch"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	await(t, done, "the batch")
	return out
}

func insert(k string, v int) *wire.Op {
	return &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{{Query: fmt.Sprintf(`INSERT INTO w (k, v) VALUES ('%s', %d)`, k, v)}}}
}

func rows(t *testing.T, db *racefree.DB, keys ...string) int {
	t.Helper()
	var n int
	q := `SELECT COUNT(*) FROM w WHERE k IN ('` + strings.Join(keys, `', '`) + `')`
	if err := db.QueryRowContext(context.Background(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// slowQuery returns a query that counts, and runs for about d on this
// machine as it is now (under -race too).
func slowQuery(t *testing.T, db *racefree.DB, d time.Duration) string {
	t.Helper()
	q := func(n int) string {
		return fmt.Sprintf(`SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < %d) SELECT x FROM c)`, n)
	}
	const probe = 20000
	var n int64
	t0 := time.Now()
	if err := db.QueryRowContext(context.Background(), q(probe)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	per := max(time.Since(t0)/probe, 1)
	return q(max(1, int(d/per)))
}

// TestTheCombinersWriterRollsBackWhatFailed: a batch whose statement
// fails, and one whose COMMIT fails (a deferred foreign key), commit
// nothing, and the next batch runs on the writer as a batch, not alone:
// the failed one's transaction ended with it.
func TestTheCombinersWriterRollsBackWhatFailed(t *testing.T) {
	t.Parallel()
	db, _ := writerDB(t, 4)
	for _, c := range []struct {
		name string
		bad  *wire.Op
	}{
		{"a statement that fails", &wire.Op{Group: "g", Key: "dup", Stmts: []*wire.Statement{{Query: `INSERT INTO w (k, v) VALUES ('gate', 1)`}}}},
		{"a commit that fails", &wire.Op{Group: "g", Key: "orphan", Stmts: []*wire.Statement{{Query: `INSERT INTO w_child (k, parent) VALUES ('c', 'nobody')`}}}},
	} {
		k1, k2 := c.name+" 1", c.name+" 2"
		before := db.CombineStats()
		out := batchOf(t, db, insert(k1, 1), c.bad)
		if out[0].ran || out[1].ran {
			t.Fatalf("%s: the failed batch reports its operations ran: %+v", c.name, out)
		}
		if n := rows(t, db, k1); n != 0 {
			t.Fatalf("%s: the failed batch left %d rows", c.name, n)
		}
		out = batchOf(t, db, insert(k1, 1), insert(k2, 2))
		if !out[0].ran || !out[1].ran || out[0].err != nil || out[1].err != nil {
			t.Fatalf("%s: the batch after it: %+v; want both run in it", c.name, out)
		}
		s := db.CombineStats()
		if failed := s.Failed - before.Failed; failed != 1 {
			t.Fatalf("%s: %d batches failed; want the one", c.name, failed)
		}
		if n := rows(t, db, k1, k2); n != 2 {
			t.Fatalf("%s: the batch after it left %d rows; want 2", c.name, n)
		}
	}
}

// TestTheCombinersWriterClosesAConnectionItCannotRollBack: when a
// failed batch's ROLLBACK fails too (its transaction already ended), the
// connection's state is unknown, and the writer has the pool close it:
// neither the writer nor the pool keeps it, and the next batch runs on
// the writer on another connection. The failing operation ends the
// batch's transaction itself, marks the connection with a temporary
// table, then fails; afterwards no connection of the pool (of two) holds
// the mark.
func TestTheCombinersWriterClosesAConnectionItCannotRollBack(t *testing.T) {
	t.Parallel()
	db, _ := writerDB(t, 2)
	bad := &wire.Op{Group: "g", Key: "bad", Stmts: []*wire.Statement{
		{Query: `ROLLBACK`},
		{Query: `CREATE TEMP TABLE writer_mark (x)`}, // outside any transaction: it stays
		{Query: `INSERT INTO w (k, v) VALUES ('gate', 1)`},
	}}
	out := batchOf(t, db, insert("a", 1), bad)
	if out[0].ran || out[1].ran {
		t.Fatalf("the failed batch reports its operations ran: %+v", out)
	}
	if n := rows(t, db, "a"); n != 0 {
		t.Fatalf("the failed batch left %d rows", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var conns []*sql.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := range 2 { // every connection of the pool, the writer's once it gave it back
		c, err := db.SQL().Conn(ctx)
		if err != nil {
			t.Fatalf("connection %d of the pool: %v", i+1, err)
		}
		conns = append(conns, c)
		var n int
		if err := c.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_temp_master WHERE name = 'writer_mark'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatal("the connection whose ROLLBACK failed is still in the pool")
		}
	}
	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil
	out = batchOf(t, db, insert("b", 1), insert("c", 2))
	if !out[0].ran || !out[1].ran || out[0].err != nil || out[1].err != nil {
		t.Fatalf("the batch after it: %+v; want both run in it", out)
	}
	if n := rows(t, db, "b", "c"); n != 2 {
		t.Fatalf("the batch after it left %d rows; want 2", n)
	}
}

// gates are the points at which racefree_test_wait(id) holds a
// statement: it enters (entered receives), then waits until release is
// closed. Only the tests here register one.
type gate struct{ entered, release chan struct{} }

var gates sync.Map // id -> *gate

func init() {
	sqlitedriver.MustRegisterScalarFunction("racefree_test_wait", 1, func(_ *sqlitedriver.FunctionContext, args []driver.Value) (driver.Value, error) {
		id, _ := args[0].(string)
		if g, ok := gates.Load(id); ok {
			g.(*gate).entered <- struct{}{}
			<-g.(*gate).release
		}
		return int64(1), nil
	})
}

// TestTheCombinersWriterCommitsNothingPastTheDeadline: a batch whose
// earliest Deadline passes while its statements run rolls back rather
// than commit, and its operations run alone (Combine reports false), as
// a batch in a *sql.Tx bound to the deadline does. The batch's first
// statement waits, inside its transaction, until the deadline passed.
// The deadline is set once the batch's operations queued, a margin ahead;
// on a machine so loaded that the batch began after it all the same (it
// then fails at its BEGIN, and never reaches the gate), the test tries
// again with twice the margin.
func TestTheCombinersWriterCommitsNothingPastTheDeadline(t *testing.T) {
	t.Parallel()
	db, _ := writerDB(t, 4)
	for try, margin := 1, 500*time.Millisecond; ; try, margin = try+1, 2*margin {
		if pastTheDeadline(t, db, try, margin) {
			return
		}
		if margin >= 16*time.Second {
			t.Fatalf("the batch began after its deadline %d times, the last with a margin of %v", try, margin)
		}
		t.Logf("the batch began after its deadline, %v after its operations queued: again with twice the margin", margin)
	}
}

// pastTheDeadline runs one try of
// TestTheCombinersWriterCommitsNothingPastTheDeadline, and reports false
// when the batch began after its deadline.
func pastTheDeadline(t *testing.T, db *racefree.DB, try int, margin time.Duration) bool {
	t.Helper()
	id := fmt.Sprintf("%s/%d", t.Name(), try)
	g := &gate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	gates.Store(id, g)
	defer gates.Delete(id)
	var n int64
	a, b := fmt.Sprintf("a bounded %d", try), fmt.Sprintf("b free %d", try)
	bounded := insert(a, 1)
	bounded.Stmts = append([]*wire.Statement{{Query: `SELECT racefree_test_wait('` + id + `')`, Dest: []any{&n}}}, bounded.Stmts...)
	finished := make(chan struct{})
	entered := make(chan bool, 1)
	before := db.CombineStats()
	out := batchOfThen(t, db, func() {
		bounded.Deadline = time.Now().Add(margin)
		db.CombineStats() // the batch's leader reads Deadline after this, under the combiner's lock
		go func() {
			defer close(g.release)
			select {
			case <-g.entered:
				entered <- true
				time.Sleep(time.Until(bounded.Deadline) + 10*time.Millisecond)
			case <-finished:
				entered <- false
			}
		}()
	}, bounded, insert(b, 2))
	close(finished)
	if out[0].ran || out[1].ran {
		t.Fatalf("a batch past its deadline: %+v; want its operations handed back to run alone", out)
	}
	if got := rows(t, db, a, b); got != 0 {
		t.Fatalf("a batch past its deadline committed %d rows", got)
	}
	if failed := db.CombineStats().Failed - before.Failed; failed != 1 {
		t.Fatalf("%d batches failed; want the one", failed)
	}
	return <-entered
}

// TestTheCombinersWriterGoesBackToThePool: once calls stop combining,
// the pool is whole again (no connection in use), and a pool of one
// connection is never kept from its other calls: batches there run in a
// *sql.Tx, and no call waits for a connection.
func TestTheCombinersWriterGoesBackToThePool(t *testing.T) {
	t.Parallel()
	for _, conns := range []int{4, 1} {
		t.Run(fmt.Sprintf("MaxOpenConns %d", conns), func(t *testing.T) {
			db, _ := writerDB(t, conns)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// Each operation runs a statement of about half a
			// millisecond, so that calls pile up behind a batch.
			slow := slowQuery(t, db, 500*time.Microsecond)
			var wg sync.WaitGroup
			for c := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 40 {
						k := fmt.Sprintf("%d-%d", c, i)
						op := insert(k, i)
						op.Stmts = append(op.Stmts, &wire.Statement{Query: slow})
						if _, err := wire.Of(db).Combine(ctx, op); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatal("the calls did not finish in 20 s")
			}
			if s := db.CombineStats(); s.MaxBatch < 2 {
				t.Fatalf("no batch of two or more: %+v", s)
			}
			if conns == 1 {
				if w := db.SQL().Stats().WaitCount; w != 0 {
					t.Fatalf("a pool of one: calls waited %d times for its connection", w)
				}
			}
			for deadline := time.Now().Add(10 * time.Second); db.SQL().Stats().InUse != 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("10 s after the last call, %d connections are still out of the pool", db.SQL().Stats().InUse)
				}
			}
		})
	}
}

// TestTheCombinersWriterTakesNoConnectionForABatchOfOne: a batch of one
// operation, while the writer holds no connection, runs in a *sql.Tx
// whose commit gives its connection back: the writer takes one out of
// the pool only for a batch of two or more, so a call that does not
// combine never keeps a connection from the pool's other calls.
func TestTheCombinersWriterTakesNoConnectionForABatchOfOne(t *testing.T) {
	t.Parallel()
	db, _ := writerDB(t, 4)
	op := insert("alone", 1) // two statements: not the statement that commits by itself
	op.Stmts = append(op.Stmts, &wire.Statement{Query: `UPDATE w SET v = v + 1 WHERE k = 'alone'`})
	if out := batchOf(t, db, op); !out[0].ran || out[0].err != nil {
		t.Fatalf("the batch of one: %+v", out[0])
	}
	if in := db.SQL().Stats().InUse; in != 0 {
		t.Fatalf("after a batch of one, %d connections are out of the pool; want none", in)
	}
	if got := rows(t, db, "alone"); got != 1 {
		t.Fatalf("the batch of one committed %d rows", got)
	}
}

// TestTheCombinersWriterIsClosedWithTheDB: DB.Close gives the writer's
// connection back before it closes the pool, so that no file of the
// database stays open behind it.
func TestTheCombinersWriterIsClosedWithTheDB(t *testing.T) {
	t.Parallel()
	db, path := writerDB(t, 4)
	out := batchOf(t, db, insert("a", 1), insert("b", 2))
	if !out[0].ran || !out[1].ran {
		t.Fatalf("the batch: %+v", out)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if open := openFiles(t, path); len(open) > 0 {
		t.Fatalf("after Close, the process still holds %s open", strings.Join(open, ", "))
	}
}

// openFiles returns the files of the database at path (the file, its log
// and its shared memory) that this process holds open.
func openFiles(t *testing.T, path string) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	var open []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, path) {
			open = append(open, target)
		}
	}
	return open
}

// waitingBatches puts two batches behind a write transaction that holds
// SQLite's write lock: first a batch of one operation (first, in a
// *sql.Tx, the writer being in the pool), which gives up at first's
// Deadline and hands the lead to the two operations queued behind it,
// which then form a batch on the writer and wait at its BEGIN IMMEDIATE.
// It returns each call's outcome and how long it took, on a channel, in
// the order first, then the others as they end, and the transaction.
type timed struct {
	key  string
	ran  bool
	err  error
	took time.Duration
}

func waitingBatches(t *testing.T, db *racefree.DB, first *wire.Op, others ...*wire.Op) (<-chan timed, *sql.Tx) {
	t.Helper()
	ctx := context.Background()
	lock, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback() })
	if _, err := lock.ExecContext(ctx, `UPDATE w SET v = v WHERE k = 'gate'`); err != nil {
		t.Fatal(err)
	}
	out := make(chan timed, 1+len(others))
	call := func(o *wire.Op) {
		t0 := time.Now()
		ran, err := wire.Of(db).Combine(ctx, o)
		out <- timed{o.Key, ran, err, time.Since(t0)}
	}
	go call(first)
	testdb.WaitCombiner(t, db, "the first batch", func(s racefree.CombineStats) bool { return s.Running == 1 })
	for i, o := range others {
		go call(o)
		testdb.WaitCombiner(t, db, "the queue", func(s racefree.CombineStats) bool { return s.Queued == i+1 })
	}
	return out, lock
}

// TestASQLiteBatchGivesUpAtItsDeadlineWhileItWaitsForTheLock: a batch
// in a *sql.Tx and a batch on the writer, each waiting at BEGIN
// IMMEDIATE for a write lock held elsewhere, give up at the earliest
// Deadline of their operations, not after the busy timeout (10 s), and
// commit nothing: each operation is handed back to run alone.
func TestASQLiteBatchGivesUpAtItsDeadlineWhileItWaitsForTheLock(t *testing.T) {
	t.Parallel()
	db, _ := writerDB(t, 4)
	first := insert("first", 0) // two statements: a transaction, not one alone
	first.Stmts = append(first.Stmts, &wire.Statement{Query: `UPDATE w SET v = v + 1 WHERE k = 'first'`})
	first.Deadline = time.Now().Add(100 * time.Millisecond)
	bounded := insert("bounded", 1)
	bounded.Deadline = time.Now().Add(600 * time.Millisecond)
	out, _ := waitingBatches(t, db, first, bounded, insert("free", 2))
	for range 3 {
		r := await(t, out, "a batch waiting for the lock")
		if r.ran {
			t.Errorf("%s: ran in a batch that waited for the lock past its deadline; want handed back", r.key)
		}
		if r.took > 5*time.Second {
			t.Errorf("%s: answered after %v, waiting for the lock past its batch's deadline", r.key, r.took)
		}
	}
	if s := db.CombineStats(); s.Failed != 2 {
		t.Fatalf("%+v; want two batches failed, the second of two operations", s)
	}
}

// TestASQLiteBatchOnTheWriterReadsTheClockUnderItsWriteLock: a batch on
// the writer that waited for the write lock binds its statements' clock
// (wire.Statement.Clock) as read after its BEGIN IMMEDIATE, once for
// all of them, as a batch in a *sql.Tx does
// (TestASQLiteBatchReadsTheClockUnderItsWriteLock).
func TestASQLiteBatchOnTheWriterReadsTheClockUnderItsWriteLock(t *testing.T) {
	t.Parallel()
	db, _ := writerDB(t, 4)
	testdb.ExecAll(t, db, `CREATE TABLE w_clock (k TEXT PRIMARY KEY, bound BOOLEAN NOT NULL, at BIGINT NOT NULL)`)
	clocked := func(k string) *wire.Op {
		return &wire.Op{Group: "g", Key: k, Stmts: []*wire.Statement{{
			Query: `INSERT INTO w_clock (k, bound, at) VALUES (?1, ?2 IS NOT NULL, COALESCE(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)))`,
			Args:  []any{k, nil}, Clock: 2}}}
	}
	first := insert("first", 0)
	first.Deadline = time.Now().Add(50 * time.Millisecond)
	a, b := clocked("a"), clocked("b")
	out, lock := waitingBatches(t, db, first, a, b)
	if r := await(t, out, "the first batch"); r.ran {
		t.Fatalf("the first batch ran; want it to give up at its deadline: %+v", r)
	}
	testdb.WaitCombiner(t, db, "the batch on the writer", func(s racefree.CombineStats) bool { return s.Running == 2 })
	// Not a wait for an event: the clock moves on while the batch waits
	// for the lock, so that a clock read before the lock is told apart.
	time.Sleep(20 * time.Millisecond)
	released := racefree.Millis(time.Now())
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r := await(t, out, "the batch on the writer"); !r.ran || r.err != nil {
			t.Fatalf("%s: %+v; want run in the batch", r.key, r)
		}
	}
	clockReadUnderTheLock(t, db, "w_clock", released, []*wire.Statement{a.Stmts[0], b.Stmts[0]})
}
