package getorcreate_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/getorcreate"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestEdgesLexerBoundsEachEngineRunsAsADelete holds the edges of the
// lexer (internal/sqllex) where a quote, a comment or a dollar quote
// ends: each select below is one its engine runs as a DELETE (shown
// first in a transaction rolled back), and Do must refuse it and delete
// nothing. On PostgreSQL: a dollar quote whose body begins with its own
// tag's tail ($a$a$'$a$) ends at its second $a$, not its first; $$'$$ is
// a dollar quote, so its quote opens no string; with
// standard_conforming_strings off a backslash escapes in n'…' as in
// '…'. On SQLite: a -- comment runs past a carriage return to the
// newline; a `…` name ends at its backquote, not at a double quote. A
// select written with Windows line endings, or naming a column
// last_update or insert_time, reads the row.
func TestEdgesLexerBoundsEachEngineRunsAsADelete(t *testing.T) {
	t.Parallel()
	type bypass struct {
		sel string
		off bool // run with standard_conforming_strings off
	}
	bypasses := map[string][]bypass{
		racefree.Postgres: {
			{sel: "WITH v AS (SELECT $a$a$'$a$ AS a), gone AS (DELETE FROM users RETURNING 1) SELECT id, email FROM users WHERE lower(email) = lower(?1)"},
			{sel: "WITH v AS (SELECT $$'$$ AS a), gone AS (DELETE FROM users RETURNING 1) SELECT id, email FROM users WHERE lower(email) = lower(?1)"},
			{sel: `WITH v AS (SELECT n'\'' AS a), gone AS (DELETE FROM users RETURNING 1) SELECT id, email FROM users WHERE lower(email) = lower(?1) --'`, off: true},
		},
		racefree.SQLite: {
			{sel: "WITH k AS (SELECT lower(?1) AS e) -- x\r'\nDELETE FROM users WHERE lower(email) = (SELECT e FROM k) RETURNING id, email --'"},
			{sel: "WITH k AS (SELECT lower(?1) AS `e\"`) DELETE FROM users WHERE lower(email) = (SELECT `e\"` FROM k) RETURNING id, email"},
		},
	}
	reads := []string{
		"SELECT id, email\r\nFROM users\r\nWHERE lower(email) = lower(?1);\r\n",
		"SELECT id AS insert_time, email AS last_update FROM users WHERE lower(email) = lower(?1)",
	}
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		setup(t, db)
		ctx := context.Background()
		ins := onEngine(db, "INSERT INTO users (email, handle) VALUES (?1, ?2) ON CONFLICT (lower(email)) DO NOTHING RETURNING id, email")
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
		do := func(exec racefree.Executor, sel string) (user, bool, error) {
			var u user
			q := getorcreate.Query{Insert: ins, InsertArgs: []any{"kept@x", "h-kept@x"}, Select: onEngine(db, sel), SelectArgs: []any{"kept@x"}}
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
			tx := begin(b.off)
			rows, err := tx.QueryContext(ctx, onEngine(db, b.sel), "kept@x")
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
			if u, _, err := do(exec, b.sel); !errors.Is(err, racefree.ErrInvalidInput) {
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
		for _, sel := range reads {
			if u, created, err := do(db, sel); err != nil || created || u != first {
				t.Errorf("%q: %+v, created %v, %v; want the existing row", sel, u, created, err)
			}
		}
	})
}
