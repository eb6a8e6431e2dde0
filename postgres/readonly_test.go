package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/postgres"
)

// TestReadOnlyNode: on a node that accepts no writes (here a database
// whose sessions are read-only by default, which answers a write with
// SQLSTATE 25006 as a hot standby does) a write is a *ReadOnlyError that
// matches ErrReadOnly and ErrUnavailable, in a transaction and out of
// one; reads work; CheckWritable says why. The connection that met the
// refusal is dropped: once new sessions are writable again (a failover,
// which a multi-host DSN with target_session_attrs=read-write follows by
// connecting anew), the next write on the same one-connection pool
// succeeds on a new backend instead of meeting the read-only one again.
func TestReadOnlyNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.NewPostgresDatabase(t)
	setup := testdb.Open(t, dsn, nil)
	if _, err := setup.ExecContext(ctx, `CREATE TABLE rf_ro (x int)`); err != nil {
		t.Fatal(err)
	}
	if err := setup.CheckWritable(ctx); err != nil {
		t.Fatalf("a writable node: CheckWritable = %v", err)
	}
	_ = setup.Close()
	testdb.SetReadOnly(t, dsn, true)

	db, err := postgres.Open(ctx, dsn, &racefree.Config{MaxOpenConns: 1})
	if err != nil {
		t.Fatalf("open a read-only node: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	var ro *racefree.ReadOnlyError
	if err := db.CheckWritable(ctx); !errors.As(err, &ro) || !strings.Contains(ro.Reason, "transaction_read_only") {
		t.Fatalf("CheckWritable on a read-only node = %v, want a *ReadOnlyError naming transaction_read_only", err)
	}
	pid := func() int {
		t.Helper()
		p := testdb.BackendPID(t, db)
		return p
	}
	before := pid()
	_, err = db.ExecContext(ctx, `INSERT INTO rf_ro VALUES (1)`)
	err = wire.Of(db).InterpretError(err)
	if !errors.As(err, &ro) || !errors.Is(err, racefree.ErrReadOnly) || !errors.Is(err, racefree.ErrUnavailable) {
		t.Fatalf("a write on a read-only node = %v, want a *ReadOnlyError (ErrReadOnly, ErrUnavailable)", err)
	}
	err = db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO rf_ro VALUES (2)`)
		return err
	})
	if !errors.Is(err, racefree.ErrReadOnly) {
		t.Fatalf("a write in a transaction on a read-only node = %v, want ErrReadOnly", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM rf_ro`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a read on a read-only node: %d, %v", n, err)
	}
	if p := pid(); p == before {
		t.Fatalf("the connection that met 25006 (backend %d) is still in the pool", p)
	}

	// The node becomes writable for new sessions: the next write must
	// not meet a kept read-only connection.
	before = pid()
	_, err = db.ExecContext(ctx, `INSERT INTO rf_ro VALUES (3)`)
	if !errors.Is(wire.Of(db).InterpretError(err), racefree.ErrReadOnly) {
		t.Fatalf("write before the switch = %v, want ErrReadOnly", err)
	}
	testdb.SetReadOnly(t, dsn, false)
	if _, err := db.ExecContext(ctx, `INSERT INTO rf_ro VALUES (4)`); err != nil {
		t.Fatalf("a write once new sessions are writable = %v: the pool kept the read-only connection", err)
	}
	if p := pid(); p == before {
		t.Fatalf("backend %d, which refused a write, served again", p)
	}
	if err := db.CheckWritable(ctx); err != nil {
		t.Fatalf("CheckWritable once writable = %v", err)
	}
}

// TestInterpretErrorReadOnly: SQLSTATE 25006 raised by any statement is
// a *ReadOnlyError, not a plain error.
func TestInterpretErrorReadOnly(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	_, err := db.ExecContext(context.Background(), `DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '25006'; END $$`)
	var ro *racefree.ReadOnlyError
	if err = wire.Of(db).InterpretError(err); !errors.As(err, &ro) || !errors.Is(err, racefree.ErrUnavailable) {
		t.Fatalf("25006: got %v", err)
	}
}
