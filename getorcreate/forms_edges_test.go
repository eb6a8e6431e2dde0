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
