package uniquecheck_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/uniquecheck"
)

// TestOutsideBlankOrNULExpressionIsInput proves that a key or predicate
// of blanks only, or one holding a NUL byte anywhere (the first byte
// too), is refused as an InputError before anything reaches the engine,
// not returned as the engine's syntax error.
func TestOutsideBlankOrNULExpressionIsInput(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		for _, s := range []uniquecheck.Spec{
			{Table: "users", Keys: []string{"   "}},
			{Table: "users", Keys: []string{"email", "\t\n"}},
			{Table: "users", Keys: []string{"email"}, Where: "  "},
			{Table: "users", Keys: []string{"\x00email"}},
			{Table: "users", Keys: []string{"email\x00"}},
			{Table: "users", Keys: []string{"email"}, Where: "\x00email IS NULL"},
		} {
			if rep, err := uniquecheck.Check(context.Background(), db, s); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("keys %q where %q: %+v, %v; want an InputError", s.Keys, s.Where, rep, err)
			}
		}
	})
}

// TestOutsideCloseClosesOnlyWhatOpenMade proves that Close of a Checker
// made by New leaves the caller's pool open (the application keeps
// using it), and that Close of one made by Open closes the pool Open
// made: a check after it fails, on both engines.
func TestOutsideCloseClosesOnlyWhatOpenMade(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsnStr string) {
		ctx := context.Background()
		db := testdb.Open(t, dsnStr, nil)
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a'), (2, 'a')`)
		spec := uniquecheck.Spec{Table: "users", Keys: []string{"email"}}

		c, err := uniquecheck.New(db.Engine(), db.SQL())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := db.SQL().PingContext(ctx); err != nil {
			t.Fatalf("the caller's pool after Close of New's checker: %v", err)
		}
		if rep, err := c.Check(ctx, spec); err != nil || rep.DuplicateGroups != 1 {
			t.Fatalf("a check on the caller's pool after Close: %+v, %v; want one group", rep, err)
		}

		o, err := uniquecheck.Open(dsnStr)
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := o.Check(ctx, spec); err != nil || rep.DuplicateGroups != 1 {
			_ = o.Close()
			t.Fatalf("a check through Open: %+v, %v; want one group", rep, err)
		}
		if err := o.Close(); err != nil {
			t.Fatal(err)
		}
		if rep, err := o.Check(ctx, spec); err == nil {
			t.Fatalf("a check after Close of Open's checker ran: %+v; want the pool closed", rep)
		}
	})
}

// TestOutsideOpenRefusesADirectory proves that Open of a SQLite DSN that
// names a directory fails at once, as no such database file, rather than
// at the first check.
func TestOutsideOpenRefusesADirectory(t *testing.T) {
	t.Parallel()
	c, err := uniquecheck.Open("sqlite:" + t.TempDir())
	if err == nil {
		_ = c.Close()
		t.Fatal("Open of a directory succeeded")
	}
	if !strings.Contains(err.Error(), "no such database file") {
		t.Fatalf("Open of a directory: %v; want no such database file", err)
	}
}

// TestOutsideReportEchoesItsSpec proves that a report carries its spec's
// source, the table as SQL (quoted), its keys, predicate and NULL
// semantics, in its fields and in its JSON line.
func TestOutsideReportEchoesItsSpec(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, org INTEGER, email TEXT, deleted_at BIGINT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 1, 'a', NULL), (2, 1, 'A', NULL), (3, 1, 'a', 5)`)
		spec := uniquecheck.Spec{Table: "Users", Keys: []string{"org", "lower(email)"}, Where: "deleted_at IS NULL", Source: "migration.sql:7"}
		rep, err := uniquecheck.Check(context.Background(), db, spec)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Source != "migration.sql:7" || rep.Table != `"users"` || strings.Join(rep.Keys, "|") != "org|lower(email)" || rep.Where != spec.Where || rep.NullsNotDistinct {
			t.Fatalf("report source %q table %q keys %q where %q nulls not distinct %v; want the spec's", rep.Source, rep.Table, rep.Keys, rep.Where, rep.NullsNotDistinct)
		}
		if got := groupsText(t, rep); got != "1,a 2 [1 2]" {
			t.Fatalf("groups %s, want 1,a 2 [1 2]", got)
		}
		var b bytes.Buffer
		if err := uniquecheck.WriteJSON(&b, []*uniquecheck.Report{rep}); err != nil {
			t.Fatal(err)
		}
		for _, field := range []string{`"source":"migration.sql:7"`, `"table":"\"users\""`, `"where":"deleted_at IS NULL"`, `"duplicate_groups":1`, `"surplus_rows":1`} {
			if !strings.Contains(b.String(), field) {
				t.Errorf("JSON %s: lacks %s", b.String(), field)
			}
		}
	})
}

// TestOutsideTiedGroupsAreListedByKey proves that among groups of one
// size the groups a Limit keeps are those of the lowest keys, in key
// order, after the larger groups: the same data lists the same groups on
// every run, however the engine aggregates.
func TestOutsideTiedGroupsAreListedByKey(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		var rows []string
		id := 0
		for g := 39; g >= 0; g-- { // inserted in descending key order
			for range 2 {
				id++
				rows = append(rows, fmt.Sprintf("(%d, 'k%02d')", id, g))
			}
		}
		for range 3 {
			id++
			rows = append(rows, fmt.Sprintf("(%d, 'zz')", id))
		}
		exec(t, db.SQL(), `INSERT INTO users VALUES `+strings.Join(rows, ", "))
		rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}, Limit: 4, MaxKeys: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := groupsText(t, rep), "zz 3 [81]; k00 2 [79]; k01 2 [77]; k02 2 [75]"; got != want || rep.DuplicateGroups != 41 {
			t.Fatalf("%d groups, listed %s; want 41, listed %s", rep.DuplicateGroups, got, want)
		}
	})
}

// TestOutsideUUIDPrimaryKey proves a check of a table keyed by a type
// that has no min and max aggregates on PostgreSQL (uuid): its rows are
// named by the second read, pairs as well as larger groups.
func TestOutsideUUIDPrimaryKey(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE tokens (id UUID PRIMARY KEY, v TEXT)`)
		u := func(n int) string { return fmt.Sprintf("00000000-0000-0000-0000-%012d", n) }
		exec(t, db.SQL(), fmt.Sprintf(`INSERT INTO tokens VALUES ('%s', 'x'), ('%s', 'x'), ('%s', 'y'), ('%s', 'y'), ('%s', 'y')`, u(2), u(1), u(3), u(5), u(4)))
		rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "tokens", Keys: []string{"v"}})
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`y 3 ["%s" "%s" "%s"]; x 2 ["%s" "%s"]`, u(3), u(4), u(5), u(1), u(2))
		if got := groupsText(t, rep); got != want || strings.Join(rep.PrimaryKey, ",") != "id" {
			t.Fatalf("primary key %q, groups %s; want [id], %s", rep.PrimaryKey, got, want)
		}
	})
}

// TestOutsideMigrationNotesEveryEarlierChange proves that each statement
// before a unique index that changes what the check reads is a note of
// its spec: a DELETE and an INSERT (whole rows), a column dropped and
// added again, and (PostgreSQL) a key column's new type. The INSERT's
// row collides with one already there: the check of the current data
// finds no duplicates, the migration fails, and the note says why the
// check could not know.
func TestOutsideMigrationNotesEveryEarlierChange(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE items (id INTEGER PRIMARY KEY, a TEXT, b TEXT)`)
		exec(t, db.SQL(), `INSERT INTO items VALUES (1, 'x', 'p'), (2, 'y', 'q')`)
		cases := []struct {
			file  string
			notes []string
			fails bool // the migration fails on the current data
		}{
			{"DELETE FROM items WHERE id > 5;\nINSERT INTO items (id, a) VALUES (9, 'x');\nCREATE UNIQUE INDEX n1 ON items (a);\n",
				[]string{`line 1 deletes rows of "items" before this index is built`, `line 2 inserts rows into "items" before this index is built`}, true},
			{"ALTER TABLE items DROP COLUMN b;\nALTER TABLE items ADD COLUMN b TEXT;\nCREATE UNIQUE INDEX n2 ON items (b);\n",
				[]string{"line 1 drops column b, a column of this index"}, false},
		}
		if db.Engine() == racefree.Postgres {
			cases = append(cases, struct {
				file  string
				notes []string
				fails bool
			}{"ALTER TABLE items ALTER COLUMN a TYPE varchar(10);\nCREATE UNIQUE INDEX n3 ON items (a);\n",
				[]string{"line 1 changes the type of column a, a column of this index"}, false})
		}
		for _, c := range cases {
			specs, _, err := uniquecheck.FromMigration(db.Engine(), c.file)
			if err != nil || len(specs) != 1 {
				t.Fatalf("%s: specs %+v, %v; want one", c.file, specs, err)
			}
			rep, err := uniquecheck.Check(context.Background(), db, specs[0])
			if err != nil {
				t.Fatalf("%s: %v", c.file, err)
			}
			w := strings.Join(rep.Warnings, "\n")
			for _, n := range c.notes {
				if !strings.Contains(w, n) {
					t.Errorf("%s: warnings lack %q:\n%s", c.file, n, w)
				}
			}
			if err := runMigration(t, db, c.file); (err != nil) != c.fails || rep.DuplicateGroups != 0 {
				t.Errorf("%s: the migration's error %v, %d groups now; want it to fail %v, no groups now", c.file, err, rep.DuplicateGroups, c.fails)
			}
		}
	})
}

// TestOutsideSQLiteUnparsedUniqueIndexInAnyCase proves that on SQLite a
// unique index the parser cannot read is refused as an InputError
// however its CREATE UNIQUE INDEX is written (lower or mixed case), never
// skipped with a warning as a statement of no concern; the file runs on
// SQLite and fails there on the duplicates nobody checked.
func TestOutsideSQLiteUnparsedUniqueIndexInAnyCase(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
	exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'ab'), (2, 'ab')`)
	for _, file := range []string{
		"create unique index u1 on users (email) where email glob 'a*';\n",
		"Create Unique Index u2 On users (email) Where email Glob 'a*';\n",
	} {
		if err := runMigration(t, db, file); err == nil {
			t.Fatalf("%s: SQLite built it on duplicates", file)
		}
		specs, warns, err := uniquecheck.FromMigration(racefree.SQLite, file)
		if !errors.Is(err, racefree.ErrInvalidInput) || !strings.Contains(err.Error(), "cannot parse this CREATE UNIQUE INDEX") {
			t.Errorf("%s: specs %+v, warnings %v, err %v; want an InputError", file, specs, warns, err)
		}
	}
}

// TestOutsideDedupeSQLRefusesWhatItCannotRun proves that DedupeSQL, which
// may be given a report read back from JSON, refuses one without primary
// key columns and one whose predicate holds ';' or a block comment, as
// InputErrors, and prints no script.
func TestOutsideDedupeSQLRefusesWhatItCannotRun(t *testing.T) {
	t.Parallel()
	for _, engine := range testdb.Engines {
		for _, rep := range []*uniquecheck.Report{
			{Table: `"users"`, Keys: []string{"email"}},
			{Table: `"users"`, Keys: []string{"email"}, PrimaryKey: []string{"id"}, Where: "true; DROP TABLE users"},
			{Table: `"users"`, Keys: []string{"email"}, PrimaryKey: []string{"id"}, Where: "true /* x"},
		} {
			script, err := uniquecheck.DedupeSQL(engine, rep, uniquecheck.KeepMinID, "")
			if !errors.Is(err, racefree.ErrInvalidInput) || script != "" {
				t.Errorf("%s, primary key %q, where %q: %v\n%s\nwant an InputError and no script", engine, rep.PrimaryKey, rep.Where, err, script)
			}
		}
	}
}

// TestOutsideDedupeSQLHeadingCounts proves the dedupe script's heading:
// the surplus rows it removes and the groups they come from, as checked.
func TestOutsideDedupeSQLHeadingCounts(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a'), (2, 'a'), (3, 'a'), (4, 'a'), (5, 'b'), (6, 'b'), (7, 'c')`)
		rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}})
		if err != nil {
			t.Fatal(err)
		}
		script, err := uniquecheck.DedupeSQL(db.Engine(), rep, uniquecheck.KeepMinID, "")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(script, `-- of "users" (4 rows in 2 groups when checked)`) {
			t.Fatalf("script:\n%s\nwant the heading of 4 rows in 2 groups", script)
		}
	})
}

// TestOutsideMaskIsTwelveHexDigits proves Mask's documented form,
// sha256:<the first 12 hex digits of the SHA-256 of the value> len=<bytes>.
func TestOutsideMaskIsTwelveHexDigits(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"", "a@x.io", "é"} {
		sum := sha256.Sum256([]byte(v))
		want := fmt.Sprintf("sha256:%s len=%d", hex.EncodeToString(sum[:])[:12], len(v))
		if got := uniquecheck.Mask(v); got != want {
			t.Errorf("Mask(%q) = %q, want %q", v, got, want)
		}
	}
}

// TestOutsideAnyNegativeBoundListsAll proves that any negative Limit
// lists every group and any negative MaxKeys every primary key, not -1
// alone.
func TestOutsideAnyNegativeBoundListsAll(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a'), (2, 'a'), (3, 'a'), (4, 'b'), (5, 'b'), (6, 'c'), (7, 'c')`)
		for _, b := range [][2]int{{-2, -2}, {-100, -3}} {
			rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}, Limit: b[0], MaxKeys: b[1]})
			if err != nil {
				t.Fatalf("Limit %d, MaxKeys %d: %v", b[0], b[1], err)
			}
			if got, want := groupsText(t, rep), "a 3 [1 2 3]; b 2 [4 5]; c 2 [6 7]"; got != want {
				t.Errorf("Limit %d, MaxKeys %d: %s, want %s", b[0], b[1], got, want)
			}
		}
	})
}

// TestOutsideNullInALaterKeyConflictsWithNothing proves that a row with
// a NULL in any key of a composite index, the last as well as the first,
// is in no group, whether the key is a column or an expression (SQLite's
// aggregate then computes the keys once, in a subquery); the engine
// builds the index once the one real duplicate is gone.
func TestOutsideNullInALaterKeyConflictsWithNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, org INTEGER, email TEXT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 1, NULL), (2, 1, NULL), (3, NULL, 'b'), (4, NULL, 'b'), (5, 2, 'a'), (6, 2, 'a')`)
		for _, keys := range [][]string{{"org", "email"}, {"org", "lower(email)"}, {"lower(email)", "org"}} {
			spec := uniquecheck.Spec{Table: "users", Keys: keys}
			rep, err := uniquecheck.Check(context.Background(), db, spec)
			if err != nil {
				t.Fatal(err)
			}
			want := "2,a 2 [5 6]"
			if keys[0] != "org" {
				want = "a,2 2 [5 6]"
			}
			if got := groupsText(t, rep); got != want || rep.DuplicateGroups != 1 || rep.SurplusRows != 1 {
				t.Errorf("keys %q: %d groups, %d surplus, %s; want 1, 1, %s", keys, rep.DuplicateGroups, rep.SurplusRows, got, want)
			}
		}
		exec(t, db.SQL(), `DELETE FROM users WHERE id = 6`)
		for _, keys := range [][]string{{"org", "email"}, {"org", "lower(email)"}} {
			spec := uniquecheck.Spec{Table: "users", Keys: keys}
			rep, err := uniquecheck.Check(context.Background(), db, spec)
			if err != nil || rep.DuplicateGroups != 0 || !engineBuilds(t, db.SQL(), spec) {
				t.Errorf("keys %q without the duplicate: %+v, %v; want no groups and an index that builds", keys, rep, err)
			}
		}
	})
}

// TestOutsideAddedColumnNullsNotDistinct proves that ADD COLUMN … DEFAULT
// NULL UNIQUE NULLS NOT DISTINCT is checked with its NULLs equal: every
// existing row gets NULL, they all collide, and the check says so as the
// migration fails (PostgreSQL 15 and later: SQLite can neither add a
// UNIQUE column nor treat NULLs as equal).
func TestOutsideAddedColumnNullsNotDistinct(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
	exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a'), (2, 'b'), (3, 'c')`)
	const file = "ALTER TABLE users ADD COLUMN k text DEFAULT NULL UNIQUE NULLS NOT DISTINCT;\n"
	specs, _, err := uniquecheck.FromMigration(racefree.Postgres, file)
	if err != nil || len(specs) != 1 || !specs[0].NullsNotDistinct {
		t.Fatalf("specs %+v, %v; want one, NULLS NOT DISTINCT", specs, err)
	}
	rep, err := uniquecheck.Check(context.Background(), db, specs[0])
	if err != nil {
		t.Fatal(err)
	}
	if rep.DuplicateGroups != 1 || rep.SurplusRows != 2 {
		t.Fatalf("%d groups, %d surplus rows; want 1, 2", rep.DuplicateGroups, rep.SurplusRows)
	}
	if err := runMigration(t, db, file); err == nil {
		t.Fatal("the migration ran: its NULLs do not collide")
	}
}

// TestOutsideAddedColumnNullsNotDistinctWithoutDefault proves that ADD
// COLUMN … UNIQUE NULLS NOT DISTINCT with no DEFAULT is checked, not
// waved through: every existing row gets NULL and its NULLs are equal, so
// a table of two rows or more collides and the migration fails
// (PostgreSQL 15 and later), while on a table of one row it runs and the
// check finds nothing. Without NULLS NOT DISTINCT nothing collides and
// there is nothing to check.
func TestOutsideAddedColumnNullsNotDistinctWithoutDefault(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
	exec(t, db.SQL(), `CREATE TABLE solo (id INTEGER PRIMARY KEY)`)
	exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a'), (2, 'b'), (3, 'c')`)
	exec(t, db.SQL(), `INSERT INTO solo VALUES (1)`)
	for _, c := range []struct {
		table          string
		groups, excess int64
	}{{"users", 1, 2}, {"solo", 0, 0}} {
		file := "ALTER TABLE " + c.table + " ADD COLUMN k text UNIQUE NULLS NOT DISTINCT;\n"
		specs, warnings, err := uniquecheck.FromMigration(racefree.Postgres, file)
		if err != nil || len(specs) != 1 || !specs[0].NullsNotDistinct || len(warnings) != 0 {
			t.Fatalf("%s: specs %+v, warnings %q, %v; want one spec, NULLS NOT DISTINCT, and no \"nothing to check\"", c.table, specs, warnings, err)
		}
		rep, err := uniquecheck.Check(context.Background(), db, specs[0])
		if err != nil {
			t.Fatal(err)
		}
		if rep.DuplicateGroups != c.groups || rep.SurplusRows != c.excess {
			t.Fatalf("%s: %d groups, %d surplus rows; want %d, %d", c.table, rep.DuplicateGroups, rep.SurplusRows, c.groups, c.excess)
		}
		if err := runMigration(t, db, file); (err == nil) != (c.groups == 0) {
			t.Fatalf("%s: the migration returned %v, and the check found %d groups", c.table, err, c.groups)
		}
	}
	specs, warnings, err := uniquecheck.FromMigration(racefree.Postgres, "ALTER TABLE users ADD COLUMN k text UNIQUE;\n")
	if err != nil || len(specs) != 0 || len(warnings) != 1 || !strings.Contains(warnings[0].Message, "nothing to check") {
		t.Fatalf("without NULLS NOT DISTINCT: specs %+v, warnings %q, %v; want none and nothing to check", specs, warnings, err)
	}
}

// TestOutsideSQLiteIndexNamesIgnoreCase proves that on SQLite, whose index
// names are case-insensitive, an index named Users_Email makes a check of
// an index users_email warn that it already exists, as SQLite then refuses
// the CREATE UNIQUE INDEX (or skips it with IF NOT EXISTS).
func TestOutsideSQLiteIndexNamesIgnoreCase(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
	exec(t, db.SQL(), `CREATE UNIQUE INDEX Users_Email ON users (email)`)
	rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}, IndexName: "users_email"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(rep.Warnings, "\n"), "already exists") {
		t.Fatalf("warnings %q: want that users_email already exists", rep.Warnings)
	}
	if err := runMigration(t, db, "CREATE UNIQUE INDEX users_email ON users (email);\n"); err == nil {
		t.Fatal("SQLite created users_email beside Users_Email")
	}
}
