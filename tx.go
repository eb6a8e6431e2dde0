package racefree

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// InTx runs fn in a transaction and commits it when fn returns nil.
//
// On SQLite the transaction begins IMMEDIATE, taking the write lock at once:
// a deferred transaction that reads and then writes fails with SQLITE_BUSY
// without waiting for the busy timeout. On PostgreSQL it runs at READ
// COMMITTED.
//
// When the engine aborts the transaction for a transient conflict (SQLite
// busy or locked, PostgreSQL serialization failure 40001 or deadlock 40P01),
// InTx rolls back and runs fn again, up to Config.TxAttempts times, sleeping
// a jittered, doubling backoff in between. fn must therefore confine its
// effects to tx: anything it does outside the database happens once per
// attempt. Errors from fn are returned as they are, after InterpretError.
//
// A COMMIT whose failure leaves open whether it committed (the engine's
// judgement, wire.CommitJudge) makes InTx return an error matching
// ErrUnavailable as well as the commit's own error, and never run fn
// again: the outcome is unknown, to be settled by re-reading or by a
// retry that is safe twice (an idempotency key, a fence). On PostgreSQL
// that is a connection lost once the COMMIT was sent, and a ctx that ends
// while the COMMIT is in flight (the error then matches ctx's error too):
// the server may commit it all the same. On
// SQLite, which commits in the process (a commit interrupted by ctx
// rolls back), it is an I/O error at the commit. A ctx that had ended
// when fn returned sends no COMMIT: ctx's error alone, marked
// ErrNotCommitted, and nothing committed (one that ends just as the
// COMMIT starts may be reported unknown). A COMMIT the database refused
// (a transient conflict at the commit, retried as above; a deferred
// constraint; a transaction a failed statement had aborted) committed
// nothing.
func (db *DB) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return db.retry(ctx, func() error { return db.tryTx(ctx, fn) })
}

// ReadTx runs fn in a read-only transaction, retried like InTx. It is
// for reads that must work on a node that accepts no writes (a
// PostgreSQL standby): on PostgreSQL the transaction is READ ONLY, so a
// write slipped into fn fails with ErrReadOnly on the primary too, not
// only on a standby; on SQLite it is a deferred transaction, which does
// not take the write lock. fn must confine its effects to tx, as for
// InTx.
func (db *DB) ReadTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return db.retry(ctx, func() error { return db.tryTxOpts(ctx, &sql.TxOptions{ReadOnly: true}, fn) })
}

// retry runs op until it returns nil or an error that is not
// ErrRetryable, at most Config.TxAttempts times, sleeping a jittered,
// doubling backoff (from Config.TxBackoff, at most one second) in between.
// op's error is returned after InterpretError.
func (db *DB) retry(ctx context.Context, op func() error) error {
	return db.retryIf(ctx, op, func(err error) bool { return errors.Is(err, ErrRetryable) })
}

// retryIf is retry for the errors again says.
func (db *DB) retryIf(ctx context.Context, op func() error, again func(error) bool) error {
	backoff := db.cfg.TxBackoff
	for attempt := 1; ; attempt++ {
		err := db.interpretError(op())
		if err == nil || !again(err) || attempt >= db.cfg.TxAttempts {
			return err
		}
		if serr := sleepJitter(ctx, backoff); serr != nil {
			if errors.Is(err, ErrNotCommitted) {
				return NotCommitted(fmt.Errorf("retry: %w", serr))
			}
			return fmt.Errorf("retry: %w", serr)
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (db *DB) tryTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return db.tryTxOpts(ctx, nil, fn)
}

func (db *DB) tryTxOpts(ctx context.Context, opts *sql.TxOptions, fn func(tx *sql.Tx) error) (err error) {
	tx, err := db.sql.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		// database/sql sends no COMMIT on a context that ended, and
		// rolls back: nothing committed.
		return NotCommitted(fmt.Errorf("commit: %w", err))
	}
	if err := tx.Commit(); err != nil {
		// The COMMIT may have left: when the engine says it may have
		// committed, the outcome is unknown (ErrUnavailable), which
		// retry never runs again.
		return db.mayHaveCommitted(fmt.Errorf("commit: %w", err))
	}
	return nil
}

// sleepJitter sleeps a random duration in (0, max], or until ctx is done.
func sleepJitter(ctx context.Context, max time.Duration) error {
	t := time.NewTimer(time.Duration(rand.Int64N(int64(max)) + 1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
