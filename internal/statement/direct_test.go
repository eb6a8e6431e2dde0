package statement_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/statement"
)

// sqliteConn opens a SQLite database of racefree's own (its driver and
// settings) and one connection of it, for statements run both through
// database/sql (Run) and through the driver directly (Direct) on the same
// connection.
func sqliteConn(t *testing.T) *sql.Conn {
	t.Helper()
	ctx := context.Background()
	db, err := dsn.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "direct.db"), &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	conn, err := db.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// direct runs st through the driver on conn, prepared there for the call.
func direct(t *testing.T, conn *sql.Conn, st statement.Statement) (found bool, err error) {
	t.Helper()
	if rerr := conn.Raw(func(dc any) error {
		ds, perr := dc.(driver.ConnPrepareContext).PrepareContext(context.Background(), st.Query)
		if perr != nil {
			return perr
		}
		defer ds.Close()
		found, err = statement.Direct(context.Background(), ds, st)
		return nil
	}); rerr != nil {
		t.Fatalf("preparing %q: %v", st.Query, rerr)
	}
	return found, err
}

type kind string // a named string type, as callers pass arguments

// TestDirectScansAsRunScansOrRefuses: for every value SQLite returns
// (an integer, 0 and 1, a float, text, bytes, NULL, and the bool and time
// its driver makes of a column declared BOOLEAN or DATETIME) and every
// destination, Direct's Dest either holds what database/sql's Rows.Scan
// puts there, or is an error, and then only where Assign does not know
// the pair; it is never a value database/sql would not give. And the pairs
// racefree's own statements read are never refused.
func TestDirectScansAsRunScansOrRefuses(t *testing.T) {
	t.Parallel()
	conn := sqliteConn(t)
	ctx := context.Background()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE typed (b BOOLEAN, d DATETIME)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO typed VALUES (?1, ?2)`, true, time.Date(2026, 12, 5, 9, 30, 0, 123456789, time.UTC)); err != nil {
		t.Fatal(err)
	}
	exprs := []string{
		`1`, `0`, `2`, `-1`, `-9223372036854775808`, `1.5`, `2.0`, `'text'`, `'1'`, `'true'`, `''`,
		`x'00ff'`, `x''`, `NULL`, `b FROM typed`, `d FROM typed`,
	}
	dests := []func() any{
		func() any { return new(int64) }, func() any { return new(bool) }, func() any { return new(string) },
		func() any { return new([]byte) }, func() any { return new(float64) }, func() any { return new(any) },
		func() any { return new(time.Time) }, func() any { return new(sql.NullInt64) }, func() any { return new(sql.NullString) },
		func() any { return new(sql.NullBool) }, func() any { return new(sql.NullTime) }, func() any { return new(int) },
		func() any { return new(uint8) }, func() any { return new(sql.RawBytes) },
	}
	// What racefree's statements read (claim, dedup, inbox, quota, and the
	// combiner's own places and sinks): Direct must take each.
	needed := map[string]bool{
		`1 *int64`: true, `0 *int64`: true, `-9223372036854775808 *int64`: true,
		`1 *bool`: true, `0 *bool`: true,
		`'text' *string`: true, `'' *string`: true,
		`1 *sql.NullInt64`: true, `NULL *sql.NullInt64`: true,
		`b FROM typed *bool`: true, `d FROM typed *time.Time`: true, `x'00ff' *[]uint8`: true, `NULL *[]uint8`: true,
		`1.5 *float64`: true, `1 *interface {}`: true, `NULL *interface {}`: true, `'text' *interface {}`: true, `x'00ff' *interface {}`: true,
	}
	accepted := 0
	for _, expr := range exprs {
		for _, mk := range dests {
			want, got := mk(), mk()
			pair := fmt.Sprintf("%s %T", expr, want)
			q := `SELECT ` + expr
			_, werr := statement.Run(ctx, conn, nil, statement.Statement{Query: q, Dest: []any{want}})
			_, gerr := direct(t, conn, statement.Statement{Query: q, Dest: []any{got}})
			if gerr == nil {
				accepted++
			}
			switch {
			case gerr == nil && werr != nil:
				t.Errorf("%s: Direct scanned %#v where Rows.Scan failed: %v", pair, reflect.ValueOf(got).Elem(), werr)
			case gerr == nil && !reflect.DeepEqual(got, want):
				t.Errorf("%s: Direct scanned %#v, Rows.Scan %#v", pair, reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem())
			case gerr != nil && needed[pair]:
				t.Errorf("%s: Direct refused a pair racefree's statements read: %v", pair, gerr)
			}
			delete(needed, pair)
		}
	}
	for pair := range needed {
		t.Errorf("%s: not tried", pair)
	}
	t.Logf("Direct scanned %d of %d pairs", accepted, len(exprs)*len(dests))
}

// TestDirectReportsWhatRunReports: a statement's outcomes through the
// driver directly are those through database/sql: the rows a reader
// reads, a Dest statement that finds no row, an error met after the first
// row (the reader stopped, and the error is the statement's), no Scan
// before the first row, after the last, or into fewer destinations than
// the row has columns, the rows a
// write affected, its arguments converted as database/sql converts them
// (a named string type, an int), and a wrong number of arguments refused
// before anything ran.
func TestDirectReportsWhatRunReports(t *testing.T) {
	t.Parallel()
	conn := sqliteConn(t)
	ctx := context.Background()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE t (k TEXT PRIMARY KEY, n INTEGER)`); err != nil {
		t.Fatal(err)
	}
	for _, via := range []struct {
		name string
		run  func(statement.Statement) (bool, error)
	}{
		{"Run", func(st statement.Statement) (bool, error) { return statement.Run(ctx, conn, nil, st) }},
		{"Direct", func(st statement.Statement) (bool, error) { return direct(t, conn, st) }},
	} {
		t.Run(via.name, func(t *testing.T) {
			if _, err := conn.ExecContext(ctx, `DELETE FROM t`); err != nil {
				t.Fatal(err)
			}
			var affected int64
			found, err := via.run(statement.Statement{Query: `INSERT INTO t VALUES (?1, ?2), (?1 || 'x', ?2)`, Args: []any{kind("a"), 7}, Affected: &affected})
			if err != nil || !found || affected != 2 {
				t.Fatalf("insert: found %v, %d affected, %v; want true, 2, nil", found, affected, err)
			}
			var n int64
			if found, err := via.run(statement.Statement{Query: `SELECT n FROM t WHERE k = ?1`, Args: []any{"ax"}, Dest: []any{&n}}); err != nil || !found || n != 7 {
				t.Fatalf("select: found %v, n %d, %v; want true, 7, nil", found, n, err)
			}
			if found, err := via.run(statement.Statement{Query: `SELECT n FROM t WHERE k = ?1`, Args: []any{"none"}, Dest: []any{&n}}); err != nil || found {
				t.Fatalf("select of no row: found %v, %v; want false, nil", found, err)
			}
			var keys []string
			found, err = via.run(statement.Statement{Query: `SELECT k FROM t ORDER BY k`, Rows: func(r statement.Rows) error {
				for r.Next() {
					var k string
					if err := r.Scan(&k); err != nil {
						return err
					}
					if err := r.Scan(&k); err != nil { // a row may be read again
						return err
					}
					keys = append(keys, k)
				}
				var k string
				if err := r.Scan(&k); err == nil {
					return fmt.Errorf("Scan after the last row read %q", k)
				}
				return nil
			}})
			if err != nil || !found || !reflect.DeepEqual(keys, []string{"a", "ax"}) {
				t.Fatalf("rows: found %v, %q, %v; want true, [a ax], nil", found, keys, err)
			}
			// abs of the smallest integer overflows, on the second row.
			rows := 0
			_, err = via.run(statement.Statement{Query: `SELECT abs(x) FROM (SELECT 1 AS x UNION ALL SELECT -9223372036854775808)`, Rows: func(r statement.Rows) error {
				for r.Next() {
					rows++
				}
				return nil
			}})
			if err == nil || rows != 1 {
				t.Fatalf("rows failing on the second: %d row(s), %v; want 1, an error", rows, err)
			}
			var a, b int64
			_, err = via.run(statement.Statement{Query: `SELECT n, k FROM t ORDER BY k`, Rows: func(r statement.Rows) error {
				if err := r.Scan(&a, &b); err == nil {
					return errors.New("Scan before Next read a row")
				}
				r.Next()
				return r.Scan(&a)
			}})
			if err == nil {
				t.Fatal("a Scan into one destination of a row of two columns succeeded")
			}
			found, err = via.run(statement.Statement{Query: `INSERT INTO t VALUES (?1, ?2)`, Args: []any{"b"}, Affected: &affected})
			if err == nil {
				t.Fatalf("an insert given one argument of two: found %v, %d affected, no error", found, affected)
			}
			var count int64
			if _, err := via.run(statement.Statement{Query: `SELECT count(*) FROM t WHERE k = 'b'`, Dest: []any{&count}}); err != nil || count != 0 {
				t.Fatalf("the insert refused for its arguments wrote %d row(s), %v", count, err)
			}
		})
	}
}

// TestDirectRunsAQueryOfSeveralStatementsAgainAndAgain: a query of two
// statements, which SQLite's driver prepares for each call and finalizes
// when its rows close, reads through Direct what it reads through Run,
// call after call: Direct closes the driver's rows once, as *sql.Rows
// does (closed twice, the statement was finalized twice, and the process
// died of a segmentation fault within a few hundred calls).
func TestDirectRunsAQueryOfSeveralStatementsAgainAndAgain(t *testing.T) {
	t.Parallel()
	conn := sqliteConn(t)
	ctx := context.Background()
	const q = `SELECT 1; SELECT 2`
	var want int64
	wantFound, werr := statement.Run(ctx, conn, nil, statement.Statement{Query: q, Dest: []any{&want}})
	for i := range 1000 {
		var n int64
		found, err := direct(t, conn, statement.Statement{Query: q, Dest: []any{&n}})
		if found != wantFound || n != want || (err == nil) != (werr == nil) {
			t.Fatalf("call %d: Direct found %v, read %d, %v; Run found %v, read %d, %v", i, found, n, err, wantFound, want, werr)
		}
	}
}
