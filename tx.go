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
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
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
