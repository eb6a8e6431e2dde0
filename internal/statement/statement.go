// Package statement runs one statement of a racefree operation without a
// pipeline, through its preparation when there is one: the one way
// wire.DB.Combine's batches and package tenant's lone statements run
// a statement.
package statement

import (
	"context"
	"database/sql"
)

// Executor is what Run runs a statement on: a pool, a connection or a
// transaction (racefree.Executor).
type Executor interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Statement is one statement for Run: Query with Args, and what to do
// with its outcome.
type Statement struct {
	Query string
	Args  []any
	// Rows, when not nil, is called once with the statement's rows, to
	// read them all.
	Rows func(Rows) error
	// Dest, when Rows is nil and Dest is not, receives the first row.
	Dest []any
	// Affected, for a statement with neither Rows nor Dest, receives the
	// number of rows the statement reports.
	Affected *int64
}

// Run runs st on exec, or through ps when ps is not nil: st.Query
// prepared for exec (wire.DB.Prepared, or a transaction's
// StmtContext of it). found is false only for a Dest statement that
// returned no row (and then err is nil unless reading the rows failed).
// Errors are the driver's, as they come.
func Run(ctx context.Context, exec Executor, ps *sql.Stmt, st Statement) (found bool, err error) {
	if st.Rows == nil && st.Dest == nil {
		var res sql.Result
		if ps != nil {
			res, err = ps.ExecContext(ctx, st.Args...)
		} else {
			res, err = exec.ExecContext(ctx, st.Query, st.Args...)
		}
		if err != nil {
			return false, err
		}
		*st.Affected, err = res.RowsAffected()
		return true, err
	}
	var rows *sql.Rows
	if ps != nil {
		rows, err = ps.QueryContext(ctx, st.Args...)
	} else {
		rows, err = exec.QueryContext(ctx, st.Query, st.Args...)
	}
	if err != nil {
		return false, err
	}
	defer rows.Close()
	if found, err = read(rows, st); err != nil {
		return false, err
	}
	if err := rows.Close(); err != nil {
		return false, err
	}
	return found, rows.Err()
}

// read reads rows as st asks, for Run and Direct: every row through
// st.Rows, or the first into st.Dest. found is false only when st.Dest
// found no row.
func read(rows Rows, st Statement) (found bool, err error) {
	if st.Rows != nil {
		return true, st.Rows(rows)
	}
	if !rows.Next() {
		return false, nil
	}
	return true, rows.Scan(st.Dest...)
}

// CloseRows closes rows that were read to their end and returns the error
// that ended them (rows.Err: a query that failed after some of its rows,
// a division by zero on the second row, say), else Close's. A reader that
// stopped at the end of rows.Next without it would take the rows it got
// for all of them: a checker would judge a catalogue it read only half of.
func CloseRows(rows *sql.Rows) error {
	err := rows.Err()
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	return err
}
