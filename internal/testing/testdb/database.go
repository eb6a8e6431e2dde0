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

// NewDatabaseDSN returns the DSN of a PostgreSQL database of its own (not
// a schema in the shared one), for the test alone until it ends. For tests
// of what looks at a whole database, such as rls-check following SECURITY
// DEFINER functions in every schema, which other tests' schemas would
// otherwise show up in. The database is as fresh as a copy of template0
// for what a test can make in it (see [poolDatabase]).
func NewDatabaseDSN(t testing.TB) string {
	t.Helper()
	return poolDatabase(t)
}

// poolPrefix names the databases of the pool: rf_testdb_pool_0, _1, …
const poolPrefix = "rf_testdb_pool_"

// poolLockClass is the first key of the advisory locks that claim the
// pool's databases (the second is the database's number).
const poolLockClass = 0x72667462 // "rftb"

// poolDatabase claims a database of the pool for t until it ends, and
// returns its DSN.
//
// Dropping a database makes PostgreSQL (15) take a checkpoint and wait for
// it: on a server that every package's tests write to at once, seconds to
// minutes each, for every test that wanted a database of its own. So the
// databases are kept and handed out again: a test holds database N while
// it holds the session-level advisory lock (poolLockClass, N) on a
// connection of its own (a test process that dies loses it with its
// session), and the next holder empties the database before it gets it:
// the sessions still on it are ended, its settings (ALTER DATABASE … SET)
// reset, every schema but PostgreSQL's own dropped with all it holds, and
// public made again as template0 has it. Anything a schema does not hold
// (an event trigger, a publication, a foreign server, a large object,
// default privileges, a cast, a language or an extension of its own) makes
// it drop and create the database instead, so a database is either as
// fresh as a new one or new. The databases stay on the server, empty or
// with the last holder's objects, for the next test run.
func poolDatabase(t testing.TB) string {
	t.Helper()
	base := PostgresURL(t)
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lock, err := admin.Conn(ctx)
	if err != nil {
		_ = admin.Close()
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() {
		_ = lock.Close() // ends the session, and with it the advisory lock
		_ = admin.Close()
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testdb: TEST_DATABASE_URL: %v", err)
	}
	for n := 0; ; n++ {
		var got bool
		if err := lock.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1, $2)`, poolLockClass, n).Scan(&got); err != nil {
			t.Fatalf("testdb: claiming a pooled database: %v", err)
		}
		if !got {
			continue
		}
		name := fmt.Sprintf("%s%d", poolPrefix, n)
		u.Path = "/" + name
		if err := freshen(ctx, lock, u.String(), name); err != nil {
			t.Fatalf("testdb: pooled database %s: %v", name, err)
		}
		return u.String()
	}
}

// freshen makes the database name (at dsn) as fresh as a new copy of
// template0, creating it if it does not exist; admin is a session on
// another database of the server.
func freshen(ctx context.Context, admin *sql.Conn, dsn, name string) error {
	create := func() error {
		_, err := admin.ExecContext(ctx, `CREATE DATABASE `+name+` TEMPLATE template0`)
		return err
	}
	var exists bool
	if err := admin.QueryRowContext(ctx, `SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return create()
	}
	if _, err := admin.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name); err != nil {
		return err
	}
	if _, err := admin.ExecContext(ctx, `ALTER DATABASE `+name+` RESET ALL`); err != nil {
		return err
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	clean, err := empty(ctx, db)
	_ = db.Close()
	if err != nil || clean {
		return err
	}
	// Something outside the schemas is left: a new database instead.
	if _, err := admin.ExecContext(ctx, `DROP DATABASE `+name+` WITH (FORCE)`); err != nil {
		return err
	}
	return create()
}

// empty drops every schema of db but PostgreSQL's own, makes public again
// as template0 has it, and reports whether the database is then as a new
// one: nothing left outside the schemas.
func empty(ctx context.Context, db *sql.DB) (bool, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, `SELECT quote_ident(nspname) FROM pg_namespace WHERE nspname NOT LIKE 'pg\_%' AND nspname <> 'information_schema'`)
	if err != nil {
		return false, err
	}
	var schemas []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return false, err
		}
		schemas = append(schemas, s)
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	stmt := `CREATE SCHEMA public AUTHORIZATION pg_database_owner;
GRANT USAGE ON SCHEMA public TO PUBLIC;
COMMENT ON SCHEMA public IS 'standard public schema';`
	if len(schemas) > 0 {
		stmt = `DROP SCHEMA ` + strings.Join(schemas, ", ") + ` CASCADE; ` + stmt
	}
	if _, err := conn.ExecContext(ctx, stmt); err != nil {
		return false, err
	}
	// 16384 is FirstNormalObjectId: what initdb made has lower OIDs.
	var left int
	err = conn.QueryRowContext(ctx, `SELECT
  (SELECT count(*) FROM pg_event_trigger)
+ (SELECT count(*) FROM pg_publication)
+ (SELECT count(*) FROM pg_foreign_data_wrapper)
+ (SELECT count(*) FROM pg_foreign_server)
+ (SELECT count(*) FROM pg_largeobject_metadata)
+ (SELECT count(*) FROM pg_default_acl)
+ (SELECT count(*) FROM pg_cast WHERE oid >= 16384)
+ (SELECT count(*) FROM pg_language WHERE oid >= 16384)
+ (SELECT count(*) FROM pg_extension WHERE oid >= 16384)`).Scan(&left)
	return left == 0, err
}
