package racefree

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync"
	"time"

	"github.com/racefree/racefree/internal/statement"
	"github.com/racefree/racefree/internal/wire"
)

// writer is the connection that the combiner's batches run on, on an
// engine that does not pipeline (SQLite), while batches follow one
// another: one connection of the pool, kept out of it with the batch's
// statements prepared on it by its driver, and its transaction begun and
// ended by statements (BEGIN IMMEDIATE, COMMIT, ROLLBACK) rather than a
// *sql.Tx, each batch run through the driver directly
// (statement.Direct, inside one sql.Conn.Raw).
//
// It is there for the CPU of SQLite's one writer. database/sql watches
// the context of a *sql.Tx, which is always cancellable, with a
// goroutine for every statement that returns rows in it, and rebinds a
// pool statement to the transaction's connection for every call: 28% to
// 29% of a hot quota key's charge in a batch (bench/quotafloor). On a
// *sql.Conn whose statements run on a context that cannot end, neither
// happens; and the driver's statements run directly save what
// database/sql still does around each one (its *sql.Rows, the locks of
// the connection and of the pool's dependencies): about 8% more of a
// hot key's charge (docs/performance.md).
//
// A batch takes the writer only when it holds two or more operations or
// the writer is already out of the pool (batches following one another),
// and only when the pool holds more than one connection. Once batches
// stop coming for writerIdle, the writer goes back to the pool, with its
// statements closed: while no calls combine, the pool is whole.
type writer struct {
	mu    sync.Mutex             // held by the batch running on conn, and by give
	conn  *sql.Conn              // nil: in the pool
	stmts map[string]driver.Stmt // prepared on conn's driver connection
	used  time.Time              // when the last batch on conn ended

	once sync.Once
	idle *time.Timer // gives conn back once writerIdle passed since used
}

// writerIdle is how long the writer stays out of the pool after a batch
// that no other operation waited for: long enough that batches coming
// and going under a steady load do not prepare their statements again
// each time (a third of the gain), short enough that a pool a caller
// also draws on is whole again soon after the load ends.
const writerIdle = 250 * time.Millisecond

// takeWriter returns the writer, locked, for a batch of n operations,
// with its connection out of the pool already, or taken from it now when
// n >= 2. It returns nil, and the batch runs in a *sql.Tx, when another
// batch holds the writer (Config.CombineBatches > 1), when the pool holds
// one connection (the writer would keep it from every other call), and
// when a connection cannot be had.
func (db *DB) takeWriter(ctx context.Context, n int) *writer {
	w := &db.writer
	if db.cfg.MaxOpenConns < 2 || !w.mu.TryLock() {
		return nil
	}
	if w.conn == nil && (n < 2 || w.open(ctx, db.sql) != nil) {
		w.mu.Unlock()
		return nil
	}
	return w
}

// open takes the writer's connection from pool unless it has one. w.mu
// is held.
func (w *writer) open(ctx context.Context, pool *sql.DB) error {
	if w.conn != nil {
		return nil
	}
	c, err := pool.Conn(ctx)
	if err != nil {
		return err
	}
	w.conn, w.stmts = c, map[string]driver.Stmt{}
	return nil
}

// give returns the writer's connection to the pool (DB.Close), once a
// batch running on it ended.
func (w *writer) give() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.close(false)
}

// rest notes that a batch ended with no operation waiting: the writer
// goes back to the pool writerIdle from now unless another batch runs on
// it by then.
func (w *writer) rest() {
	w.once.Do(func() { w.idle = time.AfterFunc(writerIdle, w.giveIdle) })
	w.idle.Reset(writerIdle)
}

// giveIdle returns the writer's connection to the pool when no batch
// ran on it for writerIdle. A batch running on it now (it does not wait
// for one) or one that ran since then keeps it: the next batch that ends
// with no operation waiting sets the time again.
func (w *writer) giveIdle() {
	if w.mu.TryLock() {
		defer w.mu.Unlock()
		if time.Since(w.used) >= writerIdle {
			w.close(false)
		}
	}
}

// close closes w's statements and gives its connection back to the pool,
// or has the pool close it (bad). w.mu is held, and no sql.Conn.Raw of
// w's connection runs.
func (w *writer) close(bad bool) {
	if w.conn == nil {
		return
	}
	_ = w.conn.Raw(func(any) error {
		for _, st := range w.stmts {
			_ = st.Close()
		}
		if bad {
			return driver.ErrBadConn
		}
		return nil
	})
	_ = w.conn.Close()
	w.conn, w.stmts = nil, nil
}

// prepared returns query prepared on dc, w's driver connection,
// preparing it the first time. dc is held (inside sql.Conn.Raw).
func (w *writer) prepared(dc driver.Conn, query string) (driver.Stmt, error) {
	if st, ok := w.stmts[query]; ok {
		return st, nil
	}
	st, err := dc.Prepare(query) // SQLite prepares without waiting on anything
	if err != nil {
		return nil, err
	}
	w.stmts[query] = st
	return st, nil
}

// runner returns the runner of the batch's statements on dc, w's driver
// connection, each prepared there once (statement.Direct). dc is held.
func (w *writer) runner(dc driver.Conn) runner {
	return func(ctx context.Context, st *wire.Statement) (bool, error) {
		ds, err := w.prepared(dc, st.Query)
		if err != nil {
			return false, err
		}
		return statement.Direct(ctx, ds, statementOf(st))
	}
}

// runOnWriter runs ops in one transaction on w, as runBatch does in a
// *sql.Tx, through w's driver connection directly (sql.Conn.Raw): BEGIN
// IMMEDIATE on waits (the earliest deadline bounds the wait for the
// write lock), the statements on ctx, then COMMIT, unless waits ended
// first: then it rolls back and commits nothing, as a *sql.Tx bound to
// waits would. A statement that fails rolls the transaction back. When
// ROLLBACK fails too (after a COMMIT that failed, SQLite may have rolled
// back already), the connection's state is unknown: the pool closes it,
// and a retry takes another.
func (db *DB) runOnWriter(ctx, waits context.Context, w *writer, ops []*pending, clocks []*any) error {
	defer func() { w.used = time.Now() }()
	var bad bool
	var err error
	if rerr := w.conn.Raw(func(dc any) error {
		bad, err = db.runOnDriver(ctx, waits, w.runner(dc.(driver.Conn)), ops, clocks)
		return nil
	}); rerr != nil {
		err, bad = NotCommitted(fmt.Errorf("begin: %w", rerr)), true // nothing ran
	}
	if bad {
		w.close(true)
	}
	return err
}

// runOnDriver is runOnWriter's transaction, each statement through run
// (writer.runner). bad reports that the connection's state is unknown:
// its ROLLBACK failed.
func (db *DB) runOnDriver(ctx, waits context.Context, run runner, ops []*pending, clocks []*any) (bad bool, err error) {
	exec := func(ctx context.Context, query string) error {
		_, err := run(ctx, &wire.Statement{Query: query})
		return err
	}
	if err := exec(waits, "BEGIN IMMEDIATE"); err != nil {
		// Nothing began (the write lock was busy past waits, say); should
		// a transaction be open all the same, it ends here.
		_ = exec(ctx, "ROLLBACK")
		return false, NotCommitted(fmt.Errorf("begin: %w", err))
	}
	rollback := func() bool { return exec(ctx, "ROLLBACK") != nil }
	setClocks(clocks, Millis(time.Now())) // under the write lock
	if err := db.runTx(ctx, run, ops); err != nil {
		return rollback(), NotCommitted(err) // no COMMIT was sent
	}
	if err := expired(waits); err != nil {
		return rollback(), NotCommitted(fmt.Errorf("commit: %w", err))
	}
	if err := exec(ctx, "COMMIT"); err != nil {
		// SQLite keeps the transaction open after some failed commits;
		// after others it rolled back already.
		return rollback(), db.judgeCommit(fmt.Errorf("commit: %w", err))
	}
	return false, nil
}
