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
		} {
			if u, _, err := do(sel, "kept@x"); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%q: %+v, %v; want ErrInvalidInput", sel, u, err)
			}
		}
		if got := count(t, db); got != before {
			t.Fatalf("%d rows after the refused selects, want %d", got, before)
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
				"SELECT id, email FROM users WHERE lower(email) = lower(?1) AND handle <> $q$delete$q$ AND handle <> E'it\\'s; delete' FOR UPDATE",
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
