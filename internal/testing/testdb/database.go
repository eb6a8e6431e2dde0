package testdb

import (
	"context"
	"database/sql"
	"net/url"
	"testing"
	"time"
)

// NewDatabaseDSN returns the DSN of a fresh PostgreSQL database of its own
// (not a schema in the shared one), dropped when the test ends. For tests
// of what looks at a whole database, such as rls-check following SECURITY
// DEFINER functions in every schema, which other tests' schemas would
// otherwise show up in.
func NewDatabaseDSN(t testing.TB) string {
	t.Helper()
	base := PostgresURL(t)
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	name := "rf_testdb_" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, `CREATE DATABASE `+name+` TEMPLATE template0`); err != nil {
		t.Fatalf("testdb: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, `DROP DATABASE `+name+` WITH (FORCE)`); err != nil {
			t.Errorf("testdb: drop database: %v", err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testdb: TEST_DATABASE_URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}
