package testdb

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/racefree/racefree"
)

// Execer runs a statement, as *racefree.DB, *sql.DB, *sql.Tx and
// *sql.Conn do: ExecAll runs its statements on any of them.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Querier runs a query, as *racefree.DB, *sql.DB, *sql.Tx and *sql.Conn
// do: Strings reads its rows from any of them.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

var (
	_ Execer  = (*racefree.DB)(nil)
	_ Execer  = (*sql.DB)(nil)
	_ Execer  = (*sql.Tx)(nil)
	_ Execer  = (*sql.Conn)(nil)
	_ Querier = (*racefree.DB)(nil)
	_ Querier = (*sql.DB)(nil)
	_ Querier = (*sql.Tx)(nil)
	_ Querier = (*sql.Conn)(nil)
)

// ExecAll runs stmts on db, in their order, without arguments and under
// context.Background(), and fails the test at the first that returns an
// error, naming the statement; the statements after it do not run.
func ExecAll(t testing.TB, db Execer, stmts ...string) {
	t.Helper()
	for _, stmt := range stmts {
		if _, err := db.ExecContext(context.Background(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}

// Strings runs query with args on db, under context.Background(), and
// returns the one column of every row as a string, in the rows' order (nil
// for no rows). It fails the test, naming the query, on any error: of the
// query, of a row's scan (a NULL, more than one column), of the rows
// (rows.Err) or of closing them.
func Strings(t testing.TB, db Querier, query string, args ...any) []string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		out = append(out, s)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}
