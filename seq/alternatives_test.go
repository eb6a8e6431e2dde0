package seq_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testdb"
)

// The tests below show, deterministically on PostgreSQL, why seq uses none
// of the usual alternatives; bench_test.go measures them.

// TestMaxPlusOneHandsOutANumberTwice: two READ COMMITTED transactions that
// each read MAX(number)+1 before either inserts get the same number.
func TestMaxPlusOneHandsOutANumberTwice(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE invoices (scope TEXT NOT NULL, number BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	const next = `SELECT COALESCE(MAX(number), 0) + 1 FROM invoices WHERE scope = 'acme'`
	a, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback()
	b, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Rollback()
	var na, nb int64
	if err := a.QueryRowContext(ctx, next).Scan(&na); err != nil {
		t.Fatal(err)
	}
	if err := b.QueryRowContext(ctx, next).Scan(&nb); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		tx *sql.Tx
		n  int64
	}{{a, na}, {b, nb}} {
		if _, err := w.tx.ExecContext(ctx, `INSERT INTO invoices VALUES ('acme', $1)`, w.n); err != nil {
			t.Fatal(err)
		}
		if err := w.tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if na != 1 || nb != 1 {
		t.Fatalf("MAX+1 gave %d and %d; this test expects the duplicate 1 and 1", na, nb)
	}
}

// TestGlobalSequenceLeavesAGapOnRollback: a database SEQUENCE hands out a
// number that a rolled-back transaction never gives back.
func TestGlobalSequenceLeavesAGapOnRollback(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE SEQUENCE invoice_numbers`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := tx.QueryRowContext(ctx, `SELECT nextval('invoice_numbers')`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("nextval = %d, %v", n, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT nextval('invoice_numbers')`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("nextval after the rollback = %d, %v; want 2: number 1 is a gap", n, err)
	}
}
