package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
)

// Bound returns set_config('statement_timeout', d, true) ([wire.ServerBound]):
// the statements after it in its transaction end, failing it, when they
// run longer than d, and the setting ends with the transaction, so that
// nothing of it outlives the transaction in a pooled session. In the
// simple_protocol mode, where the batch travels as one query, the setting
// comes too late for that query and bounds nothing.
func (e *Engine) Bound(d time.Duration) *wire.Statement {
	return &wire.Statement{Query: `SELECT set_config('statement_timeout', $1, true)`,
		Args: []any{strconv.FormatInt(max(d.Milliseconds(), 1), 10)}}
}

// GenericPlan returns set_config('plan_cache_mode', 'force_generic_plan',
// true) ([wire.GenericPlanner]): the prepared statements after it in its
// transaction run on their generic plans, made once per connection, and
// the setting ends with the transaction, so that no statement outside
// the combiner's batches is planned otherwise than PostgreSQL chooses. A
// statement pgx does not prepare (the exec and simple_protocol modes, for
// a transaction-mode pooler) is planned at each run whatever the setting.
func (e *Engine) GenericPlan() *wire.Statement {
	return &wire.Statement{Query: `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`}
}

// ManyFrom returns 2 ([wire.ManyBinder]): in a pipeline, a statement over
// arrays of two operations costs less than their two statements.
func (e *Engine) ManyFrom() int { return 2 }

// BindMany binds a Many form's parameters ([wire.ManyBinder]): $k is the
// array of every operation's Args[k-1], in the batch's order, which pgx
// sends as a PostgreSQL array that the form unnests WITH ORDINALITY (a
// row's ordinality is its place: keys are not needed).
func (e *Engine) BindMany(keys []string, args [][]any) ([]any, error) {
	cols := make([]any, len(args[0]))
	for k := range cols {
		col := make([]any, len(args))
		for i, a := range args {
			col[i] = a[k]
		}
		cols[k] = col
	}
	return cols, nil
}

// Pipeline sends stmts as one pgx batch: the statements, then a single
// Sync. Without a BEGIN, PostgreSQL runs everything up to a Sync as one
// implicit transaction, which commits at the Sync and which an error
// anywhere rolls back whole, so a set_config(…, true) in the batch holds
// for the statements after it and ends with them. With pgx's default
// statement cache a statement's first use on a connection costs one more
// round trip, to prepare it; after that the batch is one round trip. The
// exec and simple_protocol modes (for a transaction-mode pooler) send the
// batch in one round trip too, the latter as one multi-statement query,
// which is also one implicit transaction.
//
// conn must belong to a pool of this engine and be in no transaction. A
// connection that failed before anything was sent is returned as an error
// wrapping driver.ErrBadConn, and discarded. That error, and the server's
// answer that a statement or the commit failed (rolledBack), match
// [racefree.ErrNotCommitted]; any other error may have committed, and a
// context that ended once the batch was sent is reported as
// [racefree.ErrUnavailable] too (wrapping the context's error): the server
// may commit the batch after the caller gave up on it.
func (e *Engine) Pipeline(ctx context.Context, conn *sql.Conn, stmts []*wire.Statement) error {
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("postgres: the pool's connections are %T, not pgx's", dc)
		}
		var b pgx.Batch
		for _, s := range stmts {
			b.Queue(s.Query, s.Args...)
		}
		br := sc.Conn().SendBatch(ctx, &b)
		var err error
		for _, s := range stmts {
			switch {
			case s.Rows != nil:
				err = readRows(br.Query, s)
			case s.Dest != nil:
				err = br.QueryRow().Scan(s.Dest...)
			default:
				var tag pgconn.CommandTag
				tag, err = br.Exec()
				s.RowsAffected = tag.RowsAffected()
			}
			if err != nil {
				break
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		switch {
		case err == nil:
			return nil
		case pgconn.SafeToRetry(err):
			return racefree.NotCommitted(fmt.Errorf("%w: %w", driver.ErrBadConn, err))
		case rolledBack(err):
			return racefree.NotCommitted(err)
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			// The caller gave up once the statements and the Sync were
			// sent (pgx then drops the connection): the server runs them
			// all the same, and commits them once a lock they wait for is
			// free. An unknown outcome, as a lost reply.
			return fmt.Errorf("%w: %w", racefree.ErrUnavailable, err)
		}
		return err
	})
}

// MayHaveCommitted reports whether err, returned by COMMIT or by a
// statement that commits by itself, leaves open that its transaction
// committed ([wire.CommitJudge]): every error but one that says
// nothing was sent (pgconn.SafeToRetry) and the server's answer that the
// statement or the commit failed (rolledBack), or that it answered a
// COMMIT with ROLLBACK (pgx.ErrTxCommitRollback: a statement had failed
// and aborted the transaction). A context that ended while the statement
// or the COMMIT ran is such an error: pgx drops the connection, but the
// server has the statement and its Sync, or the COMMIT, and commits it
// once a lock it waits for is free.
func (e *Engine) MayHaveCommitted(err error) bool {
	return !pgconn.SafeToRetry(err) && !rolledBack(err) && !errors.Is(err, pgx.ErrTxCommitRollback)
}

// rolledBack reports whether err is the server's answer that a statement
// of a pipeline, or its commit, failed: an ErrorResponse of severity
// ERROR, after which the server skips to the Sync and rolls the implicit
// transaction back, and the session lives on. An error at COMMIT after
// its record is written is a PANIC, never an ERROR. A FATAL answer ends
// the session and may come after the commit (a backend terminated while
// it waited for a synchronous standby had committed locally), and an
// error that is not the server's (a connection lost once the pipeline was
// sent, a timeout, a row that failed to scan while the transaction went
// on) leaves the outcome unknown.
func rolledBack(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	sev := pe.SeverityUnlocalized
	if sev == "" {
		sev = pe.Severity
	}
	return sev == "ERROR"
}

// readRows hands the next result of a batch to s.Rows and reads what it
// leaves unread; the result's error, if any, comes first.
func readRows(query func() (pgx.Rows, error), s *wire.Statement) error {
	rows, err := query()
	if err != nil {
		return err
	}
	defer rows.Close()
	if err := s.Rows(rows); err != nil {
		return err
	}
	for rows.Next() {
	}
	rows.Close()
	s.RowsAffected = rows.CommandTag().RowsAffected()
	return rows.Err()
}
