package uniquecheck_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/uniquecheck"
)

// The tests of this file try the promises of docs/uniquecheck.md at the
// edges of the boundary matrix: a check that cannot know says so instead
// of "no duplicates".

// runMigration runs a migration's statements on db and returns the first
// error: the referee of what FromMigration says about the file.
func runMigration(t *testing.T, db *racefree.DB, file string) error {
	t.Helper()
	tx, err := db.SQL().BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, st := range strings.Split(file, ";\n") {
		if strings.TrimSpace(st) == "" {
			continue
		}
		if _, err := tx.ExecContext(context.Background(), st); err != nil {
			return err
		}
	}
	return nil
}

// TestEdgesMigrationCopiesIntoACreatedTable proves that a unique index on
// a table the migration creates and then fills with existing rows (the
// table rebuild SQLite needs) is an InputError, not "no rows yet; nothing
// to check", since the migration does fail on the duplicates it copies; a
// table the migration creates and fills with literal rows, or not at all,
// is still not checked; a copy into a table created with a UNIQUE
// constraint is a warning.
func TestEdgesMigrationCopiesIntoACreatedTable(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a@x.io'), (2, 'A@x.io')`)
		const copied = "CREATE TABLE users_new (id INTEGER PRIMARY KEY, email TEXT);\n" +
			"INSERT INTO users_new SELECT id, email FROM users;\n" +
			"CREATE UNIQUE INDEX users_new_email ON users_new (lower(email));\n"
		specs, _, err := uniquecheck.FromMigration(db.Engine(), copied)
		if !errors.Is(err, racefree.ErrInvalidInput) || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), "line 2") {
			t.Fatalf("copy, then unique index: specs %+v, err %v; want an InputError naming lines 2 and 3", specs, err)
		}
		if err := runMigration(t, db, copied); err == nil {
			t.Fatal("the migration ran: the fixture has no duplicates")
		}

		for _, file := range []string{
			"CREATE TABLE fresh (id INTEGER PRIMARY KEY, email TEXT);\nCREATE UNIQUE INDEX fresh_email ON fresh (email);\n",
			"CREATE TABLE fresh (id INTEGER PRIMARY KEY, email TEXT);\nINSERT INTO fresh VALUES (1, 'a');\nCREATE UNIQUE INDEX fresh_email ON fresh (email);\n",
			"CREATE TABLE fresh (id INTEGER PRIMARY KEY, email TEXT);\nCREATE UNIQUE INDEX fresh_email ON fresh (email);\nINSERT INTO fresh SELECT id, email FROM users;\n",
		} {
			specs, warns, err := uniquecheck.FromMigration(db.Engine(), file)
			if err != nil || len(specs) != 0 || len(warns) != 1 || !strings.Contains(warns[0].Message, "nothing to check") {
				t.Errorf("%s: specs %+v, warnings %v, err %v; want one warning, nothing to check", file, specs, warns, err)
			}
		}

		const constrained = "CREATE TABLE users_new (id INTEGER PRIMARY KEY, email TEXT UNIQUE);\n" +
			"INSERT INTO users_new SELECT id, lower(email) FROM users;\n"
		specs, warns, err := uniquecheck.FromMigration(db.Engine(), constrained)
		if err != nil || len(specs) != 0 || len(warns) != 1 || warns[0].Source != "line 2" || !strings.Contains(warns[0].Message, "not checked") {
			t.Fatalf("copy into a UNIQUE column: specs %+v, warnings %v, err %v; want a warning on line 2", specs, warns, err)
		}
		if err := runMigration(t, db, constrained); err == nil {
			t.Fatal("the copy ran: the fixture has no duplicates")
		}
	})
}

// TestEdgesGeneratedColumnIsChecked proves that ADD COLUMN … GENERATED
// ALWAYS AS (expr) STORED UNIQUE is checked as expr, which every existing
// row gets, and not waved through as a column of NULLs, its report
// carrying the migration's note of what was checked (PostgreSQL: SQLite
// cannot add a UNIQUE column).
func TestEdgesGeneratedColumnIsChecked(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
	exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a@x.io'), (2, 'A@x.io'), (3, NULL), (4, NULL)`)
	const file = "ALTER TABLE users ADD COLUMN email_key text GENERATED ALWAYS AS (lower(email)) STORED UNIQUE;\n"
	specs, warns, err := uniquecheck.FromMigration(racefree.Postgres, file)
	if err != nil || len(warns) != 0 || len(specs) != 1 || strings.Join(specs[0].Keys, ",") != "lower(email)" {
		t.Fatalf("specs %+v, warnings %v, err %v; want one check of lower(email)", specs, warns, err)
	}
	rep, err := uniquecheck.Check(context.Background(), db, specs[0])
	if err != nil {
		t.Fatal(err)
	}
	if rep.DuplicateGroups != 1 || rep.SurplusRows != 1 {
		t.Fatalf("%d groups, %d surplus rows; want 1, 1", rep.DuplicateGroups, rep.SurplusRows)
	}
	if !strings.Contains(strings.Join(rep.Warnings, "\n"), "checked as its generated expression lower(email)") {
		t.Fatalf("warnings %q lack the migration's note of what was checked", rep.Warnings)
	}
	if err := runMigration(t, db, file); err == nil {
		t.Fatal("the migration ran on the duplicates")
	}
}

// TestEdgesAddPrimaryKeyIsChecked proves that ALTER TABLE … ADD [CONSTRAINT
// …] PRIMARY KEY, which builds a unique index, is checked as one, with
// its NOT NULL (Spec.NotNull; PostgreSQL: SQLite cannot add one).
func TestEdgesAddPrimaryKeyIsChecked(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	exec(t, db.SQL(), `CREATE TABLE events (source TEXT, ext_id TEXT)`)
	exec(t, db.SQL(), `INSERT INTO events VALUES ('stripe', 'e1'), ('stripe', 'e1'), ('paypal', 'e1')`)
	for _, file := range []string{
		"ALTER TABLE events ADD PRIMARY KEY (source, ext_id);\n",
		"ALTER TABLE events ADD CONSTRAINT events_pkey PRIMARY KEY (source, ext_id);\n",
	} {
		specs, _, err := uniquecheck.FromMigration(racefree.Postgres, file)
		if err != nil || len(specs) != 1 || strings.Join(specs[0].Keys, ",") != `"source","ext_id"` {
			t.Fatalf("%s: specs %+v, err %v; want one check of source, ext_id", file, specs, err)
		}
		rep, err := uniquecheck.Check(context.Background(), db, specs[0])
		if err != nil {
			t.Fatal(err)
		}
		if rep.DuplicateGroups != 1 || !rep.NotNull || rep.NullRows != 0 {
			t.Fatalf("%s: %d groups, not null %v, %d null rows; want 1 group under NOT NULL", file, rep.DuplicateGroups, rep.NotNull, rep.NullRows)
		}
		if err := runMigration(t, db, file); err == nil {
			t.Fatal("the migration ran on the duplicates")
		}
	}
}

// TestEdgesDedupeArchiveNameAtItsLimit proves DedupeSQL's archive table at
// the 63-byte identifier limit: a table name of 48 bytes keeps all of it
// (the archive's name is then 63 bytes), 49 and 63 bytes are cut to 48,
// and a cut that would split a character stops before it, so that the
// engine takes the name; the script then archives the surplus rows.
func TestEdgesDedupeArchiveNameAtItsLimit(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		for _, c := range []struct{ table, archive string }{
			{strings.Repeat("t", 48), strings.Repeat("t", 48) + "_dedupe_archive"},
			{strings.Repeat("u", 49), strings.Repeat("u", 48) + "_dedupe_archive"},
			{strings.Repeat("v", 63), strings.Repeat("v", 48) + "_dedupe_archive"},
			{"a" + strings.Repeat("é", 24), "a" + strings.Repeat("é", 23) + "_dedupe_archive"},
		} {
			q := `"` + c.table + `"`
			exec(t, db.SQL(), `CREATE TABLE `+q+` (id INTEGER PRIMARY KEY, email TEXT)`)
			exec(t, db.SQL(), `INSERT INTO `+q+` VALUES (1, 'a'), (2, 'a'), (3, 'b')`)
			rep, err := uniquecheck.Check(ctx, db, uniquecheck.Spec{Table: q, Keys: []string{"email"}})
			if err != nil {
				t.Fatal(err)
			}
			script, err := uniquecheck.DedupeSQL(db.Engine(), rep, uniquecheck.KeepMinID, "")
			if err != nil {
				t.Fatal(err)
			}
			if !utf8.ValidString(script) || !strings.Contains(script, `"`+c.archive+`"`) {
				t.Fatalf("%d-byte table: the script names no archive %q (valid UTF-8: %v):\n%s", len(c.table), c.archive, utf8.ValidString(script), script)
			}
			runScript(t, db, script)
			var archived, left int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM "`+c.archive+`"`).Scan(&archived); err != nil {
				t.Fatal(err)
			}
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+q).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if archived != 1 || left != 2 {
				t.Fatalf("%d-byte table: archived %d, left %d; want 1, 2", len(c.table), archived, left)
			}
		}
	})
}

// TestEdgesDedupeSQLKeepsThePredicateWhole proves that DedupeSQL keeps a
// partial index's predicate whole: with an OR in it, the rows with a NULL
// key stay out of every group and are neither archived nor deleted.
func TestEdgesDedupeSQLKeepsThePredicateWhole(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT, org INTEGER, deleted_at BIGINT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a', 1, NULL), (2, 'a', 2, 7), (3, NULL, 2, 7), (4, NULL, 2, 7), (5, 'a', 1, 9)`)
		spec := uniquecheck.Spec{Table: "users", Keys: []string{"email"}, Where: "deleted_at IS NULL OR org = 2"}
		rep, err := uniquecheck.Check(ctx, db, spec)
		if err != nil {
			t.Fatal(err)
		}
		if rep.DuplicateGroups != 1 || rep.SurplusRows != 1 {
			t.Fatalf("%d groups, %d surplus; want 1, 1", rep.DuplicateGroups, rep.SurplusRows)
		}
		runDedupe(t, db, rep, uniquecheck.KeepMinID)
		if got, want := userIDs(t, db), []int{1, 3, 4, 5}; !equalInts(got, want) {
			t.Fatalf("left %v, want %v", got, want)
		}
		if !engineBuilds(t, db.SQL(), spec) {
			t.Fatal("the index still fails after the dedupe script")
		}
	})
}

// TestEdgesCancelledCheckGivesNoVerdict proves that a check whose caller
// cancels it returns the context's error and no report, never one that
// says "no duplicates": cancelled before it starts (both engines) and, on
// PostgreSQL, while its aggregate waits on a lock the test holds, once
// the statement has been sent and before its first row.
func TestEdgesCancelledCheckGivesNoVerdict(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a'), (2, 'a'), (3, 'b')`)
		done, cancel := context.WithCancel(context.Background())
		cancel()
		if rep, err := uniquecheck.Check(done, db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}}); rep != nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled before the check: report %+v, err %v; want context.Canceled alone", rep, err)
		}
		if db.Engine() != racefree.Postgres {
			return
		}
		ctx := context.Background()
		hold, err := db.SQL().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Close()
		// A lock key of this test alone: the database is shared.
		key := rand.Int32()
		var pid int
		if err := hold.QueryRowContext(ctx, `SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock($1)) AS l`, key).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		checkCtx, cancelCheck := context.WithCancel(ctx)
		defer cancelCheck()
		type result struct {
			rep *uniquecheck.Report
			err error
		}
		out := make(chan result, 1)
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			rep, err := uniquecheck.Check(checkCtx, db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}, Where: fmt.Sprintf("pg_advisory_xact_lock_shared(%d) IS NOT NULL", key)})
			out <- result{rep, err}
		}()
		if !testdb.BlockedBy(t, db, pid, ended) {
			r := <-out
			t.Fatalf("the check ended before it waited for the lock: %+v, %v", r.rep, r.err)
		}
		cancelCheck()
		r := <-out
		if _, err := hold.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
			t.Fatal(err)
		}
		if r.rep != nil || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled while it ran: report %+v, err %v; want context.Canceled and no report", r.rep, r.err)
		}
	})
}

// TestEdgesTextAtTheLimits proves the text report at Limit and MaxKeys:
// as many groups as the limit lists them all with no "more groups" line,
// one fewer says "… 1 more groups"; a group with as many rows as MaxKeys
// lists them all with no "more" mark, one fewer says "… 1 more".
func TestEdgesTextAtTheLimits(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a'), (2, 'a'), (3, 'a'), (4, 'b'), (5, 'b'), (6, 'c')`)
		text := func(limit, maxKeys int) string {
			t.Helper()
			rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}, Limit: limit, MaxKeys: maxKeys})
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := uniquecheck.WriteText(&b, []*uniquecheck.Report{rep}); err != nil {
				t.Fatal(err)
			}
			return b.String()
		}
		if s := text(2, 3); strings.Contains(s, "more") || !strings.Contains(s, "2 duplicate groups, 3 surplus rows") || !strings.Contains(s, "1 2 3\n") {
			t.Errorf("Limit 2 of 2 groups, MaxKeys 3 of 3 rows:\n%s", s)
		}
		if s := text(1, 2); !strings.Contains(s, "… 1 more groups (--limit)") || !strings.Contains(s, "1 2 … 1 more (--max-keys)") {
			t.Errorf("Limit 1 of 2 groups, MaxKeys 2 of 3 rows:\n%s", s)
		}
	})
}

// TestEdgesIndexNameInItsTablesSchema proves that the warning about an
// existing index looks in the schema of the checked table alone: an index
// of the same name on the same-named table of another schema is not it
// (PostgreSQL, where a schema is a namespace of its own).
func TestEdgesIndexNameInItsTablesSchema(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	ctx := context.Background()
	// The other schema, beside the test's own (the database is shared).
	var app string
	if err := db.QueryRowContext(ctx, `SELECT current_schema() || '_app'`).Scan(&app); err != nil {
		t.Fatal(err)
	}
	exec(t, db.SQL(), `CREATE SCHEMA `+app)
	t.Cleanup(func() { _, _ = db.SQL().ExecContext(context.Background(), `DROP SCHEMA `+app+` CASCADE`) })
	exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
	exec(t, db.SQL(), `CREATE TABLE `+app+`.users (uid INTEGER PRIMARY KEY, email TEXT)`)
	exec(t, db.SQL(), `INSERT INTO `+app+`.users VALUES (1, 'a'), (2, 'a')`)
	exec(t, db.SQL(), `CREATE UNIQUE INDEX users_email ON users (email)`)
	rep, err := uniquecheck.Check(ctx, db, uniquecheck.Spec{Table: app + ".users", Keys: []string{"email"}, IndexName: "users_email"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.DuplicateGroups != 1 || strings.Join(rep.PrimaryKey, ",") != "uid" || len(rep.Warnings) != 0 {
		t.Fatalf("%s.users: %d groups, primary key %v, warnings %q; want 1 group by uid and no warning", app, rep.DuplicateGroups, rep.PrimaryKey, rep.Warnings)
	}
	rep, err = uniquecheck.Check(ctx, db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}, IndexName: "users_email"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.DuplicateGroups != 0 || !strings.Contains(strings.Join(rep.Warnings, "\n"), `"users_email" already exists`) {
		t.Fatalf("users: %d groups, warnings %q; want none and the existing index", rep.DuplicateGroups, rep.Warnings)
	}
}

// TestEdgesDedupeSQLQuotesThePrimaryKey proves that DedupeSQL quotes a
// primary key column as it quotes every name from input: on a table whose
// key column needs quotes ("Line No"), the script runs and archives and
// deletes the surplus rows.
func TestEdgesDedupeSQLQuotesThePrimaryKey(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		exec(t, db.SQL(), `CREATE TABLE lines ("Line No" INTEGER PRIMARY KEY, email TEXT)`)
		exec(t, db.SQL(), `INSERT INTO lines VALUES (1, 'a'), (2, 'a'), (3, 'b'), (4, 'a')`)
		spec := uniquecheck.Spec{Table: "lines", Keys: []string{"email"}}
		rep, err := uniquecheck.Check(ctx, db, spec)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.PrimaryKey) != 1 || rep.PrimaryKey[0] != "Line No" || rep.SurplusRows != 2 {
			t.Fatalf("primary key %q, %d surplus rows; want [Line No], 2", rep.PrimaryKey, rep.SurplusRows)
		}
		runDedupe(t, db, rep, uniquecheck.KeepMinID)
		var archived, left int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM lines_dedupe_archive`).Scan(&archived); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM lines`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if archived != 2 || left != 2 || !engineBuilds(t, db.SQL(), spec) {
			t.Fatalf("archived %d, left %d; want 2, 2 and an index that builds", archived, left)
		}
	})
}

// TestEdgesDedupeSQLNullsNotDistinct proves DedupeSQL for a report with
// NULLS NOT DISTINCT and no predicate, whose surplus rows are chosen with
// no WHERE at all: the rows whose key is NULL are one group, and the
// script leaves one of them (PostgreSQL 15+, the engine that has it).
func TestEdgesDedupeSQLNullsNotDistinct(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		if db.Engine() != racefree.Postgres {
			return // SQLite has no NULLS NOT DISTINCT: TestNullsNotDistinctOnSQLite
		}
		ctx := context.Background()
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, NULL), (2, 'a'), (3, NULL), (4, 'a'), (5, 'b')`)
		spec := uniquecheck.Spec{Table: "users", Keys: []string{"email"}, NullsNotDistinct: true}
		rep, err := uniquecheck.Check(ctx, db, spec)
		if err != nil {
			t.Fatal(err)
		}
		if rep.DuplicateGroups != 2 || rep.SurplusRows != 2 {
			t.Fatalf("%d groups, %d surplus; want 2, 2", rep.DuplicateGroups, rep.SurplusRows)
		}
		runDedupe(t, db, rep, uniquecheck.KeepMinID)
		if got, want := userIDs(t, db), []int{1, 2, 5}; !equalInts(got, want) || !engineBuilds(t, db.SQL(), spec) {
			t.Fatalf("left %v, want %v and an index that builds", got, want)
		}
	})
}

// TestEdgesDedupeArchiveNameOfNoWholeCharacter proves the archive name's
// cut when no character starts in the first 48 bytes of the table's name
// (bytes that are not UTF-8, as SQLite may hold them): the cut keeps none
// of them, and the archive is named _dedupe_archive, valid UTF-8.
func TestEdgesDedupeArchiveNameOfNoWholeCharacter(t *testing.T) {
	t.Parallel()
	rep := &uniquecheck.Report{Table: `"` + strings.Repeat("\x80", 49) + `"`, Keys: []string{"email"}, PrimaryKey: []string{"id"}}
	script, err := uniquecheck.DedupeSQL(racefree.SQLite, rep, uniquecheck.KeepMinID, "")
	if err != nil || !strings.Contains(script, `CREATE TABLE IF NOT EXISTS "_dedupe_archive" AS`) {
		t.Fatalf("err %v; want a script that archives to \"_dedupe_archive\":\n%s", err, script)
	}
}

// TestEdgesWriteTextHeadings proves the text report's heading and rows:
// the source, the keys, NULLS NOT DISTINCT and the predicate each appear
// only when the report has them, a NULL key value prints as NULL, and one
// blank line parts two reports (none before the first).
func TestEdgesWriteTextHeadings(t *testing.T) {
	t.Parallel()
	x := "x"
	reps := []*uniquecheck.Report{
		{Source: "line 3", Table: `"users"`, Keys: []string{"email", "org"}, Where: "deleted_at IS NULL", NullsNotDistinct: true,
			PrimaryKey: []string{"id"}, DuplicateGroups: 1, SurplusRows: 1,
			Groups: []uniquecheck.Group{{Values: []*string{nil, &x}, Count: 2, PrimaryKeys: []json.RawMessage{json.RawMessage("4"), json.RawMessage("9")}}}},
		{Table: `"orgs"`, Keys: []string{"name"}},
	}
	var b bytes.Buffer
	if err := uniquecheck.WriteText(&b, reps); err != nil {
		t.Fatal(err)
	}
	const want = `line 3: "users" (email, org) NULLS NOT DISTINCT WHERE deleted_at IS NULL
  1 duplicate groups, 1 surplus rows to remove before the unique index can build
  ROWS  KEY       ID
  2     NULL | x  4 9

"orgs" (name)
  no duplicates: the unique index will build on the current data
`
	if got := b.String(); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// TestEdgesParseNameQuotes proves ParseName on quoted parts: a doubled
// quote stands for one, a quoted part keeps its case and dots while an
// unquoted one is folded, and an unterminated quote is an InputError that
// says so, however short the name.
func TestEdgesParseNameQuotes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]uniquecheck.Name{
		`"a""b"`:         {Table: `a"b`},
		`"x".Y`:          {Schema: "x", Table: "y"},
		`S."a.b"`:        {Schema: "s", Table: "a.b"},
		`"My ""S"""."T"`: {Schema: `My "S"`, Table: "T"},
		` "a" `:          {Table: "a"},
	} {
		if got, err := uniquecheck.ParseName(in); err != nil || got != want {
			t.Errorf("ParseName(%s) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{`"`, `"a`, `"abc`, `"a""`, `"a"."b`, `s."`} {
		if got, err := uniquecheck.ParseName(in); !errors.Is(err, racefree.ErrInvalidInput) || !strings.Contains(err.Error(), "unterminated quote") {
			t.Errorf("ParseName(%s) = %+v, %v; want an InputError, unterminated quote", in, got, err)
		}
	}
}

// TestEdgesMigrationLexesLikePostgres proves that FromMigration reads a
// unique index's keys and predicate as the engine does, whatever strings
// and comments hold: an empty string, a doubled quote, a backslash that
// ends a standard string ('C:\'), E'…' and e'…' strings where a backslash
// escapes a quote, N'…' and X'…' strings, a dollar-quoted string with a
// tag of letters, digits and a non-ASCII letter, comments with quotes,
// commas and parentheses in them, a block comment nested in another, an
// operator followed by a comment, a DEFAULT E'…' of an added UNIQUE
// column, a last statement with no semicolon that ends in a word or in a
// comment. Each file runs on the engine, and each key and predicate read
// (but those holding a block comment, refused as input) is one the check
// can run. Before, a one- or two-letter word just before a quote (E'…',
// X'…', or it's in a comment the lexer missed: nested, or just after an
// operator) made FromMigration loop for ever.
func TestEdgesMigrationLexesLikePostgres(t *testing.T) {
	t.Parallel()
	type want struct {
		keys  []string
		where string
	}
	cases := []struct {
		engine string // "" for both
		file   string
		want   []want
	}{
		{"", "CREATE UNIQUE INDEX u1 ON items (coalesce(a, ''), b);\n", []want{{[]string{"coalesce(a, '')", "b"}, ""}}},
		{"", "CREATE UNIQUE INDEX u2 ON items (coalesce(a, 'C:\\'), b);\n", []want{{[]string{`coalesce(a, 'C:\')`, "b"}, ""}}},
		{"", "CREATE UNIQUE INDEX u3 ON items (coalesce(a, 'it''s, (x'), b) WHERE d IS NULL;\n", []want{{[]string{"coalesce(a, 'it''s, (x')", "b"}, "d IS NULL"}}},
		{"", "CREATE UNIQUE INDEX u4 ON items (a) WHERE b = d", []want{{[]string{"a"}, "b = d"}}},
		{"", "CREATE UNIQUE INDEX u5 ON items (a /* it's, (b */, b -- it's, c\n) WHERE d IS NULL /* (x */;\n", []want{{[]string{"a", "b"}, "d IS NULL"}}},
		{"", "CREATE UNIQUE INDEX u6 ON items ((b +-- it's, x\n 1), (b >/* it's, */ 0), a) WHERE b >/* it's */ 0;\n", []want{{[]string{"(b +-- it's, x\n 1)", "(b >/* it's, */ 0)", "a"}, "b >/* it's */ 0"}}},
		{"", "CREATE UNIQUE INDEX u10 ON items (a) -- it's the last line, with no newline", []want{{[]string{"a"}, ""}}},
		{racefree.Postgres, "CREATE UNIQUE INDEX u7 ON items (coalesce(a, $Āa0Z9$it's, (x)$Āa0Z9$), b);\n", []want{{[]string{"coalesce(a, $Āa0Z9$it's, (x)$Āa0Z9$)", "b"}, ""}}},
		{racefree.Postgres, "CREATE UNIQUE INDEX u8 ON items ((a || E'\\')'), (a || e'\\',('), coalesce(a, N'C:\\'), b);\n",
			[]want{{[]string{`(a || E'\')')`, `(a || e'\',(')`, `coalesce(a, N'C:\')`, "b"}, ""}}},
		{racefree.Postgres, "CREATE UNIQUE INDEX u9 ON items (a /* was /* (a, b) */ b's, c */, b) WHERE d IS NULL /* /* */ */;\n", []want{{[]string{"a", "b"}, "d IS NULL"}}},
		{racefree.Postgres, "ALTER TABLE items ADD COLUMN c text DEFAULT E'it\\'s' UNIQUE;\n", []want{{[]string{`E'it\'s'`}, ""}}},
		{racefree.SQLite, "CREATE UNIQUE INDEX s1 ON items (coalesce(a, X'00'), b);\n", []want{{[]string{"coalesce(a, X'00')", "b"}, ""}}},
	}
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE items (id INTEGER PRIMARY KEY, a TEXT, b INTEGER, d BIGINT)`)
		exec(t, db.SQL(), `INSERT INTO items VALUES (1, 'x', 1, NULL)`)
		for _, c := range cases {
			if c.engine != "" && c.engine != db.Engine() {
				continue
			}
			if err := runMigration(t, db, c.file); err != nil {
				t.Fatalf("%s: the engine refuses the file: %v", c.file, err)
			}
			specs, _, err := uniquecheck.FromMigration(db.Engine(), c.file)
			if err != nil || len(specs) != len(c.want) {
				t.Fatalf("%s: specs %+v, err %v; want %d", c.file, specs, err, len(c.want))
			}
			for i, w := range c.want {
				if got := specs[i]; strings.Join(got.Keys, "\x00") != strings.Join(w.keys, "\x00") || got.Where != w.where {
					t.Errorf("%s: keys %q where %q; want %q where %q", c.file, got.Keys, got.Where, w.keys, w.where)
				}
				if !strings.Contains(strings.Join(specs[i].Keys, specs[i].Where), "/*") {
					if _, err := uniquecheck.Check(context.Background(), db, specs[i]); err != nil {
						t.Errorf("%s: %v", c.file, err)
					}
				}
			}
		}
	})
}

// TestEdgesRowSecurityGivesNoVerdict proves that a check on PostgreSQL
// never counts only the rows row-level security shows its role. The
// table's owner is bound by FORCE ROW LEVEL SECURITY and its policy
// shows no row while no tenant is set, so a count would find nothing
// where CREATE UNIQUE INDEX, which sees every row, fails: the check
// returns ErrRowsHidden and no report. A key whose expression reads
// another table that row-level security filters for the role fails too,
// instead of reading NULL for the rows it cannot see. A role that
// bypasses row-level security (the tests' superuser) gets the verdict.
func TestEdgesRowSecurityGivesNoVerdict(t *testing.T) {
	ctx := context.Background()
	super := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.OwnerDSN(t, super)
	db, err := sql.Open("pgx", owner)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range []string{
		`CREATE TABLE users (id int PRIMARY KEY, tenant_id text NOT NULL, email text NOT NULL)`,
		`INSERT INTO users VALUES (1, 'acme', 'a@x'), (2, 'globex', 'a@x')`,
		`ALTER TABLE users ENABLE ROW LEVEL SECURITY`,
		`ALTER TABLE users FORCE ROW LEVEL SECURITY`,
		`CREATE POLICY tenant ON users USING (tenant_id = current_setting('app.tenant', true))`,
		// A table without row-level security whose key reads users.
		`CREATE TABLE logins (id int PRIMARY KEY, user_id int NOT NULL)`,
		`INSERT INTO logins VALUES (1, 1), (2, 2)`,
		`CREATE FUNCTION email_of(int) RETURNS text LANGUAGE sql STABLE AS 'SELECT email FROM users WHERE id = $1'`,
	} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	// The referee: the index does not build, whoever builds it.
	if _, err := db.ExecContext(ctx, `CREATE UNIQUE INDEX users_email ON users (email)`); err == nil {
		t.Fatal("CREATE UNIQUE INDEX built over the duplicate email: the test's data is wrong")
	}

	c, err := uniquecheck.Open(owner)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rep, err := c.Check(ctx, uniquecheck.Spec{Table: "users", Keys: []string{"email"}})
	if !errors.Is(err, uniquecheck.ErrRowsHidden) || rep != nil {
		t.Fatalf("check as the bound owner: report %+v, error %v; want no report and ErrRowsHidden", rep, err)
	}
	if !strings.Contains(err.Error(), "users") {
		t.Errorf("error %q does not name the table", err)
	}
	rep, err = c.Check(ctx, uniquecheck.Spec{Table: "logins", Keys: []string{"email_of(user_id)"}})
	if err == nil || rep != nil {
		t.Fatalf("check of a key that reads a filtered table: report %+v, error %v; want no report and an error", rep, err)
	}

	s, err := uniquecheck.Open(super)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, spec := range []uniquecheck.Spec{
		{Table: "users", Keys: []string{"email"}},
		{Table: "logins", Keys: []string{"email_of(user_id)"}},
	} {
		rep, err := s.Check(ctx, spec)
		if err != nil {
			t.Fatalf("check of %s as a superuser: %v", spec.Table, err)
		}
		if len(rep.Groups) != 1 || rep.Groups[0].Count != 2 {
			t.Fatalf("check of %s as a superuser: groups %+v, want one group of 2", spec.Table, rep.Groups)
		}
	}
}

// TestEdgesNullKeyGroupsListTheirRows: on PostgreSQL with NULLS NOT
// DISTINCT, a group whose key is NULL lists its rows as a group of a value
// does: three rows each, past the pair that min and max name, so that both
// groups are read again to list their keys (NULL matched to NULL).
func TestEdgesNullKeyGroupsListTheirRows(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
	exec(t, db.SQL(), `INSERT INTO users VALUES (1, NULL), (2, 'a'), (3, NULL), (4, 'a'), (5, NULL), (6, 'a'), (7, 'b')`)
	rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}, NullsNotDistinct: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.DuplicateGroups != 2 || rep.SurplusRows != 4 || len(rep.Groups) != 2 {
		t.Fatalf("%d groups (%d listed), %d surplus; want 2, 4", rep.DuplicateGroups, len(rep.Groups), rep.SurplusRows)
	}
	for _, g := range rep.Groups {
		want := "[2,4,6]"
		if g.Values[0] == nil {
			want = "[1,3,5]"
		}
		got, _ := json.Marshal(g.PrimaryKeys)
		if g.Count != 3 || string(got) != want {
			t.Errorf("group %v: %d rows, keys %s; want 3 rows, keys %s", g.Values, g.Count, got, want)
		}
	}
}

// TestEdgesAKeyAndAPredicateEndingInALineComment: a key expression and a
// predicate that each end in a -- comment, as they may be copied from a
// migration, are checked as written on both engines: the comment ends at
// its line, never swallowing what the check puts after it.
func TestEdgesAKeyAndAPredicateEndingInALineComment(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT, deleted_at BIGINT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a', NULL), (2, 'A', NULL), (3, 'a', 5), (4, 'b', NULL)`)
		rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "users",
			Keys: []string{"lower(email) -- the address, as typed", "1 -- a constant"}, Where: "deleted_at IS NULL -- live rows only"})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(rep.Groups)
		if rep.DuplicateGroups != 1 || rep.SurplusRows != 1 || len(rep.Groups) != 1 {
			t.Fatalf("%d groups, %d surplus, %s; want one group of the live rows 1 and 2", rep.DuplicateGroups, rep.SurplusRows, got)
		}
		if keys, _ := json.Marshal(rep.Groups[0].PrimaryKeys); string(keys) != "[1,2]" {
			t.Fatalf("the group's keys %s; want the live rows [1,2]", keys)
		}
	})
}

// TestEdgesRowsOfATableAsItsEngineCounts: Checker.Rows, the CLI's
// progress figure, is 0 and not exact for a PostgreSQL table never
// analyzed (pg_class says -1), the planner's estimate once analyzed, and
// an exact count on SQLite.
func TestEdgesRowsOfATableAsItsEngineCounts(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		db := testdb.Open(t, d, nil)
		ctx := context.Background()
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		c, err := uniquecheck.New(db.Engine(), db.SQL())
		if err != nil {
			t.Fatal(err)
		}
		if db.Engine() == racefree.Postgres {
			if n, exact, err := c.Rows(ctx, "users"); err != nil || n != 0 || exact {
				t.Fatalf("never analyzed: %d, exact %v, %v; want 0, false", n, exact, err)
			}
		}
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a'), (2, 'a'), (3, 'b')`)
		if db.Engine() == racefree.Postgres {
			exec(t, db.SQL(), `ANALYZE users`)
		}
		n, exact, err := c.Rows(ctx, "users")
		if err != nil || n != 3 || exact != (db.Engine() == racefree.SQLite) {
			t.Fatalf("three rows: %d, exact %v, %v; want 3, exact on SQLite only", n, exact, err)
		}
	})
}

// TestEdgesExistingIndexIsAnIndex: IndexName is warned about only when an
// index of that name exists; a table or a view of that name is not one,
// on either engine.
func TestEdgesExistingIndexIsAnIndex(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		exec(t, db.SQL(), `CREATE TABLE users_email (id INTEGER PRIMARY KEY)`)
		exec(t, db.SQL(), `CREATE VIEW users_email_v AS SELECT id FROM users`)
		for _, name := range []string{"users_email", "users_email_v"} {
			rep, err := uniquecheck.Check(ctx, db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}, IndexName: name})
			if err != nil || len(rep.Warnings) != 0 {
				t.Fatalf("IndexName %s, a table or view: warnings %q, %v; want none", name, rep.Warnings, err)
			}
		}
		exec(t, db.SQL(), `CREATE INDEX users_email_i ON users (email)`)
		rep, err := uniquecheck.Check(ctx, db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}, IndexName: "users_email_i"})
		if err != nil || !strings.Contains(strings.Join(rep.Warnings, "\n"), "already exists") {
			t.Fatalf("IndexName of an index: warnings %q, %v; want that it exists", rep.Warnings, err)
		}
	})
}
