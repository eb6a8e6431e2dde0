package seq_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/seq"
)

// The tests below show, deterministically on PostgreSQL, why seq uses none
// of the usual alternatives, and that seq, in the same sequence of events,
// has neither flaw; bench_test.go measures them.

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

	// seq in the same interleaving: b increments while a holds the counter
	// uncommitted; b waits for a's row lock and, once a commits, gets the
	// number after a's, never the one b's snapshot would suggest.
	c := seq.New(db)
	if n, err := c.Next(ctx, db, "acme", "invoice"); err != nil || n != 1 {
		t.Fatalf("first Next = %d, %v", n, err)
	}
	a, err = db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback()
	if n, err := c.Next(ctx, a, "acme", "invoice"); err != nil || n != 2 {
		t.Fatalf("a's Next = %d, %v; want 2", n, err)
	}
	b, err = db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Rollback()
	done := make(chan struct{})
	go func() {
		defer close(done)
		nb, err = c.Next(ctx, b, "acme", "invoice")
	}()
	if !testdb.BlockedBy(t, db, backendPID(t, a), done) {
		t.Fatalf("b's Next did not wait for a's uncommitted increment: %d, %v", nb, err)
	}
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	<-done
	if err != nil || nb != 3 {
		t.Fatalf("b's Next behind a's = %d, %v; want 3", nb, err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
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

	// seq in the same sequence of events: the rolled-back number is handed
	// out again.
	c := seq.New(db)
	tx, err = db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.Next(ctx, tx, "acme", "invoice"); err != nil || n != 1 {
		t.Fatalf("Next in the doomed transaction = %d, %v; want 1", n, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Next(ctx, db, "acme", "invoice"); err != nil || n != 1 {
		t.Fatalf("Next after the rollback = %d, %v; want 1 again, no gap", n, err)
	}
}
