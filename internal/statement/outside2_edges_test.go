package statement_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"testing"

	"github.com/racefree/racefree/internal/statement"
)

// Edges found by a second round of mutants written from the package's
// code alone: each test here fails on a slip the other tests let through.

var (
	errValuer  = errors.New("the valuer refuses")
	errScanner = errors.New("the scanner refuses")
	errMidway  = errors.New("the rows failed midway")
)

// refusingValuer is an argument whose driver.Value fails.
type refusingValuer struct{}

func (refusingValuer) Value() (driver.Value, error) { return nil, errValuer }

// refusingScanner is a destination whose Scan fails.
type refusingScanner struct{}

func (*refusingScanner) Scan(any) error { return errScanner }

// TestOutside2EdgesErrorsAreWrapped: an argument that cannot be converted
// (a driver.Valuer that fails) and a destination whose Scan fails end
// Direct with an error that wraps theirs (errors.Is finds it), as Run's
// through database/sql does; the statement given the bad argument never
// runs.
func TestOutside2EdgesErrorsAreWrapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := sqliteConn(t)
	var n int64
	_, rerr := statement.Run(ctx, conn, nil, statement.Statement{Query: `SELECT ?1`, Args: []any{refusingValuer{}}, Dest: []any{&n}})
	ds := &countedStmt{n: 1}
	_, derr := statement.Direct(ctx, ds, statement.Statement{Args: []any{refusingValuer{}}, Dest: []any{&n}})
	if !errors.Is(rerr, errValuer) || !errors.Is(derr, errValuer) || ds.runs != 0 {
		t.Errorf("an argument that fails to convert: Run %v, Direct %v (ran %d times); want both to wrap %v, nothing run", rerr, derr, ds.runs, errValuer)
	}
	_, rerr = statement.Run(ctx, conn, nil, statement.Statement{Query: `SELECT 1`, Dest: []any{&refusingScanner{}}})
	_, derr = direct(t, conn, statement.Statement{Query: `SELECT 1`, Dest: []any{&refusingScanner{}}})
	if !errors.Is(rerr, errScanner) || !errors.Is(derr, errScanner) {
		t.Errorf("a destination that fails to scan: Run %v, Direct %v; want both to wrap %v", rerr, derr, errScanner)
	}
}

// failingRows is a driver's rows of one column whose second Next fails;
// asked again, it would give one more row, then none.
type failingRows struct{ calls int }

func (r *failingRows) Columns() []string { return []string{"n"} }
func (r *failingRows) Close() error      { return nil }
func (r *failingRows) Next(dest []driver.Value) error {
	r.calls++
	switch {
	case r.calls == 2:
		return errMidway
	case r.calls >= 4:
		return io.EOF
	}
	dest[0] = int64(r.calls)
	return nil
}

// failingStmt is a driver's statement whose rows are failingRows.
type failingStmt struct{ rows *failingRows }

func (s *failingStmt) Close() error                               { return nil }
func (s *failingStmt) NumInput() int                              { return 0 }
func (s *failingStmt) Exec([]driver.Value) (driver.Result, error) { return nil, errors.New("no Exec") }
func (s *failingStmt) Query([]driver.Value) (driver.Rows, error)  { return nil, errors.New("no Query") }
func (s *failingStmt) QueryContext(context.Context, []driver.NamedValue) (driver.Rows, error) {
	return s.rows, nil
}

// TestOutside2EdgesDirectStaysStoppedAtAnError: Direct's rows stop at the
// error that ends them, as *sql.Rows do: a reader that calls Next again
// after it returned false gets false, never a row the driver would give
// past the failure, and the statement's error is the driver's.
func TestOutside2EdgesDirectStaysStoppedAtAnError(t *testing.T) {
	t.Parallel()
	ds := &failingStmt{rows: &failingRows{}}
	var read []int64
	_, err := statement.Direct(context.Background(), ds, statement.Statement{Rows: func(r statement.Rows) error {
		for range 3 {
			for r.Next() {
				var n int64
				if err := r.Scan(&n); err != nil {
					return err
				}
				read = append(read, n)
			}
		}
		return nil
	}})
	if !errors.Is(err, errMidway) || len(read) != 1 || read[0] != 1 || ds.rows.calls != 2 {
		t.Fatalf("read %v, the driver asked %d times, %v; want [1], asked twice, %v", read, ds.rows.calls, err, errMidway)
	}
}
