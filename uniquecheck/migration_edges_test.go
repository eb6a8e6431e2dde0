package uniquecheck_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/uniquecheck"
)

// TestEdgesMigrationFindsEachUniqueIndex proves that FromMigration finds
// each unique index of a file, with the keys, predicate and notes the file
// means, however it is quoted: dollar quotes whose tags hold the first and
// last letters and digits and a non-ASCII letter, around text with commas
// and parentheses; a schema-qualified operator class; an added UNIQUE
// column whose DEFAULT is one token, comes after UNIQUE, or holds a comma
// before the next ADD COLUMN; a generated column after a type with
// parentheses of its own; earlier UPDATEs of a column used only inside an
// expression key or the predicate; a table created with a CHECK (not a
// UNIQUE) constraint and filled by a copy; and, on SQLite's reading of a
// file PostgreSQL cannot parse, a semicolon inside a string, an empty last
// statement, and statements it cannot read. Each file runs on
// the engine, and each key and predicate read is one the check can run.
func TestEdgesMigrationFindsEachUniqueIndex(t *testing.T) {
	t.Parallel()
	type want struct {
		keys  []string
		where string
		notes []string // substrings of the spec's notes
	}
	type migration struct {
		engine string // "" for both
		file   string
		want   []want
		warns  []string // substrings of the warnings
		nowarn string   // no warning holds it
	}
	cases := []migration{
		{racefree.Postgres, "CREATE UNIQUE INDEX o1 ON items (a pg_catalog.text_pattern_ops, b);\n", []want{{[]string{"a", "b"}, "", nil}}, nil, ""},
		{racefree.Postgres, "ALTER TABLE items ADD COLUMN c1 int DEFAULT 7 UNIQUE;\n", []want{{[]string{"7"}, "", nil}}, nil, ""},
		{racefree.Postgres, "ALTER TABLE items ADD COLUMN c1 int UNIQUE DEFAULT 7;\n", []want{{[]string{"7"}, "", nil}}, nil, ""},
		{racefree.Postgres, "ALTER TABLE items ADD COLUMN c2 text UNIQUE DEFAULT coalesce(NULL, 'x'), ADD COLUMN c3 int;\n", []want{{[]string{"coalesce(NULL, 'x')"}, "", nil}}, nil, ""},
		{racefree.Postgres, "ALTER TABLE items ADD COLUMN g numeric(10,2) GENERATED ALWAYS AS (b * 2) STORED UNIQUE;\n", []want{{[]string{"b * 2"}, "", nil}}, nil, ""},
		{"", "UPDATE items SET a = upper(a);\nUPDATE items SET d = 1;\nUPDATE items SET b = 2;\nCREATE UNIQUE INDEX e1 ON items (lower(a)) WHERE d IS NULL;\n",
			[]want{{[]string{"lower(a)"}, "d IS NULL", []string{"line 1 updates a, a column of this index", "line 2 updates d, a column of this index"}}}, nil, ""},
		{"", "CREATE TABLE fresh (id INTEGER, CHECK (id > 0));\nINSERT INTO fresh SELECT id FROM items;\n", nil, nil, "UNIQUE constraint"},
		{"", "CREATE TABLE fresh (id INTEGER, UNIQUE (id));\nINSERT INTO fresh SELECT id FROM items;\n", nil, []string{`line 2: copies existing rows into "fresh", which this migration creates with a UNIQUE constraint`}, ""},
		// A TRUNCATE and a column renamed there and back, before the
		// index: each is a note of the spec it precedes.
		{racefree.Postgres, "TRUNCATE items;\nCREATE UNIQUE INDEX t1 ON items (a);\n",
			[]want{{[]string{"a"}, "", []string{`line 1 truncates "items" before this index is built`}}}, nil, ""},
		{"", "ALTER TABLE items RENAME COLUMN b TO b2;\nALTER TABLE items RENAME COLUMN b2 TO b;\nCREATE UNIQUE INDEX r1 ON items (b);\n",
			[]want{{[]string{"b"}, "", []string{"line 1 renames column b to b2, a column of this index", "line 2 renames column b2 to b, a column of this index"}}}, nil, ""},
		{racefree.SQLite, "UPDATE [items] SET a = 'x;y';\nCREATE UNIQUE INDEX s1 ON [items] (a) WHERE a <> 'x,y';\n;\n",
			[]want{{[]string{"a"}, "a <> 'x,y'", []string{"line 1 updates a, a column of this index"}}}, nil, "skipped"},
	}
	// A dollar quote's tag of the first and last letters and digits, and
	// of a non-ASCII letter (its UTF-8 ends in the byte 0x80).
	for _, tag := range []string{"z", "Z", "x0", "x9", "Ā"} {
		q := "$" + tag + "$"
		key := "coalesce(a, " + q + "), (" + q + ")"
		cases = append(cases, migration{racefree.Postgres, "CREATE UNIQUE INDEX d1 ON items (" + key + ", b) WHERE a <> " + q + "'" + q + ";\n",
			[]want{{[]string{key, "b"}, "a <> " + q + "'" + q, nil}}, nil, ""})
	}
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE items (id INTEGER PRIMARY KEY, a TEXT, b INTEGER, d BIGINT)`)
		exec(t, db.SQL(), `INSERT INTO items VALUES (1, 'x', 1, NULL)`)
		if db.Engine() == racefree.Postgres {
			// A table with no primary key (its rows named by ctid) is
			// warned about; items, with one, is not (below).
			exec(t, db.SQL(), `CREATE TABLE nopk (a TEXT)`)
			rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "nopk", Keys: []string{"a"}})
			if err != nil || !strings.Contains(strings.Join(rep.Warnings, "\n"), "nopk\" has no primary key") {
				t.Fatalf("nopk: report %+v, err %v; want a warning of no primary key", rep, err)
			}
		}
		for _, c := range cases {
			if c.engine != "" && c.engine != db.Engine() {
				continue
			}
			if err := runMigration(t, db, c.file); err != nil {
				t.Fatalf("%s: the engine refuses the file: %v", c.file, err)
			}
			specs, warns, err := uniquecheck.FromMigration(db.Engine(), c.file)
			if err != nil || len(specs) != len(c.want) {
				t.Fatalf("%s: specs %+v, err %v; want %d", c.file, specs, err, len(c.want))
			}
			for i, w := range c.want {
				got := specs[i]
				if strings.Join(got.Keys, "\x00") != strings.Join(w.keys, "\x00") || got.Where != w.where {
					t.Errorf("%s: keys %q where %q; want %q where %q", c.file, got.Keys, got.Where, w.keys, w.where)
				}
				notes := strings.Join(got.Notes, "\n")
				for _, n := range w.notes {
					if !strings.Contains(notes, n) {
						t.Errorf("%s: notes lack %q:\n%s", c.file, n, notes)
					}
				}
				rep, err := uniquecheck.Check(context.Background(), db, got)
				if err != nil {
					t.Fatalf("%s: %v", c.file, err)
				}
				if strings.Contains(strings.Join(rep.Warnings, "\n"), "no primary key") {
					t.Errorf("%s: items has a primary key, yet: %q", c.file, rep.Warnings)
				}
			}
			var all []string
			for _, w := range warns {
				all = append(all, w.String())
			}
			for _, w := range c.warns {
				if !strings.Contains(strings.Join(all, "\n"), w) {
					t.Errorf("%s: warnings lack %q: %q", c.file, w, all)
				}
			}
			if c.nowarn != "" && strings.Contains(strings.Join(all, "\n"), c.nowarn) {
				t.Errorf("%s: a warning holds %q: %q", c.file, c.nowarn, all)
			}
		}
	})
	// On SQLite's reading of a file PostgreSQL cannot parse, a string or
	// a [name] left open ends its statement (a string left open is one
	// the parser skips with a warning), [a][b] is read, never a loop; a
	// semicolon in a [name] or a string ends nothing, and a last statement
	// needs no semicolon.
	for _, c := range []struct {
		file  string
		keys  string
		warns string // the warnings' sources, joined by ","
	}{
		{"CREATE UNIQUE INDEX s2 ON [items] (a);\nSELECT 'x", "a", "line 2"},
		{"CREATE UNIQUE INDEX s2 ON [items] (a);\nSELECT [x", "a", ""},
		{"SELECT [a][b];\nCREATE UNIQUE INDEX s2 ON [items] (a);\n", "a", ""},
		{"UPDATE [it;ems] SET a = 'x;y';\nCREATE UNIQUE INDEX s2 ON [items] (a);\n", "a", ""},
		{"UPDATE [items] SET b = 1;\nCREATE UNIQUE INDEX s2 ON [items] (a)", "a", ""},
		// A string is copied as written: a [ or ` in it is no quote.
		{"CREATE UNIQUE INDEX s2 ON [items] (a) WHERE a <> '[x]' AND a <> '`y`';\n", "a WHERE a <> '[x]' AND a <> '`y`'", ""},
	} {
		specs, warns, err := uniquecheck.FromMigration(racefree.SQLite, c.file)
		var keys, srcs []string
		for _, s := range specs {
			k := strings.Join(s.Keys, ",")
			if s.Where != "" {
				k += " WHERE " + s.Where
			}
			keys = append(keys, k)
		}
		for _, w := range warns {
			srcs = append(srcs, w.Source)
		}
		if err != nil || strings.Join(keys, ";") != c.keys || strings.Join(srcs, ",") != c.warns {
			t.Errorf("%q: keys %q, warnings %v, err %v; want keys %q, warnings at %q", c.file, keys, warns, err, c.keys, c.warns)
		}
	}
	// A unique index SQLite's reading cannot parse is an InputError, never
	// skipped: cut short, or named main.x on a table of another schema.
	for _, file := range []string{
		"CREATE UNIQUE INDEX",
		"CREATE UNIQUE INDEX main.x ON",
		"CREATE UNIQUE INDEX main.x ON other.t ([a]);",
	} {
		if specs, _, err := uniquecheck.FromMigration(racefree.SQLite, file); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("%q: specs %+v, err %v; want ErrInvalidInput", file, specs, err)
		}
	}
}

// TestEdgesSQLiteNamesAreReadAsSQLiteDoes gives FromMigration SQLite files
// PostgreSQL cannot parse, whose names SQLite's reading rewrites: a
// `name` with a doubled ` in it (one ` of the name), a [name] with a " in
// it, and a -- comment holding a quote before them. Each runs on SQLite,
// and the keys read are the columns SQLite indexes, which the check can
// run.
func TestEdgesSQLiteNamesAreReadAsSQLiteDoes(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	exec(t, db.SQL(), "CREATE TABLE q (id INTEGER PRIMARY KEY, `a``b` TEXT, [c\"d] TEXT)")
	for _, c := range []struct {
		file string
		keys string
	}{
		{"CREATE UNIQUE INDEX q1 ON [q] (`a``b`, [c\"d]);\n", "\"a`b\",\"c\"\"d\""},
		{"-- it's the index\nCREATE UNIQUE INDEX q2 ON [q] ([c\"d]) /* ; ' */ WHERE `a``b` <> 'x,y';\n", "\"c\"\"d\" WHERE \"a`b\" <> 'x,y'"},
	} {
		if err := runMigration(t, db, c.file); err != nil {
			t.Fatalf("%s: SQLite refuses the file: %v", c.file, err)
		}
		specs, _, err := uniquecheck.FromMigration(racefree.SQLite, c.file)
		var keys []string
		for _, s := range specs {
			k := strings.Join(s.Keys, ",")
			if s.Where != "" {
				k += " WHERE " + s.Where
			}
			keys = append(keys, k)
			if _, err := uniquecheck.Check(context.Background(), db, s); err != nil {
				t.Errorf("%s: %+v: %v", c.file, s, err)
			}
		}
		if err != nil || strings.Join(keys, ";") != c.keys {
			t.Errorf("%q: keys %q, err %v; want %q", c.file, keys, err, c.keys)
		}
	}
}
