package schema_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/schema"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// outdated opens a database one migration behind the code, in
// compatible mode, with cfg's pool, and returns it with the code's
// version.
func outdated(t *testing.T, d string, maxConns int) (*racefree.DB, int64) {
	t.Helper()
	db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated, MaxOpenConns: maxConns})
	want, err := db.CodeVersion()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.MigrateUpTo(context.Background(), want-1); err != nil {
		t.Fatal(err)
	}
	return db, want
}

// TestEdgesNeedInTheCallersTransactionOnAPoolOfOne holds the edge of a
// caller that holds the pool's only connection in its transaction:
// Need, asked for a migration the schema lacks, reads through the
// caller's transaction both whether it is applied and the version it
// reports, and answers at once with a *SchemaError (ErrSchemaOutdated)
// naming the version the database is at, on both engines; it never
// waits for the connection the caller's own transaction holds.
func TestEdgesNeedInTheCallersTransactionOnAPoolOfOne(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		db, want := outdated(t, d, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var got error
		if err := db.InTx(ctx, func(tx *sql.Tx) error {
			got = schema.Need(ctx, db, tx, want)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var se *racefree.SchemaError
		if !errors.As(got, &se) || !errors.Is(got, racefree.ErrSchemaOutdated) || se.Have != want-1 || se.Want != want {
			t.Fatalf("Need(%d) at version %d in the caller's transaction on a pool of one: %v; want a *SchemaError{Have: %d, Want: %d}", want, want-1, got, want-1, want)
		}
		if err := schema.Need(ctx, db, db, want-1); err != nil {
			t.Fatalf("Need(%d) at version %d: %v, want nil", want-1, want-1, err)
		}
	})
}

// TestEdgesNeedReadFailureIsInterpreted holds the edge of a read of the
// schema version that fails: on PostgreSQL a backend terminated under
// the caller's transaction makes Need's read fail with SQLSTATE 57P01,
// which Need returns after the engine's InterpretError, ErrUnavailable
// (503, try again), never the driver's error alone (a 500). SQLite has
// no such failure to inject: its reads fail only with their caller.
func TestEdgesNeedReadFailureIsInterpreted(t *testing.T) {
	t.Parallel()
	db, want := outdated(t, testdb.NewDSN(t, racefree.Postgres), 0)
	ctx := context.Background()
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	pid := testdb.BackendPID(t, tx)
	if _, err := db.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d still runs 30 s after its termination", pid)
		}
		time.Sleep(2 * time.Millisecond) // polls the server's state
	}
	err = schema.Need(ctx, db, tx, want)
	if err == nil || !errors.Is(err, racefree.ErrUnavailable) {
		t.Fatalf("Need through a transaction whose backend was terminated: %v; want ErrUnavailable", err)
	}
}
