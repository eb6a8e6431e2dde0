package getorcreate_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/getorcreate"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestEdgesQueryFormsAtTheirEdge tries the check of a Query's form at its
// edge: queries written in lower case, split over lines and tabs between
// the words the check looks for, or opening with WITH, are accepted and
// create then get the row; the same forms with DO UPDATE, without
// RETURNING, or with a select that is no SELECT are refused before
// anything runs.
func TestEdgesQueryFormsAtTheirEdge(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		setup(t, db)
		ctx := context.Background()
		do := func(q getorcreate.Query, email string) (user, bool, error) {
			var u user
			q.Insert, q.Select = onEngine(db, q.Insert), onEngine(db, q.Select)
			q.InsertArgs, q.SelectArgs = []any{email, "h-" + email}, []any{email}
			created, err := getorcreate.Do(ctx, db, q, func(row *sql.Row) error { return row.Scan(&u.id, &u.email) })
			return u, created, err
		}
		for i, q := range []getorcreate.Query{
			{
				Insert: "insert into users (email, handle)\n\tvalues (?1, ?2)\n\ton  conflict (lower(email))\n\tdo\n\t\tnothing\n\treturning id, email",
				Select: "\n\tselect id, email from users\n\twhere lower(email) = lower(?1)",
			},
			{
				Insert: "  WITH v (email, handle) AS (VALUES (?1, ?2)) INSERT INTO users (email, handle) SELECT email, handle FROM v WHERE true ON CONFLICT (lower(email)) DO NOTHING RETURNING id, email",
				Select: "with k (e) as (select lower(?1)) select id, email from users, k where lower(email) = k.e",
			},
		} {
			email := []string{"lower@x", "with@x"}[i]
			first, created, err := do(q, email)
			if err != nil || !created || first.email != email {
				t.Fatalf("%q / %q: %+v, created %v, %v; want the row created", q.Insert, q.Select, first, created, err)
			}
			again, created, err := do(q, email)
			if err != nil || created || again != first {
				t.Fatalf("%q / %q again: %+v, created %v, %v; want %+v got", q.Insert, q.Select, again, created, err, first)
			}
		}
		before := count(t, db)
		sel := "select id, email from users where lower(email) = lower(?1)"
		for _, q := range []getorcreate.Query{
			{Insert: "insert into users (email, handle) values (?1, ?2)\non conflict (lower(email))\ndo update set handle = excluded.handle\nreturning id, email", Select: sel},
			{Insert: "insert into users (email, handle) values (?1, ?2)\non conflict (lower(email))\ndo\tnothing", Select: sel},
			{Insert: "with v (email) as (values (?1)) insert into users (email, handle) select email, ?2 from v where true returning id, email", Select: sel},
			{Insert: queries[db.Engine()].insert, Select: "  delete from users where lower(email) = lower(?1) returning id, email"},
		} {
			if _, _, err := do(q, "refused@x"); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%q / %q: %v, want ErrInvalidInput", q.Insert, q.Select, err)
			}
		}
		if got := count(t, db); got != before {
			t.Fatalf("%d rows after the refused queries, want %d", got, before)
		}
	})
}

// TestEdgesASelectThatChangesDataIsRefused gives Do selects that start
// with SELECT or WITH but change data (a data-changing common table
// expression, WITH … DELETE/UPDATE/INSERT … RETURNING, a second
// statement after a semicolon) while the key exists: each is an
// InputError and nothing runs, the row stays. Selects that only spell
// those words inside a literal, a quoted identifier, a comment, or as a
// locking clause or the replace() function, read the row.
func TestEdgesASelectThatChangesDataIsRefused(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		setup(t, db)
		ctx := context.Background()
		ins := onEngine(db, "INSERT INTO users (email, handle) VALUES (?1, ?2) ON CONFLICT (lower(email)) DO NOTHING RETURNING id, email")
		do := func(sel, email string) (user, bool, error) {
			var u user
			q := getorcreate.Query{Insert: ins, InsertArgs: []any{email, "h-" + email}, Select: onEngine(db, sel), SelectArgs: []any{email}}
			created, err := getorcreate.Do(ctx, db, q, func(row *sql.Row) error { return row.Scan(&u.id, &u.email) })
			return u, created, err
		}
		const plain = "SELECT id, email FROM users WHERE lower(email) = lower(?1)"
		first, created, err := do(plain, "kept@x")
		if err != nil || !created {
			t.Fatalf("create: %+v, %v, %v", first, created, err)
		}
		before := count(t, db)
		for _, sel := range []string{
			"WITH gone AS (DELETE FROM users WHERE lower(email) = lower(?1) RETURNING id, email) SELECT id, email FROM gone",
			"with k (e) as (select lower(?1)) delete from users where lower(email) = (select e from k) returning id, email",
			"WITH k (e) AS (SELECT lower(?1)) UPDATE users SET handle = 'taken' WHERE lower(email) = (SELECT e FROM k) RETURNING id, email",
			"WITH k (e) AS (SELECT ?1) INSERT INTO users (email, handle) SELECT e || '.copy', 'copy' FROM k RETURNING id, email",
			"WITH k (e) AS (SELECT ?1) REPLACE INTO users (email, handle) SELECT e, 'replaced' FROM k",
			"SELECT id, email FROM users WHERE lower(email) = lower(?1); DELETE FROM users",
			"WITH k (e) AS (SELECT ?1) MERGE INTO users USING k ON false WHEN NOT MATCHED THEN DO NOTHING",
			"SELECT id, email INTO stolen FROM users WHERE lower(email) = lower(?1)",
		} {
			if u, _, err := do(sel, "kept@x"); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%q: %+v, %v; want ErrInvalidInput", sel, u, err)
			}
		}
		if got := count(t, db); got != before {
			t.Fatalf("%d rows after the refused selects, want %d", got, before)
		}
		if _, err := db.ExecContext(ctx, "SELECT 1 FROM stolen"); err == nil {
			t.Fatal("SELECT … INTO stolen created the table stolen")
		}
		var handle string
		if err := db.QueryRowContext(ctx, onEngine(db, "SELECT handle FROM users WHERE id = ?1"), first.id).Scan(&handle); err != nil || handle != "h-kept@x" {
			t.Fatalf("the row's handle is %q, %v; want it untouched", handle, err)
		}
		reads := []string{
			"SELECT id, email FROM users WHERE lower(email) = lower(?1) AND handle <> 'delete from users; update users'",
			"select id, email from users -- then insert into users\nwhere lower(email) = lower(?1)",
			"select /* delete; */ id, email from users where lower(replace(email, 'x', 'x')) = lower(?1)",
			`SELECT id, "email" AS "update" FROM users WHERE lower(email) = lower(?1)`,
			"SELECT id, email FROM users WHERE lower(email) = lower(?1);",
		}
		if db.Engine() == racefree.Postgres {
			reads = append(reads,
				"SELECT id, email FROM users WHERE lower(email) = lower(?1) AND handle <> $q$delete$q$ AND handle <> E'it\\'s' FOR UPDATE",
				"SELECT id, email FROM users WHERE lower(email) = lower(?1) FOR NO KEY UPDATE",
			)
		} else {
			reads = append(reads, "SELECT id, [email] FROM users WHERE lower(`email`) = lower(?1) AND handle <> 'update'")
		}
		for _, sel := range reads {
			if u, created, err := do(sel, "kept@x"); err != nil || created || u != first {
				t.Errorf("%q: %+v, created %v, %v; want the existing row", sel, u, created, err)
			}
		}
	})
}

// TestEdgesASelectIsJudgedAsEachEngineReadsIt gives Do selects that one
// engine runs as a data change while a lexer of the other engine's rules
// (or of a dialect neither speaks) reads the change inside a string or a
// comment. Each case is first run on the engine itself, in a transaction
// rolled back, to show that the engine deletes rows with it; then Do
// refuses it and deletes nothing. On PostgreSQL: [ is an array's, not a
// quote; block comments nest; a carriage return ends a -- comment; an
// E'…' continued on the next line escapes there too; with
// standard_conforming_strings off a backslash escapes in '…' and in
// n'…'; a dollar quote whose body begins with its own tag's tail
// ($a$a$'$a$) ends at its second $a$, not its first; $$'$$ is a dollar
// quote, so its quote opens no string. On SQLite: block comments do not
// nest; E'\' is a word and a string with no escape; $q$ is a parameter,
// not a dollar quote; a Tcl variable's (…) holds a quote; a -- comment
// runs past a carriage return to the newline; a `…` name ends at its
// backquote, not at a double quote. Selects that use arrays (ARRAY[1,
// 2], a[1]), nested comments, dollar quotes, SQLite's [email], Windows
// line endings or columns named insert_time and last_update read the
// row; a select
// that only the other engine's reading finds a second statement in is
// refused, and the error names that reading.
func TestEdgesASelectIsJudgedAsEachEngineReadsIt(t *testing.T) {
	t.Parallel()
	type bypass struct {
		sel  string
		args []any // after the email
		off  bool  // run with standard_conforming_strings off
	}
	bypasses := map[string][]bypass{
		racefree.Postgres: {
			{sel: "WITH v AS (SELECT ARRAY['a]', 'b'] AS a), gone AS (DELETE FROM users RETURNING 1) SELECT id, email FROM users WHERE lower(email) = lower(?1) AND 'c' <> ''"},
			{sel: "WITH v AS (SELECT 1 /* /* */ ' */ AS a), gone AS (DELETE FROM users RETURNING 1) SELECT id, email FROM users WHERE lower(email) = lower(?1) -- '"},
			{sel: "WITH v AS (SELECT 1 AS a) -- then\r, gone AS (DELETE FROM users RETURNING 1) SELECT id, email FROM users WHERE lower(email) = lower(?1)"},
			{sel: "WITH v AS (SELECT E'x'\n'\\' ' AS a), gone AS (DELETE FROM users RETURNING 1) SELECT id, email FROM users WHERE lower(email) = lower(?1)"},
			{sel: "WITH v AS (SELECT 'x\\' AS a, ' AS b), gone AS (DELETE FROM users RETURNING 1) SELECT id, email FROM users WHERE lower(email) = lower(?1)", off: true},
			{sel: "WITH v AS (SELECT $a$a$'$a$ AS a), gone AS (DELETE FROM users RETURNING 1) SELECT id, email FROM users WHERE lower(email) = lower(?1)"},
			{sel: "WITH v AS (SELECT $$'$$ AS a), gone AS (DELETE FROM users RETURNING 1) SELECT id, email FROM users WHERE lower(email) = lower(?1)"},
			{sel: `WITH v AS (SELECT n'\'' AS a), gone AS (DELETE FROM users RETURNING 1) SELECT id, email FROM users WHERE lower(email) = lower(?1) --'`, off: true},
		},
		racefree.SQLite: {
			{sel: "WITH k AS (SELECT 1 /* /* */ AS a) DELETE FROM users WHERE lower(email) = lower(?1) RETURNING id, email -- */"},
			{sel: "WITH k (e) AS (SELECT e'\\' FROM (SELECT 1 AS e)) DELETE FROM users WHERE lower(email) = lower(?1) RETURNING id, email --'"},
			{sel: "WITH k AS (SELECT lower(?1) AS e, $q$ AS z) DELETE FROM users WHERE lower(email) = (SELECT e FROM k) RETURNING id, coalesce($q$, email)", args: []any{sql.Named("q$", nil)}},
			{sel: "WITH k AS (SELECT lower(?1) AS e, $a(') AS z) DELETE FROM users WHERE lower(email) = (SELECT e FROM k) RETURNING id, email", args: []any{sql.Named("a(')", nil)}},
			{sel: "WITH k AS (SELECT lower(?1) AS e, @a(') AS z) DELETE FROM users WHERE lower(email) = (SELECT e FROM k) RETURNING id, email", args: []any{sql.Named("a(')", nil)}},
			{sel: "WITH k AS (SELECT lower(?1) AS e) -- x\r'\nDELETE FROM users WHERE lower(email) = (SELECT e FROM k) RETURNING id, email --'"},
			{sel: "WITH k AS (SELECT lower(?1) AS `e\"`) DELETE FROM users WHERE lower(email) = (SELECT `e\"` FROM k) RETURNING id, email"},
		},
	}
	reads := map[string][]string{
		racefree.Postgres: {
			"SELECT id, email FROM users WHERE lower(email) = lower(?1) AND ARRAY[1, 2] <> ARRAY[3] AND (ARRAY['a]', 'b'])[1] = 'a]'",
			"SELECT id, email /* outer /* inner */ still a comment */ FROM users WHERE lower(email) = lower(?1)",
			"SELECT id, email FROM users WHERE lower(email) = lower(?1) AND handle <> $q$delete$q$",
			"SELECT id, email\r\nFROM users\r\nWHERE lower(email) = lower(?1);\r\n",
			"SELECT id AS insert_time, email AS last_update FROM users WHERE lower(email) = lower(?1)",
		},
		racefree.SQLite: {
			"SELECT id, [email] FROM users WHERE lower([email]) = lower(?1) AND handle <> 'C:\\'",
			"SELECT id, email /* a /* b */ FROM users WHERE lower(email) = lower(?1)",
			"SELECT id, email\r\nFROM users\r\nWHERE lower(email) = lower(?1);\r\n",
			"SELECT id AS insert_time, email AS last_update FROM users WHERE lower(email) = lower(?1)",
		},
	}
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		setup(t, db)
		ctx := context.Background()
		ins := onEngine(db, "INSERT INTO users (email, handle) VALUES (?1, ?2) ON CONFLICT (lower(email)) DO NOTHING RETURNING id, email")
		// begin opens a transaction, with standard_conforming_strings
		// off when off.
		begin := func(off bool) *sql.Tx {
			tx, err := db.SQL().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if off {
				if _, err := tx.ExecContext(ctx, "SET LOCAL standard_conforming_strings = off"); err != nil {
					t.Fatal(err)
				}
			}
			return tx
		}
		do := func(exec racefree.Executor, sel string, args ...any) (user, bool, error) {
			var u user
			q := getorcreate.Query{Insert: ins, InsertArgs: []any{"kept@x", "h-kept@x"}, Select: onEngine(db, sel), SelectArgs: append([]any{"kept@x"}, args...)}
			created, err := getorcreate.Do(ctx, exec, q, func(row *sql.Row) error { return row.Scan(&u.id, &u.email) })
			return u, created, err
		}
		first, created, err := do(db, "SELECT id, email FROM users WHERE lower(email) = lower(?1)")
		if err != nil || !created {
			t.Fatalf("create: %+v, %v, %v", first, created, err)
		}
		if _, err := db.ExecContext(ctx, onEngine(db, "INSERT INTO users (email, handle) VALUES (?1, ?2)"), "other@x", "h-other@x"); err != nil {
			t.Fatal(err)
		}
		before := count(t, db)
		for _, b := range bypasses[db.Engine()] {
			args := append([]any{"kept@x"}, b.args...)
			tx := begin(b.off)
			rows, err := tx.QueryContext(ctx, onEngine(db, b.sel), args...)
			if err != nil {
				t.Fatalf("%q: the engine refuses it: %v", b.sel, err)
			}
			for rows.Next() {
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				t.Fatalf("%q: %v", b.sel, err)
			}
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM users").Scan(&n); err != nil || n >= before {
				t.Fatalf("%q: %d rows once the engine ran it, %v; want fewer than %d (the case shows nothing)", b.sel, n, err, before)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			var exec racefree.Executor = db
			if b.off {
				tx = begin(true)
				exec = tx
			}
			if u, _, err := do(exec, b.sel, b.args...); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%q: %+v, %v; want ErrInvalidInput", b.sel, u, err)
			}
			if b.off {
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			if got := count(t, db); got != before {
				t.Fatalf("%q: %d rows after Do, want %d", b.sel, got, before)
			}
		}
		for _, sel := range reads[db.Engine()] {
			if u, created, err := do(db, sel); err != nil || created || u != first {
				t.Errorf("%q: %+v, created %v, %v; want the existing row", sel, u, created, err)
			}
		}
		// PostgreSQL reads E'…' with an escaped quote as one string;
		// SQLite's reading ends it at the backslash and finds a second
		// statement: refused, and the error says whose reading.
		if db.Engine() == racefree.Postgres {
			sel := "SELECT id, email FROM users WHERE lower(email) = lower(?1) AND handle <> E'it\\'s; delete'"
			if _, _, err := do(db, sel); !errors.Is(err, racefree.ErrInvalidInput) || !strings.Contains(err.Error(), "as SQLite reads it") {
				t.Errorf("%q: %v; want ErrInvalidInput naming SQLite's reading", sel, err)
			}
		}
		if got := count(t, db); got != before {
			t.Fatalf("%d rows after the reads, want %d", got, before)
		}
	})
}
