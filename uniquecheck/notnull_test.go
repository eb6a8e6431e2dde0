package uniquecheck_test

import (
	"context"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/uniquecheck"
)

// TestNotNullCountsNullKeys: with NotNull (a PRIMARY KEY's NOT NULL) a row
// with a NULL in any key, not only in all of them, is counted in NullRows
// and the index does not build, whatever Where says (NOT NULL is the
// column's), on both engines; without NotNull such rows are no finding.
// On PostgreSQL the engine agrees: ADD PRIMARY KEY fails on the NULL row
// and builds once it is gone.
func TestNotNullCountsNullKeys(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsnStr string) {
		db := testdb.Open(t, dsnStr, nil)
		ctx := context.Background()
		exec(t, db.SQL(), `CREATE TABLE accounts (id INTEGER NOT NULL, org TEXT, email TEXT)`)
		exec(t, db.SQL(), `INSERT INTO accounts VALUES (1, 'o', NULL), (2, NULL, 'b'), (3, 'o', 'c'), (4, 'o', 'd')`)
		check := func(spec uniquecheck.Spec) *uniquecheck.Report {
			t.Helper()
			spec.Table = "accounts"
			rep, err := uniquecheck.Check(ctx, db, spec)
			if err != nil {
				t.Fatal(err)
			}
			return rep
		}
		for _, c := range []struct {
			name  string
			spec  uniquecheck.Spec
			nulls int64
		}{
			{"one key", uniquecheck.Spec{Keys: []string{"email"}, NotNull: true}, 1},
			{"a NULL in either key", uniquecheck.Spec{Keys: []string{"org", "email"}, NotNull: true}, 2},
			{"every row, whatever Where says", uniquecheck.Spec{Keys: []string{"email"}, Where: "id > 1", NotNull: true}, 1},
			{"without NotNull", uniquecheck.Spec{Keys: []string{"org", "email"}}, 0},
		} {
			rep := check(c.spec)
			if rep.NullRows != c.nulls || rep.DuplicateGroups != 0 || rep.Builds() != (c.nulls == 0) || rep.NotNull != c.spec.NotNull {
				t.Fatalf("%s: null rows %d, groups %d, builds %v, not null %v; want %d null rows", c.name, rep.NullRows, rep.DuplicateGroups, rep.Builds(), rep.NotNull, c.nulls)
			}
		}
		if rep := check(uniquecheck.Spec{Keys: []string{"org"}, NotNull: true}); rep.NullRows != 1 || rep.DuplicateGroups != 1 || rep.SurplusRows != 2 || rep.Builds() {
			t.Fatalf("duplicates and a NULL key: %+v", rep)
		}
		if db.Engine() != racefree.Postgres {
			return
		}
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.ExecContext(ctx, `ALTER TABLE accounts ADD PRIMARY KEY (email)`)
		_ = tx.Rollback()
		if err == nil || !strings.Contains(err.Error(), "null values") {
			t.Fatalf("ADD PRIMARY KEY over a NULL: %v, want the engine to refuse it", err)
		}
		exec(t, db.SQL(), `DELETE FROM accounts WHERE email IS NULL`)
		if rep := check(uniquecheck.Spec{Keys: []string{"email"}, NotNull: true}); !rep.Builds() {
			t.Fatalf("after the NULL row is gone: %+v", rep)
		}
		exec(t, db.SQL(), `ALTER TABLE accounts ADD PRIMARY KEY (email)`)
	})
}

// TestFromMigrationPrimaryKeysAreNotNull: a migration's PRIMARY KEY is
// checked with NotNull, a UNIQUE without it; an added PRIMARY KEY or NOT
// NULL UNIQUE column without a DEFAULT is the constant NULL under NOT NULL
// (every existing row fails), one with a DEFAULT is that DEFAULT under NOT
// NULL; an identity or serial column numbers the rows and is not checked;
// PRIMARY KEY USING INDEX says its NOT NULL is not checked.
func TestFromMigrationPrimaryKeysAreNotNull(t *testing.T) {
	t.Parallel()
	const file = `ALTER TABLE users ADD PRIMARY KEY (email);
ALTER TABLE users ADD CONSTRAINT users_handle_key UNIQUE (handle);
ALTER TABLE users ADD COLUMN a int PRIMARY KEY;
ALTER TABLE users ADD COLUMN b int DEFAULT 5 PRIMARY KEY;
ALTER TABLE users ADD COLUMN c int NOT NULL UNIQUE;
ALTER TABLE users ADD COLUMN d bigserial PRIMARY KEY;
ALTER TABLE users ADD COLUMN e int GENERATED ALWAYS AS IDENTITY UNIQUE;
ALTER TABLE users ADD COLUMN f int UNIQUE;
ALTER TABLE users ADD COLUMN g int GENERATED ALWAYS AS (id * 2) STORED PRIMARY KEY;
ALTER TABLE users ADD CONSTRAINT users_pkey PRIMARY KEY USING INDEX users_email_idx;
`
	specs, warns, err := uniquecheck.FromMigration(racefree.Postgres, file)
	if err != nil {
		t.Fatal(err)
	}
	type short struct {
		Keys    string
		NotNull bool
		Source  string
	}
	var got []short
	for _, s := range specs {
		got = append(got, short{strings.Join(s.Keys, ","), s.NotNull, s.Source})
	}
	want := []short{
		{`"email"`, true, "line 1"},
		{`"handle"`, false, "line 2"},
		{"NULL", true, "line 3"},
		{"5", true, "line 4"},
		{"NULL", true, "line 5"},
		{"id * 2", true, "line 9"},
	}
	if len(got) != len(want) {
		t.Fatalf("specs %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("spec %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	all := ""
	for _, w := range warns {
		all += w.String() + "\n"
	}
	for _, sub := range []string{
		"line 6: ADD COLUMN d PRIMARY KEY: an identity or serial column",
		"line 7: ADD COLUMN e UNIQUE: an identity or serial column",
		"line 8: ADD COLUMN f UNIQUE: every existing row gets NULL",
		"line 10: PRIMARY KEY USING INDEX users_email_idx: the existing index already decides uniqueness; the NOT NULL",
	} {
		if !strings.Contains(all, sub) {
			t.Errorf("warnings lack %q:\n%s", sub, all)
		}
	}
}

// TestIndexOnAnInheritanceParentCoversItsOwnRows: on PostgreSQL a unique
// index on a table others INHERITS from covers its own rows alone, so a
// key its child repeats is no duplicate (the engine builds the index),
// one it repeats itself is; a PRIMARY KEY's NOT NULL is set on the child
// too, so the child's NULL key is counted (the engine refuses it). A
// partitioned table's index covers its partitions: their duplicates are
// found through it.
func TestIndexOnAnInheritanceParentCoversItsOwnRows(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	ctx := context.Background()
	exec(t, db.SQL(), `CREATE TABLE base (id int, email text)`)
	exec(t, db.SQL(), `CREATE TABLE kid () INHERITS (base)`)
	exec(t, db.SQL(), `INSERT INTO base VALUES (1, 'a'), (2, 'b'); INSERT INTO kid VALUES (3, 'a'), (4, NULL)`)
	check := func(spec uniquecheck.Spec) *uniquecheck.Report {
		t.Helper()
		rep, err := uniquecheck.Check(ctx, db, spec)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	spec := uniquecheck.Spec{Table: "base", Keys: []string{"email"}}
	if rep := check(spec); !rep.Builds() || !engineBuilds(t, db.SQL(), spec) {
		t.Fatalf("a key the child repeats: %+v, want no duplicate (the engine builds it)", rep)
	}
	spec.NotNull = true
	if rep := check(spec); rep.NullRows != 1 || rep.DuplicateGroups != 0 {
		t.Fatalf("NOT NULL over the child's NULL: %+v, want 1 null row", rep)
	}
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.ExecContext(ctx, `ALTER TABLE base ADD PRIMARY KEY (email)`)
	_ = tx.Rollback()
	if err == nil || !strings.Contains(err.Error(), `"kid" contains null values`) {
		t.Fatalf("ADD PRIMARY KEY on the parent: %v, want the child's NULL refused", err)
	}
	exec(t, db.SQL(), `INSERT INTO base VALUES (5, 'b')`)
	spec.NotNull = false
	if rep := check(spec); rep.DuplicateGroups != 1 || rep.SurplusRows != 1 || engineBuilds(t, db.SQL(), spec) {
		t.Fatalf("a key the parent repeats: %+v, want 1 group", rep)
	}

	exec(t, db.SQL(), `CREATE TABLE parted (region text, email text) PARTITION BY LIST (region)`)
	exec(t, db.SQL(), `CREATE TABLE parted_eu PARTITION OF parted FOR VALUES IN ('eu')`)
	exec(t, db.SQL(), `INSERT INTO parted VALUES ('eu', 'a'), ('eu', 'a')`)
	pspec := uniquecheck.Spec{Table: "parted", Keys: []string{"region", "email"}}
	if rep := check(pspec); rep.DuplicateGroups != 1 || engineBuilds(t, db.SQL(), pspec) {
		t.Fatalf("a partition's duplicate through its partitioned table: %+v, want 1 group", rep)
	}
}

// TestDedupeSQLDeletesOnlyTheSurplusOfEachTable: on PostgreSQL a dedupe
// script names each row with its table (tableoid) beside its ctid or
// primary key: on a partitioned table without a primary key it deletes
// the surplus row of one partition and no row of another that shares its
// ctid; on a table others INHERITS from it ranks and deletes the table's
// own rows only (Report.Only), leaving a child's rows, of the same key
// and ctid, alone. The index builds after each.
func TestDedupeSQLDeletesOnlyTheSurplusOfEachTable(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	ctx := context.Background()
	rows := func(query string) string {
		t.Helper()
		var s string
		if err := db.QueryRowContext(ctx, query).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	exec(t, db.SQL(), `CREATE TABLE parted (region text, email text) PARTITION BY LIST (region)`)
	exec(t, db.SQL(), `CREATE TABLE parted_eu PARTITION OF parted FOR VALUES IN ('eu')`)
	exec(t, db.SQL(), `CREATE TABLE parted_us PARTITION OF parted FOR VALUES IN ('us')`)
	exec(t, db.SQL(), `INSERT INTO parted VALUES ('eu', 'a'), ('eu', 'a'), ('us', 'x'), ('us', 'y')`)
	spec := uniquecheck.Spec{Table: "parted", Keys: []string{"region", "email"}}
	rep, err := uniquecheck.Check(ctx, db, spec)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Only || rep.SurplusRows != 1 {
		t.Fatalf("partitioned: only %v, %d surplus rows; want the whole table, 1", rep.Only, rep.SurplusRows)
	}
	runDedupe(t, db, rep, uniquecheck.KeepMinID)
	if got := rows(`SELECT string_agg(region || ':' || email, ',' ORDER BY region, email) FROM parted`); got != "eu:a,us:x,us:y" {
		t.Fatalf("partitioned after the script: %s, want eu:a,us:x,us:y (no row of another partition)", got)
	}
	if !engineBuilds(t, db.SQL(), spec) {
		t.Fatal("partitioned: the index fails after the script")
	}

	exec(t, db.SQL(), `CREATE TABLE base (email text)`)
	exec(t, db.SQL(), `CREATE TABLE kid () INHERITS (base)`)
	exec(t, db.SQL(), `INSERT INTO base VALUES ('a'), ('a'); INSERT INTO kid VALUES ('a'), ('a'), ('b')`)
	spec = uniquecheck.Spec{Table: "base", Keys: []string{"email"}}
	if rep, err = uniquecheck.Check(ctx, db, spec); err != nil {
		t.Fatal(err)
	}
	if !rep.Only || rep.SurplusRows != 1 {
		t.Fatalf("parent: only %v, %d surplus rows; want its own rows, 1", rep.Only, rep.SurplusRows)
	}
	runDedupe(t, db, rep, uniquecheck.KeepMinID)
	if got := rows(`SELECT string_agg(email, ',' ORDER BY email) FROM ONLY base`) + "/" + rows(`SELECT string_agg(email, ',' ORDER BY email) FROM kid`); got != "a/a,a,b" {
		t.Fatalf("after the script, the parent's and the child's rows: %s, want a/a,a,b", got)
	}
	if !engineBuilds(t, db.SQL(), spec) {
		t.Fatal("parent: the index fails after the script")
	}
}
