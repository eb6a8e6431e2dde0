package racefree

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"
)

// Statement is one statement of a Pipeline: Query with Args. When Rows is
// not nil, it reads every row the statement returns; otherwise, when Dest
// is not nil, the statement's first row is scanned into it (an error
// matching ErrNotFound when it returns none). RowsAffected receives the
// number of rows the statement reports.
type Statement struct {
	Query string
	Args  []any
	Dest  []any
	// Rows is called once with the statement's rows, to read them all
	// (Next, then Scan). A pipeline that is run again (a transient
	// conflict) calls it again, with the rows of the new run: it must
	// start afresh each time. Its error ends the pipeline and is returned,
	// but cannot roll anything back: the statements were sent, and their
	// transaction commits unless one of them fails on the server.
	Rows func(Rows) error
	// Many, when not empty, is the statement's form for many operations
	// at once, which DB.Combine runs on an engine that pipelines instead
	// of one Query per operation, for a batch of two or more. Its
	// parameter $k is the array of the batch's operations' Args[k-1], one
	// element per operation in the batch's order, and each row it returns begins with the place of its
	// operation in those arrays (from 1), then the columns Dest receives.
	// An operation whose row does not come back gets RowsAffected 0 (1
	// when it does), and ErrNotFound when the statement has a Dest, as
	// Query alone would report. Rows is not used with Many.
	Many         string
	RowsAffected int64
}

// Rows are the rows of one Statement, read in order: Next advances to
// the next row (false after the last one), Scan copies its columns.
// *sql.Rows satisfies it, so a Statement's Rows also reads the rows of a
// statement run without a pipeline.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
}

// Pipeliner is an Engine that can run statements in one round trip as one
// transaction (PostgreSQL). Engines that cannot (SQLite) do not implement
// it.
type Pipeliner interface {
	// Pipeline sends stmts in order on conn, which is in no transaction,
	// in one round trip once the statements are known to the connection,
	// as one transaction: it commits after the last statement succeeds,
	// and a failing statement rolls back every one. A setting made with
	// set_config(…, true) holds for the statements after it and ends
	// with them. An error that wraps driver.ErrBadConn means that nothing
	// reached the server and conn is unusable. An error that the engine
	// knows committed nothing (nothing reached the server, or the server
	// answered that a statement or the commit failed, and rolled back)
	// matches ErrNotCommitted; any other error, such as a connection lost
	// after the statements were sent, may have committed. The Rows it hands to a
	// Statement's Rows skip a nil destination in Scan, and may be scanned
	// again (DB.Combine reads the place of a Many form's row first).
	Pipeline(ctx context.Context, conn *sql.Conn, stmts []*Statement) error
}

// ErrNotCommitted matches an error after which the database is known to
// have committed nothing of the transaction that returned it: nothing
// reached the server, or the server answered that a statement or the
// commit failed and rolled the transaction back. A Pipeliner marks such
// errors (NotCommitted), keeping their message; an error that does not
// match it may have committed (a connection lost once the commit was
// sent, a timeout after it). DB.Combine runs a failed batch's operations
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

// CommitJudge is an Engine that can tell whether a transaction whose
// COMMIT (or whose statement in autocommit) returned an error may have
// committed all the same (SQLite). DB.Combine takes a failed commit of an
// engine that is not one as an outcome it does not know.
type CommitJudge interface {
	// MayHaveCommitted reports whether err, returned by COMMIT or by a
	// statement that commits by itself, leaves open that the transaction
	// committed.
	MayHaveCommitted(err error) bool
}

// ServerBound is a Pipeliner that can make the server end a pipelined
// transaction's statements at a deadline (PostgreSQL). A pipeline's
// statements and its commit are all sent before any result comes back, so
// a client that gives up on it (a lock wait that outlived its deadline)
// cannot stop the server from committing it once the lock is free: a
// batch of DB.Combine whose operations have a deadline (Op.Deadline)
// sends Bound after its Begin instead, and waits for the server's answer.
type ServerBound interface {
	// Bound returns a statement that, sent in a pipeline, makes the
	// server end each later statement of its transaction that runs longer
	// than d, failing the transaction. Its setting ends with the
	// transaction.
	Bound(d time.Duration) *Statement
}

// InterpretAutocommit is InterpretError for the error of a statement
// that ran by itself on the pool and commits by itself: when ctx ended
// once the statement was sent, and the engine says it may have committed
// all the same (CommitJudge: PostgreSQL, whose server runs a statement
// its client gave up on), the error matches ErrUnavailable, an outcome
// unknown like a lost reply, as well as the context's error. On SQLite,
// which interrupts the statement and rolls it back, the context's error
// stays as it is.
func (db *DB) InterpretAutocommit(err error) error {
	err = db.InterpretError(err)
	if err == nil || errors.Is(err, ErrUnavailable) ||
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if j, ok := db.engine.(CommitJudge); ok && j.MayHaveCommitted(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// CanPipeline reports whether the engine implements Pipeliner.
func (db *DB) CanPipeline() bool {
	_, ok := db.engine.(Pipeliner)
	return ok
}

// Pipeline runs stmts on one connection of the pool in one round trip, as
// one transaction (Pipeliner), and costs what a single autocommit
// statement costs. A transient conflict (ErrRetryable) runs them again, as
// InTx does, and a pooled connection found broken before anything was sent
// is replaced. Errors are returned after InterpretError; one known to
// have committed nothing matches ErrNotCommitted, and any other (such as
// ErrUnavailable after the answer to the commit was lost) may have
// committed, and is never run again here. ctx governs the
// wait for a connection and the round trip. On an engine that cannot
// pipeline it returns errors.ErrUnsupported and runs nothing.
func (db *DB) Pipeline(ctx context.Context, stmts ...*Statement) error {
	p, ok := db.engine.(Pipeliner)
	if !ok {
		return errors.ErrUnsupported
	}
	return db.retry(ctx, func() error { return db.pipelineFresh(ctx, p, stmts) })
}

// pipelineFresh runs stmts once, on another pooled connection when the
// one it got was broken before anything was sent: database/sql's own
// allowance, three tries.
func (db *DB) pipelineFresh(ctx context.Context, p Pipeliner, stmts []*Statement) error {
	var err error
	for range 3 {
		if err = db.pipelineOnce(ctx, p, stmts); !errors.Is(err, driver.ErrBadConn) {
			break
		}
	}
	return err
}

func (db *DB) pipelineOnce(ctx context.Context, p Pipeliner, stmts []*Statement) error {
	conn, err := db.sql.Conn(ctx)
	if err != nil {
		return NotCommitted(err) // nothing was sent
	}
	defer conn.Close()
	return p.Pipeline(ctx, conn, stmts)
}
