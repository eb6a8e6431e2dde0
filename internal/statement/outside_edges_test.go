package statement_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/statement"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// countingExec is an Executor that counts the statements run on it.
type countingExec struct {
	exec  statement.Executor
	calls int
}

func (c *countingExec) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	c.calls++
	return c.exec.ExecContext(ctx, query, args...)
}

func (c *countingExec) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	c.calls++
	return c.exec.QueryContext(ctx, query, args...)
}

// engineSQL writes q's parameters ($1, $2, …) as db's engine numbers them.
func engineSQL(db *racefree.DB, q string) string {
	if db.Engine() == racefree.SQLite {
		return strings.ReplaceAll(q, "$", "?")
	}
	return q
}

// TestEdgesRunRunsThroughThePreparationItIsHanded: handed a statement's
// preparation, Run runs the statement through it and never on exec (a
// write, a Dest read, a Rows read), on the pool and, with the
// transaction's StmtContext of it, in a transaction, whose write is seen
// in it and gone once it rolls back; handed none, it runs each on exec.
func TestEdgesRunRunsThroughThePreparationItIsHanded(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		if _, err := db.SQL().ExecContext(ctx, `CREATE TABLE outside_edges (k TEXT PRIMARY KEY, n INTEGER)`); err != nil {
			t.Fatal(err)
		}
		ins := engineSQL(db, `INSERT INTO outside_edges (k, n) VALUES ($1, $2)`)
		sel := engineSQL(db, `SELECT n FROM outside_edges WHERE k = $1`)
		prepare := func(q string) *sql.Stmt {
			ps, err := db.SQL().PrepareContext(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ps.Close() })
			return ps
		}
		psIns, psSel := prepare(ins), prepare(sel)

		// three statements: a write, a Dest read and a Rows read of key k.
		three := func(exec statement.Executor, ins, sel *sql.Stmt, k string, v int64) {
			t.Helper()
			var affected int64
			found, err := statement.Run(ctx, exec, ins, statement.Statement{Query: engineSQL(db, `INSERT INTO outside_edges (k, n) VALUES ($1, $2)`), Args: []any{k, v}, Affected: &affected})
			if err != nil || !found || affected != 1 {
				t.Fatalf("insert of %s: found %v, %d affected, %v; want true, 1, nil", k, found, affected, err)
			}
			var n int64
			found, err = statement.Run(ctx, exec, sel, statement.Statement{Query: engineSQL(db, `SELECT n FROM outside_edges WHERE k = $1`), Args: []any{k}, Dest: []any{&n}})
			if err != nil || !found || n != v {
				t.Fatalf("select of %s: found %v, n %d, %v; want true, %d, nil", k, found, n, err, v)
			}
			var all []int64
			_, err = statement.Run(ctx, exec, sel, statement.Statement{Query: engineSQL(db, `SELECT n FROM outside_edges WHERE k = $1`), Args: []any{k}, Rows: func(r statement.Rows) error {
				for r.Next() {
					var n int64
					if err := r.Scan(&n); err != nil {
						return err
					}
					all = append(all, n)
				}
				return nil
			}})
			if err != nil || !reflect.DeepEqual(all, []int64{v}) {
				t.Fatalf("rows of %s: %v, %v; want [%d], nil", k, all, err, v)
			}
		}

		pool := &countingExec{exec: db.SQL()}
		three(pool, psIns, psSel, "pool", 1)
		if pool.calls != 0 {
			t.Errorf("Run handed the preparations ran %d statement(s) on the pool itself", pool.calls)
		}

		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		in := &countingExec{exec: tx}
		three(in, tx.StmtContext(ctx, psIns), tx.StmtContext(ctx, psSel), "tx", 2)
		if in.calls != 0 {
			t.Errorf("Run handed the transaction's preparations ran %d statement(s) on the transaction itself", in.calls)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		var n int64
		if found, err := statement.Run(ctx, db.SQL(), psSel, statement.Statement{Query: sel, Args: []any{"tx"}, Dest: []any{&n}}); err != nil || found {
			t.Fatalf("the rolled back write: found %v (n %d), %v; want no row", found, n, err)
		}

		alone := &countingExec{exec: db.SQL()}
		three(alone, nil, nil, "alone", 3)
		if alone.calls != 3 {
			t.Errorf("Run handed no preparation ran %d statement(s) on exec, want 3", alone.calls)
		}
	})
}

// TestEdgesRowsIsCalledWhenDestIsSetToo: a statement with both Rows and
// Dest has its Rows reader called, once, with every row, and its Dest
// left as it was (Dest is for a statement whose Rows is nil), through Run
// on both engines and through Direct.
func TestEdgesRowsIsCalledWhenDestIsSetToo(t *testing.T) {
	t.Parallel()
	const q = `SELECT n FROM (SELECT 1 AS n UNION ALL SELECT 2) AS s ORDER BY n`
	try := func(t *testing.T, via string, run func(statement.Statement) (bool, error)) {
		t.Helper()
		dest := int64(99)
		calls := 0
		var all []int64
		found, err := run(statement.Statement{Query: q, Dest: []any{&dest}, Rows: func(r statement.Rows) error {
			calls++
			for r.Next() {
				var n int64
				if err := r.Scan(&n); err != nil {
					return err
				}
				all = append(all, n)
			}
			return nil
		}})
		if err != nil || !found || calls != 1 || !reflect.DeepEqual(all, []int64{1, 2}) || dest != 99 {
			t.Errorf("%s: found %v, Rows called %d time(s) reading %v, Dest %d, %v; want true, once reading [1 2], Dest 99, nil",
				via, found, calls, all, dest, err)
		}
	}
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		try(t, "Run", func(st statement.Statement) (bool, error) { return statement.Run(ctx, db.SQL(), nil, st) })
	})
	conn := sqliteConn(t)
	try(t, "Direct", func(st statement.Statement) (bool, error) { return direct(t, conn, st) })
}

// countedStmt is a driver's statement of n parameters (NumInput; -1 for
// a driver that does not say) that records the statements run.
type countedStmt struct {
	n    int
	runs int
}

func (s *countedStmt) Close() error  { return nil }
func (s *countedStmt) NumInput() int { return s.n }
func (s *countedStmt) Exec([]driver.Value) (driver.Result, error) {
	return nil, errors.New("Exec without a context")
}
func (s *countedStmt) Query([]driver.Value) (driver.Rows, error) {
	return nil, errors.New("Query without a context")
}
func (s *countedStmt) ExecContext(context.Context, []driver.NamedValue) (driver.Result, error) {
	s.runs++
	return driver.RowsAffected(1), nil
}
func (s *countedStmt) QueryContext(context.Context, []driver.NamedValue) (driver.Rows, error) {
	s.runs++
	return &oneRow{}, nil
}

// oneRow is the rows of one column and one row, 1.
type oneRow struct{ done bool }

func (r *oneRow) Columns() []string { return []string{"n"} }
func (r *oneRow) Close() error      { return nil }
func (r *oneRow) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done, dest[0] = true, int64(1)
	return nil
}

// TestEdgesDirectRefusesEveryWrongCountOfArguments: given a driver's
// statement that reports its number of parameters, Direct refuses one
// argument more or fewer before it runs anything (none given one, two
// given one or three, a write as a read), and runs the right count; a
// statement whose driver does not report it (NumInput -1) runs with any.
// On SQLite, whose driver reports none, Direct refuses what Run refuses
// and runs what Run runs.
func TestEdgesDirectRefusesEveryWrongCountOfArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		n    int
		args []any
		ok   bool
	}{
		{0, []any{1}, false},
		{0, nil, true},
		{2, []any{1}, false},
		{2, []any{1, 2, 3}, false},
		{2, []any{1, 2}, true},
		{-1, []any{1, 2, 3}, true},
		{-1, nil, true},
	} {
		for _, write := range []bool{false, true} {
			ds := &countedStmt{n: c.n}
			var n, affected int64
			st := statement.Statement{Args: c.args, Dest: []any{&n}}
			if write {
				st = statement.Statement{Args: c.args, Affected: &affected}
			}
			_, err := statement.Direct(ctx, ds, st)
			if c.ok && (err != nil || ds.runs != 1) {
				t.Errorf("%d parameter(s), %d argument(s), write %v: ran %d time(s), %v; want once, nil", c.n, len(c.args), write, ds.runs, err)
			}
			if !c.ok && (err == nil || ds.runs != 0) {
				t.Errorf("%d parameter(s), %d argument(s), write %v: ran %d time(s), %v; want refused before it ran", c.n, len(c.args), write, ds.runs, err)
			}
		}
	}

	conn := sqliteConn(t)
	for _, c := range []struct {
		q    string
		args []any
	}{
		{`SELECT 1`, []any{1}},
		{`SELECT ?1`, nil},
		{`SELECT ?1 + ?2`, []any{1}},
		{`SELECT ?1 + ?2`, []any{1, 2, 3}},
		{`SELECT ?1 + ?2`, []any{1, 2}},
	} {
		var rn, dn int64
		rfound, rerr := statement.Run(ctx, conn, nil, statement.Statement{Query: c.q, Args: c.args, Dest: []any{&rn}})
		dfound, derr := direct(t, conn, statement.Statement{Query: c.q, Args: c.args, Dest: []any{&dn}})
		if (rerr == nil) != (derr == nil) || rfound != dfound || rn != dn {
			t.Errorf("%q given %d argument(s): Direct found %v, read %d, %v; Run found %v, read %d, %v", c.q, len(c.args), dfound, dn, derr, rfound, rn, rerr)
		}
	}
}

// TestEdgesDirectScansAsRunScansRowAfterRow: one destination scanned row
// after row holds each row's value as Rows.Scan gives it, a NULL after
// bytes included (nil, not the bytes before); and a Scan into more
// destinations than the row has columns is an error, never a panic.
func TestEdgesDirectScansAsRunScansRowAfterRow(t *testing.T) {
	t.Parallel()
	conn := sqliteConn(t)
	ctx := context.Background()
	const q = `SELECT b FROM (SELECT 1 AS o, x'00ff' AS b UNION ALL SELECT 2, NULL UNION ALL SELECT 3, x'') ORDER BY o`
	read := func(run func(statement.Statement) (bool, error)) ([][]byte, []any, error) {
		var bs [][]byte
		var as []any
		var b []byte
		var a any
		_, err := run(statement.Statement{Query: q, Rows: func(r statement.Rows) error {
			for r.Next() {
				if err := r.Scan(&b); err != nil {
					return err
				}
				if err := r.Scan(&a); err != nil {
					return err
				}
				bs = append(bs, b)
				as = append(as, a)
			}
			return nil
		}})
		return bs, as, err
	}
	wantB, wantA, err := read(func(st statement.Statement) (bool, error) { return statement.Run(ctx, conn, nil, st) })
	if err != nil {
		t.Fatal(err)
	}
	if wantB[1] != nil {
		t.Fatalf("Rows.Scan of NULL into a []byte gave %#v, want nil", wantB[1])
	}
	gotB, gotA, err := read(func(st statement.Statement) (bool, error) { return direct(t, conn, st) })
	if err != nil || !reflect.DeepEqual(gotB, wantB) || !reflect.DeepEqual(gotA, wantA) {
		t.Errorf("Direct scanned %#v and %#v, %v; Rows.Scan %#v and %#v", gotB, gotA, err, wantB, wantA)
	}

	for _, via := range []struct {
		name string
		run  func(statement.Statement) (bool, error)
	}{
		{"Run", func(st statement.Statement) (bool, error) { return statement.Run(ctx, conn, nil, st) }},
		{"Direct", func(st statement.Statement) (bool, error) { return direct(t, conn, st) }},
	} {
		var a, b, c int64
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
					t.Errorf("%s: a Scan into three destinations of a row of two columns panicked: %v", via.name, p)
				}
			}()
			_, err = via.run(statement.Statement{Query: `SELECT 1, 2`, Rows: func(r statement.Rows) error {
				if !r.Next() {
					return fmt.Errorf("no row")
				}
				return r.Scan(&a, &b, &c)
			}})
			return err
		}()
		if err == nil {
			t.Errorf("%s: a Scan into three destinations of a row of two columns succeeded (%d, %d, %d)", via.name, a, b, c)
		}
	}
}

// TestEdgesAssignCopiesTheDriversBytes: what Assign stores from a driver's
// bytes is a copy, into a *[]byte as into a *any, so that the driver may
// reuse its buffer for the next row; and NULL into a *[]byte that held
// bytes leaves nil.
func TestEdgesAssignCopiesTheDriversBytes(t *testing.T) {
	t.Parallel()
	src := []byte{1, 2}
	var b []byte
	if err := statement.Assign(&b, src); err != nil {
		t.Fatal(err)
	}
	var a any
	if err := statement.Assign(&a, src); err != nil {
		t.Fatal(err)
	}
	src[0] = 9 // the driver reuses its buffer
	if !reflect.DeepEqual(b, []byte{1, 2}) {
		t.Errorf("*[]byte holds %v after the driver reused its buffer, want [1 2]", b)
	}
	if !reflect.DeepEqual(a, []byte{1, 2}) {
		t.Errorf("*any holds %v after the driver reused its buffer, want [1 2]", a)
	}
	if err := statement.Assign(&b, nil); err != nil || b != nil {
		t.Errorf("NULL into a *[]byte holding bytes: %v, %v; want nil, nil", b, err)
	}
	a = "before"
	if err := statement.Assign(&a, nil); err != nil || a != nil {
		t.Errorf("NULL into a *any: %v, %v; want nil, nil", a, err)
	}
}
