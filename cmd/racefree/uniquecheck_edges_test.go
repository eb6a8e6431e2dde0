package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestUniqueCheckEdgesCancelled proves that a cancelled unique-check (an
// interrupted deploy gate) exits 2 with nothing on stdout, with --table
// and with a --migration of two checks, never 0 with the checks it did.
func TestUniqueCheckEdgesCancelled(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		db := testdb.Open(t, dsn, nil)
		if _, err := db.ExecContext(context.Background(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`); err != nil {
			t.Fatal(err)
		}
		mig := filepath.Join(t.TempDir(), "043.sql")
		write(t, mig, "CREATE UNIQUE INDEX users_email ON users (email);\nCREATE UNIQUE INDEX users_lower ON users (lower(email));\n")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for _, args := range [][]string{
			{"--table", "users", "--key", "email"},
			{"--migration", mig},
			{"--migration", mig, "--format", "json"},
		} {
			r := runUniqueCheckCtx(ctx, append([]string{"--db", dsn}, args...)...)
			if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "context canceled") {
				t.Errorf("%v, cancelled: exit %d, stdout %q, stderr %q; want exit 2, no report", args, r.code, r.stdout, r.stderr)
			}
		}
	})
}

// TestUniqueCheckEdgesTimeout proves --timeout: a check slower than it
// ends with exit 2 and the time-out, well before the test's own deadline;
// without it the default of 60s applies, which a fast check never meets.
func TestUniqueCheckEdgesTimeout(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		db := testdb.Open(t, dsn, nil)
		if _, err := db.ExecContext(context.Background(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(context.Background(), `INSERT INTO users VALUES (1, 'a'), (2, 'a')`); err != nil {
			t.Fatal(err)
		}
		var from []string
		for i := 0; i < 32; i++ {
			from = append(from, fmt.Sprintf("users u%d", i))
		}
		slow := "(SELECT count(*) FROM " + strings.Join(from, ", ") + ")"
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r := runUniqueCheckCtx(ctx, "--db", dsn, "--table", "users", "--key", slow, "--timeout", "200ms")
		if r.code != 2 || !strings.Contains(r.stderr, "timed out after 200ms") || ctx.Err() != nil {
			t.Fatalf("--timeout 200ms: exit %d, stderr %q (the test's deadline passed: %v)", r.code, r.stderr, ctx.Err() != nil)
		}
		if r := runUniqueCheck(t, "--db", dsn, "--table", "users", "--key", "email"); r.code != 1 {
			t.Fatalf("default --timeout: exit %d, %s", r.code, r.stderr)
		}
	})
}

// TestUniqueCheckEdgesNullsNotDistinct proves --nulls-not-distinct reaches
// the check: rows whose keys are NULL alike are duplicates with it (exit
// 1) and not without it (exit 0), as the two kinds of index see them
// (PostgreSQL 15 and later; SQLite refuses the flag, exit 2).
func TestUniqueCheckEdgesNullsNotDistinct(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		db := testdb.Open(t, dsn, nil)
		if _, err := db.ExecContext(context.Background(), `CREATE TABLE users (id INTEGER PRIMARY KEY, org INTEGER, email TEXT)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(context.Background(), `INSERT INTO users VALUES (1, 1, NULL), (2, 1, NULL), (3, 1, 'a')`); err != nil {
			t.Fatal(err)
		}
		args := []string{"--db", dsn, "--table", "users", "--key", "org", "--key", "email"}
		if r := runUniqueCheck(t, args...); r.code != 0 {
			t.Fatalf("without --nulls-not-distinct: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		r := runUniqueCheck(t, append(args, "--nulls-not-distinct")...)
		if db.Engine() == racefree.SQLite {
			if r.code != 2 {
				t.Fatalf("SQLite --nulls-not-distinct: exit %d, want 2", r.code)
			}
			return
		}
		if r.code != 1 || !strings.Contains(r.stdout, "NULLS NOT DISTINCT") || !strings.Contains(r.stdout, "1 duplicate groups, 1 surplus rows") {
			t.Fatalf("--nulls-not-distinct: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
}

// TestUniqueCheckEdgesMigrationItCannotCheck proves that --migration exits
// 2 on a unique index over rows the migration copies into a table it
// creates, which the check cannot see, and exits 1 on an added generated
// UNIQUE column (PostgreSQL) whose expression collides: neither is "no
// duplicates".
func TestUniqueCheckEdgesMigrationItCannotCheck(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		db := testdb.Open(t, dsn, nil)
		if _, err := db.ExecContext(context.Background(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(context.Background(), `INSERT INTO users VALUES (1, 'a'), (2, 'A')`); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		mig := filepath.Join(dir, "044.sql")
		write(t, mig, "CREATE TABLE users_new (id INTEGER PRIMARY KEY, email TEXT);\nINSERT INTO users_new SELECT * FROM users;\nCREATE UNIQUE INDEX users_new_email ON users_new (lower(email));\n")
		if r := runUniqueCheck(t, "--db", dsn, "--migration", mig); r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "cannot see") {
			t.Fatalf("copy, then index: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if db.Engine() != racefree.Postgres {
			return
		}
		gen := filepath.Join(dir, "045.sql")
		write(t, gen, "ALTER TABLE users ADD COLUMN email_key text GENERATED ALWAYS AS (lower(email)) STORED UNIQUE;\n")
		if r := runUniqueCheck(t, "--db", dsn, "--migration", gen); r.code != 1 || !strings.Contains(r.stdout, "1 duplicate groups") {
			t.Fatalf("generated column: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
}

// TestUniqueCheckEdgesNullKeysUnderNotNull proves that a key with a NULL
// fails the gate where NOT NULL comes with the index: --not-null on both
// engines, and on PostgreSQL a migration's ADD PRIMARY KEY and an added
// PRIMARY KEY column without a DEFAULT, each exit 1 naming the rows (the
// engine refuses both), where "no duplicates" would pass the deploy;
// --not-null beside --migration is bad input (exit 2).
func TestUniqueCheckEdgesNullKeysUnderNotNull(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		db := testdb.Open(t, dsn, nil)
		if _, err := db.ExecContext(context.Background(), `CREATE TABLE users (id INTEGER NOT NULL, email TEXT); INSERT INTO users VALUES (1, NULL), (2, 'a')`); err != nil {
			t.Fatal(err)
		}
		args := []string{"--db", dsn, "--table", "users", "--key", "email"}
		if r := runUniqueCheck(t, args...); r.code != 0 {
			t.Fatalf("without --not-null: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if r := runUniqueCheck(t, append(args, "--not-null")...); r.code != 1 || !strings.Contains(r.stdout, "1 rows with a NULL key") || !strings.Contains(r.stderr, "NULL keys") {
			t.Fatalf("--not-null: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		dir := t.TempDir()
		mig := filepath.Join(dir, "m.sql")
		if r := runUniqueCheck(t, "--db", dsn, "--migration", mig, "--not-null"); r.code != 2 {
			t.Fatalf("--not-null beside --migration: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if db.Engine() != racefree.Postgres {
			return
		}
		for _, stmt := range []string{`ALTER TABLE users ADD PRIMARY KEY (email)`, `ALTER TABLE users ADD COLUMN k int PRIMARY KEY`} {
			if err := os.WriteFile(mig, []byte(stmt+";\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			r := runUniqueCheck(t, "--db", dsn, "--migration", mig)
			if r.code != 1 || !strings.Contains(r.stdout, "rows with a NULL key") || !strings.Contains(r.stdout, "NOT NULL") {
				t.Fatalf("%s: exit %d\n%s%s", stmt, r.code, r.stdout, r.stderr)
			}
			tx, err := db.SQL().Begin()
			if err != nil {
				t.Fatal(err)
			}
			_, err = tx.Exec(stmt)
			_ = tx.Rollback()
			if err == nil {
				t.Fatalf("%s: the engine built it", stmt)
			}
		}
	})
}
