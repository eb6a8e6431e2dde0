package uniquecheck_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/uniquecheck"
)

// TestOutsideEveryKeyIsValidated proves that each key expression of a
// spec is refused as an InputError when it holds ';' or a block comment,
// the last of several as well as the first, before anything reaches the
// engine.
func TestOutsideEveryKeyIsValidated(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT, name TEXT)`)
		for _, keys := range [][]string{
			{"email", "name); DROP TABLE users; --"},
			{"email", "name /* x"},
			{"email", "name", "lower(name) */"},
		} {
			_, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "users", Keys: keys})
			if !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("keys %q: %v, want an InputError", keys, err)
			}
		}
	})
}

// TestOutsideIfNotExistsStillWarnsOfAnExistingIndex proves that a spec
// created IF NOT EXISTS is still looked up among the existing indexes: an
// index of its name, which IF NOT EXISTS would skip over silently, is
// warned about beside the IF NOT EXISTS warning.
func TestOutsideIfNotExistsStillWarnsOfAnExistingIndex(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		exec(t, db.SQL(), `CREATE INDEX users_email ON users (email)`)
		rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}, IndexName: "users_email", IfNotExists: true})
		if err != nil {
			t.Fatal(err)
		}
		w := strings.Join(rep.Warnings, "\n")
		if !strings.Contains(w, "IF NOT EXISTS: if an index named") || !strings.Contains(w, `index "users_email" already exists: the migration`) {
			t.Fatalf("warnings %q: want the IF NOT EXISTS warning and that users_email already exists", rep.Warnings)
		}
	})
}

// TestOutsideCleanReportHasEmptyListsInJSON proves that a report with no
// duplicates, no notes and no warnings writes "groups": [] and
// "warnings": [] in its JSON line, never null.
func TestOutsideCleanReportHasEmptyListsInJSON(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a'), (2, 'b')`)
		rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := uniquecheck.WriteJSON(&b, []*uniquecheck.Report{rep, rep.Masked()}); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
			if !strings.Contains(line, `"groups":[]`) || !strings.Contains(line, `"warnings":[]`) {
				t.Errorf("JSON %s: want \"groups\":[] and \"warnings\":[]", line)
			}
		}
	})
}

// TestOutsideCancelledCheckIsNoTimeout proves that a check the caller
// cancelled returns the context's error, context.Canceled, and does not
// say it timed out: only the check's own timeout is reported as one.
func TestOutsideCancelledCheckIsNoTimeout(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		rep, err := uniquecheck.Check(ctx, db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}})
		if rep != nil || !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "timed out") {
			t.Fatalf("cancelled check: %v, %v; want context.Canceled, not a timeout", rep, err)
		}
	})
}

// TestOutsideThePrimaryKeyInItsDeclaredOrder proves that a report names
// a table's rows by its primary key alone, in the order the key declares
// its columns: PRIMARY KEY (b, a) on columns declared a, b lists [b, a]
// pairs, ascending by b then a; and a UNIQUE column beside the primary
// key is no part of it.
func TestOutsideThePrimaryKeyInItsDeclaredOrder(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE pairs (a INTEGER NOT NULL, b INTEGER NOT NULL, v TEXT, PRIMARY KEY (b, a))`)
		exec(t, db.SQL(), `INSERT INTO pairs VALUES (1, 2, 'x'), (2, 1, 'x'), (3, 0, 'x'), (4, 5, 'y'), (5, 4, 'y')`)
		exec(t, db.SQL(), `CREATE TABLE coded (id INTEGER PRIMARY KEY, code TEXT UNIQUE, v TEXT)`)
		exec(t, db.SQL(), `INSERT INTO coded VALUES (3, 'c', 'x'), (1, 'a', 'x'), (2, 'b', 'y')`)
		for _, c := range []struct{ table, pk, want string }{
			{"pairs", `["b" "a"]`, "x 3 [[0,3] [1,2] [2,1]]; y 2 [[4,5] [5,4]]"},
			{"coded", `["id"]`, "x 2 [1 3]"},
		} {
			rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: c.table, Keys: []string{"v"}})
			if err != nil {
				t.Fatalf("%s: %v", c.table, err)
			}
			if pk := fmt.Sprintf("%q", rep.PrimaryKey); pk != c.pk {
				t.Errorf("%s: primary key %s, want %s", c.table, pk, c.pk)
			}
			if got := groupsText(t, rep); got != c.want {
				t.Errorf("%s: groups %s, want %s", c.table, got, c.want)
			}
		}
	})
}

// TestOutsideDedupeScriptLocksBeforeItReads proves that the dedupe
// script's first statements take the table's write lock: once they have
// run on one connection, another cannot start writing (SQLite: its BEGIN
// IMMEDIATE is refused as busy at once; PostgreSQL: the table is held in
// SHARE ROW EXCLUSIVE mode, as pg_locks shows).
func TestOutsideDedupeScriptLocksBeforeItReads(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT, created_at BIGINT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a', 1), (2, 'a', 2)`)
		rep, err := uniquecheck.Check(ctx, db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}})
		if err != nil {
			t.Fatal(err)
		}
		script, err := uniquecheck.DedupeSQL(db.Engine(), rep, uniquecheck.KeepMinID, "")
		if err != nil {
			t.Fatal(err)
		}
		// The statements before the archive table is created.
		var lock []string
		for _, stmt := range strings.SplitAfter(script, ";\n") {
			if strings.Contains(stmt, "CREATE TABLE") {
				break
			}
			lock = append(lock, stmt)
		}
		c1, err := db.SQL().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close()
		testdb.ExecAll(t, c1, lock...)
		defer func() {
			if _, err := c1.ExecContext(ctx, `ROLLBACK`); err != nil {
				t.Error(err)
			}
		}()
		if db.Engine() == racefree.Postgres {
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE relation = 'users'::regclass AND mode = 'ShareRowExclusiveLock' AND granted`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Fatalf("after %q: %d SHARE ROW EXCLUSIVE locks on users, want 1", lock, n)
			}
			return
		}
		c2, err := db.SQL().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		var busy int
		if err := c2.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil {
			t.Fatal(err)
		}
		testdb.ExecAll(t, c2, `PRAGMA busy_timeout = 0`)
		defer testdb.ExecAll(t, c2, fmt.Sprintf(`PRAGMA busy_timeout = %d`, busy))
		if _, err := c2.ExecContext(ctx, `BEGIN IMMEDIATE`); err == nil {
			testdb.ExecAll(t, c2, `ROLLBACK`)
			t.Fatalf("after %q, another connection began writing: the script holds no write lock", lock)
		}
	})
}

// TestOutsideMigrationKeysAsWritten proves that FromMigration reads each
// key as the file means it: in a statement written in lower case too
// ("on items (…)"), NULLS FIRST and NULLS LAST are no part of it (nor
// DESC before them), and a constraint's quoted column names stay
// quoted (a capital, a reserved word), so that the check reads those
// columns. Each spec is checked on the engine.
func TestOutsideMigrationKeysAsWritten(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE items (id INTEGER PRIMARY KEY, a TEXT, b TEXT, "Email" TEXT, "order" INTEGER)`)
		exec(t, db.SQL(), `INSERT INTO items VALUES (1, 'x', 'y', 'e', 1), (2, 'x', 'y', 'e', 1)`)
		for _, c := range []struct {
			file string
			keys []string
		}{
			{"CREATE UNIQUE INDEX n1 ON items (a NULLS LAST, b DESC NULLS FIRST);\n", []string{"a", "b"}},
			{"create unique index n2 on items (lower(a), b);\n", []string{"lower(a)", "b"}},
			{`ALTER TABLE items ADD CONSTRAINT q1 UNIQUE ("Email", "order");` + "\n", []string{`"Email"`, `"order"`}},
		} {
			specs, _, err := uniquecheck.FromMigration(db.Engine(), c.file)
			if err != nil {
				t.Fatalf("%s: %v", c.file, err)
			}
			if len(specs) != 1 || fmt.Sprintf("%q", specs[0].Keys) != fmt.Sprintf("%q", c.keys) {
				t.Fatalf("%s: specs %+v, want one with keys %q", c.file, specs, c.keys)
			}
			rep, err := uniquecheck.Check(context.Background(), db, specs[0])
			if err != nil || rep.DuplicateGroups != 1 {
				t.Fatalf("%s: check %+v, %v; want one duplicate group", c.file, rep, err)
			}
		}
	})
}

// TestOutsideSQLiteMainSchemaIsTheDefault proves that on SQLite a
// statement on main.t and a unique index on t (or the other way round)
// are on one table: an earlier UPDATE is a note of the spec, a table
// created there has nothing to check, and CREATE UNIQUE INDEX IF NOT
// EXISTS main.i ON t is read as SQLite builds it, on main.t.
func TestOutsideSQLiteMainSchemaIsTheDefault(t *testing.T) {
	t.Parallel()
	specs, warns, err := uniquecheck.FromMigration(racefree.SQLite, "UPDATE main.users SET email = lower(email);\nCREATE UNIQUE INDEX u1 ON users (email);\nUPDATE users SET name = upper(name);\nCREATE UNIQUE INDEX u2 ON main.users (name);\nCREATE TABLE main.fresh (id INTEGER, k TEXT);\nCREATE UNIQUE INDEX u3 ON fresh (k);\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || !strings.Contains(strings.Join(specs[0].Notes, "\n"), "line 1 updates email") || !strings.Contains(strings.Join(specs[1].Notes, "\n"), "line 3 updates name") {
		t.Fatalf("specs %+v: want u1 and u2, each with the note of its UPDATE", specs)
	}
	if len(warns) != 1 || !strings.Contains(warns[0].Message, "has no rows yet") {
		t.Fatalf("warnings %v: want that fresh has no rows yet", warns)
	}
	specs, _, err = uniquecheck.FromMigration(racefree.SQLite, "CREATE UNIQUE INDEX IF NOT EXISTS main.u4 ON users (email);\n")
	if err != nil || len(specs) != 1 || specs[0].Table != `"main"."users"` || specs[0].IndexName != "u4" || !specs[0].IfNotExists {
		t.Fatalf("IF NOT EXISTS main.u4: %+v, %v; want u4 on main.users, IF NOT EXISTS", specs, err)
	}
}

// TestOutsideUnionCopyIntoACreatedTable proves that a table the migration
// creates and fills with existing rows through a UNION (INSERT … SELECT …
// FROM a UNION SELECT … FROM b) is a copy like any other: a unique index
// on it then is an InputError, never "nothing to check".
func TestOutsideUnionCopyIntoACreatedTable(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{racefree.SQLite, racefree.Postgres} {
		_, _, err := uniquecheck.FromMigration(engine, "CREATE TABLE merged (id INTEGER, email TEXT);\nINSERT INTO merged SELECT id, email FROM a UNION ALL SELECT id, email FROM b;\nCREATE UNIQUE INDEX m1 ON merged (email);\n")
		if !errors.Is(err, racefree.ErrInvalidInput) || !strings.Contains(err.Error(), "filled with existing rows") {
			t.Errorf("%s: %v; want an InputError that merged is filled with existing rows", engine, err)
		}
	}
}

// TestOutsideMaskedLeavesTheReport proves that Masked masks a copy: the
// report it was called on keeps its values, and Mask gives the length of
// a value in bytes (é is two).
func TestOutsideMaskedLeavesTheReport(t *testing.T) {
	t.Parallel()
	v := "é"
	rep := &uniquecheck.Report{Groups: []uniquecheck.Group{{Values: []*string{&v, nil}, Count: 2}}}
	m := rep.Masked()
	if got := rep.Groups[0].Values[0]; got == nil || *got != "é" {
		t.Fatalf("after Masked the report's value is %v, want é", got)
	}
	if got := *m.Groups[0].Values[0]; !strings.HasPrefix(got, "sha256:") || !strings.HasSuffix(got, " len=2") || m.Groups[0].Values[1] != nil {
		t.Fatalf("masked values %q, %v: want sha256:… len=2 and nil", got, m.Groups[0].Values[1])
	}
}

// TestOutsideTextNoMoreWhenEveryKeyIsListed proves that the text report
// says "… N more (--max-keys)" after a group only when keys are left
// out: a group whose primary keys are all listed has no such line.
func TestOutsideTextNoMoreWhenEveryKeyIsListed(t *testing.T) {
	t.Parallel()
	a := "a"
	rep := &uniquecheck.Report{Table: "users", Keys: []string{"email"}, PrimaryKey: []string{"id"}, DuplicateGroups: 1, SurplusRows: 1,
		Groups: []uniquecheck.Group{{Values: []*string{&a}, Count: 2, PrimaryKeys: []json.RawMessage{json.RawMessage("1"), json.RawMessage("2")}}}}
	var b bytes.Buffer
	if err := uniquecheck.WriteText(&b, []*uniquecheck.Report{rep}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "more (--max-keys)") {
		t.Fatalf("text:\n%s\nwant no \"more (--max-keys)\" for a group whose keys are all listed", b.String())
	}
}
