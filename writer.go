package racefree

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync"
	"time"
)

// writer is the connection that the combiner's batches run on, on an
// engine that does not pipeline (SQLite), while batches follow one
// another: one connection of the pool, kept out of it with the batch's
// statements prepared on it, and its transaction begun and ended by
// statements (BEGIN IMMEDIATE, COMMIT, ROLLBACK) rather than a *sql.Tx.
//
// It is there for the CPU of SQLite's one writer. database/sql watches
// the context of a *sql.Tx, which is always cancellable, with a
// goroutine for every statement that returns rows in it, and rebinds a
// pool statement to the transaction's connection for every call: about
// a third of a hot quota key's charge in a batch (bench/quotafloor). On
// a *sql.Conn whose statements run on a context that cannot end, neither
// happens.
//
// A batch takes the writer only when it holds two or more operations or
// the writer is already out of the pool (batches following one another),
// and only when the pool holds more than one connection. Once batches
// stop coming for writerIdle, the writer goes back to the pool, with its
// statements closed: while no calls combine, the pool is whole.
type writer struct {
	mu    sync.Mutex // held by the batch running on conn, and by give
	conn  *sql.Conn  // nil: in the pool
	stmts map[string]*sql.Stmt
	used  time.Time // when the last batch on conn ended

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
	w.conn, w.stmts = c, map[string]*sql.Stmt{}
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
// or has the pool close it (bad). w.mu is held.
func (w *writer) close(bad bool) {
	if w.conn == nil {
		return
	}
	for _, st := range w.stmts {
		_ = st.Close()
	}
	if bad {
		_ = w.conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = w.conn.Close()
	w.conn, w.stmts = nil, nil
}

// prepared returns query prepared on w's connection, preparing it the
// first time, or nil when that fails: the statement then runs unprepared
// and reports the error itself.
func (w *writer) prepared(ctx context.Context, query string) *sql.Stmt {
	if st, ok := w.stmts[query]; ok {
		return st
	}
	st, err := w.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	w.stmts[query] = st
	return st
}

// runOnWriter runs ops in one transaction on w, as runBatch does in a
// *sql.Tx: BEGIN IMMEDIATE on waits (the earliest deadline bounds the
// wait for the write lock), the statements on ctx, then COMMIT, unless
// waits ended first: then it rolls back and commits nothing, as a
// *sql.Tx bound to waits would. A statement that fails rolls the
// transaction back. When ROLLBACK fails too (after a COMMIT that failed,
// SQLite may have rolled back already), the connection's state is
// unknown: the pool closes it, and a retry takes another.
func (db *DB) runOnWriter(ctx, waits context.Context, w *writer, ops []*pending, clocks []*any) error {
	defer func() { w.used = time.Now() }()
	if _, err := w.exec(waits, "BEGIN IMMEDIATE"); err != nil {
		// Nothing began (the write lock was busy past waits, say); should
		// a transaction be open all the same, it ends here.
		_, _ = w.exec(ctx, "ROLLBACK")
		return NotCommitted(fmt.Errorf("begin: %w", err))
	}
	rollback := func() {
		if _, err := w.exec(ctx, "ROLLBACK"); err != nil {
			w.close(true)
		}
	}
	setClocks(clocks, Millis(time.Now())) // under the write lock
	if err := db.runTx(ctx, w.conn, w.prepared, ops); err != nil {
		rollback()
		return NotCommitted(err) // no COMMIT was sent
	}
	if err := waits.Err(); err != nil {
		rollback()
		return NotCommitted(fmt.Errorf("commit: %w", err))
	}
	if _, err := w.exec(ctx, "COMMIT"); err != nil {
		// SQLite keeps the transaction open after some failed commits;
		// after others it rolled back already.
		rollback()
		return db.judgeCommit(fmt.Errorf("commit: %w", err))
	}
	return nil
}

// exec runs query on w's connection, prepared there once: BEGIN
// IMMEDIATE, COMMIT and ROLLBACK, which the driver would otherwise parse
// on every batch.
func (w *writer) exec(ctx context.Context, query string) (sql.Result, error) {
	if st := w.prepared(ctx, query); st != nil {
		return st.ExecContext(ctx)
	}
	return w.conn.ExecContext(ctx, query)
}
