package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// NewPostgresDatabase returns the DSN of a PostgreSQL database of its own
// on the server named by TEST_DATABASE_URL, for a test that changes a
// setting of the whole database (SetReadOnly), the test's alone until it
// ends. The database is empty, its settings reset: Open migrates it (a
// database of the pool NewDatabaseDSN takes from).
func NewPostgresDatabase(t testing.TB) string {
	t.Helper()
	return poolDatabase(t)
}

// SetReadOnly makes the sessions that connect to the database of dsn (one
// NewPostgresDatabase made) from now on read-only (on) or read-write
// (off): ALTER DATABASE … SET default_transaction_read_only. In such a
// session a write fails with SQLSTATE 25006 (read_only_sql_transaction)
// and reads work, as on a hot standby; sessions already open keep what
// they had.
func SetReadOnly(t testing.TB, dsn string, on bool) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if !strings.HasPrefix(name, poolPrefix) {
		t.Fatalf("testdb: SetReadOnly is for a database of NewPostgresDatabase, not %q", name)
	}
	value := "off"
	if on {
		value = "on"
	}
	admin(t, PostgresURL(t), `ALTER DATABASE `+name+` SET default_transaction_read_only = `+value)
}

// admin runs stmt on the server of base, through a connection of its own.
func admin(t testing.TB, base, stmt string) {
	t.Helper()
	if err := adminExec(base, stmt, 3*time.Minute); err != nil {
		t.Fatalf("testdb: %v", err)
	}
}

func adminExec(base, stmt string, timeout time.Duration) error {
	db, err := sql.Open("pgx", base)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	return nil
}
