package racefree

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/racefree/racefree/internal/wire"
)

// ErrNotCommitted matches an error after which the database is known to
// have committed nothing of the transaction that returned it: nothing
// reached the server, or the server answered that a statement or the
// commit failed and rolled the transaction back. An engine that pipelines marks such
// errors (NotCommitted), keeping their message; an error that does not
// match it may have committed (a connection lost once the commit was
// sent, a timeout after it). The combiner runs a failed batch's operations
// alone only after an error that matches it.
var ErrNotCommitted = errors.New("racefree: not committed")

// NotCommitted marks err as ErrNotCommitted, keeping its message and its
// chain. Only an engine that knows nothing of the transaction committed
// marks an error so.
func NotCommitted(err error) error {
	if err == nil {
		return nil
	}
	return notCommitted{err}
}

type notCommitted struct{ err error }

func (e notCommitted) Error() string        { return e.err.Error() }
func (e notCommitted) Unwrap() error        { return e.err }
func (e notCommitted) Is(target error) bool { return target == ErrNotCommitted }

// interpretAutocommit is InterpretError for the error of a statement
// that ran by itself on the pool and commits by itself: when ctx ended
// once the statement was sent, and the engine says it may have committed
// all the same (CommitJudge: PostgreSQL, whose server runs a statement
// its client gave up on), the error matches ErrUnavailable, an outcome
// unknown like a lost reply, as well as the context's error. On SQLite,
// which interrupts the statement and rolls it back, the context's error
// stays as it is.
func (db *DB) interpretAutocommit(err error) error {
	err = db.interpretError(err)
	if err == nil || errors.Is(err, ErrUnavailable) ||
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return db.mayHaveCommitted(err)
}

// mayHaveCommitted returns err, the error of a COMMIT or of a statement
// that commits by itself, wrapped so that it matches ErrUnavailable as
// well when the engine says its transaction may have committed all the
// same ([wire.CommitJudge]): an outcome unknown, which no retry may run
// again. Any other err is returned as it is.
func (db *DB) mayHaveCommitted(err error) error {
	if j, ok := db.engine.(wire.CommitJudge); ok && j.MayHaveCommitted(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// canPipeline reports whether the engine implements Pipeliner.
func (db *DB) canPipeline() bool {
	_, ok := db.engine.(wire.Pipeliner)
	return ok
}

// canMany reports whether the engine implements ManyBinder: the combiner
// runs Many forms.
func (db *DB) canMany() bool {
	_, ok := db.engine.(wire.ManyBinder)
	return ok
}

// pipeline runs stmts on one connection of the pool in one round trip, as
// one transaction ([wire.Pipeliner]), and costs what a single autocommit
// statement costs. A transient conflict (ErrRetryable) runs them again, as
// InTx does, and a pooled connection found broken before anything was sent
// is replaced. Errors are returned after InterpretError; one known to
// have committed nothing matches ErrNotCommitted, and any other (such as
// ErrUnavailable after the answer to the commit was lost) may have
// committed, and is never run again here. ctx governs the
// wait for a connection and the round trip. On an engine that cannot
// pipeline it returns errors.ErrUnsupported and runs nothing.
func (db *DB) pipeline(ctx context.Context, stmts ...*wire.Statement) error {
	p, ok := db.engine.(wire.Pipeliner)
	if !ok {
		return errors.ErrUnsupported
	}
	return db.retry(ctx, func() error { return db.pipelineFresh(ctx, ctx, p, stmts) })
}

// pipelineFresh runs stmts once, on another pooled connection when the
// one it got was broken before anything was sent: database/sql's own
// allowance, three tries. waits bounds each wait for a connection (which
// nothing of stmts has reached yet), ctx the round trip.
func (db *DB) pipelineFresh(ctx, waits context.Context, p wire.Pipeliner, stmts []*wire.Statement) error {
	var err error
	for range 3 {
		if err = db.pipelineOnce(ctx, waits, p, stmts); !errors.Is(err, driver.ErrBadConn) {
			break
		}
	}
	return err
}

func (db *DB) pipelineOnce(ctx, waits context.Context, p wire.Pipeliner, stmts []*wire.Statement) error {
	conn, err := db.sql.Conn(waits)
	if err != nil {
		return NotCommitted(err) // nothing was sent
	}
	defer conn.Close()
	return p.Pipeline(ctx, conn, stmts)
}
