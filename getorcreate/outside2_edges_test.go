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

// The tests of this file prove from outside, a second time, what the
// package documentation promises at edges the other tests leave open: a
// select that only looks like a SELECT, an insert whose RETURNING or DO
// UPDATE hides where the check of its form did not look, the field an
// InputError blames, the driver's error a *ConflictError carries, and a
// ctx that ends as Do opens its savepoint in the caller's transaction.

// refusedBeforeAnythingRuns runs Do with q on db and checks that it is an
// InputError blaming field, that no statement ran (scan never called),
// and that no row exists.
func refusedBeforeAnythingRuns(t *testing.T, db *racefree.DB, q getorcreate.Query, field string) {
	t.Helper()
	q.Insert, q.Select = onEngine(db, q.Insert), onEngine(db, q.Select)
	q.InsertArgs, q.SelectArgs = []any{"refused@x", "refused"}, []any{"refused@x"}
	scans := 0
	created, err := getorcreate.Do(context.Background(), db, q, func(row *sql.Row) error {
		scans++
		var u user
		return row.Scan(&u.id, &u.email)
	})
	var ie *racefree.InputError
	if !errors.As(err, &ie) || !errors.Is(err, racefree.ErrInvalidInput) || ie.Field != field {
		t.Errorf("%q / %q: created %v, %v; want an InputError blaming %s", q.Insert, q.Select, created, err, field)
	}
	if scans != 0 {
		t.Errorf("%q / %q: %d scans; want none (refused before anything runs)", q.Insert, q.Select, scans)
	}
	if got := count(t, db); got != 0 {
		t.Fatalf("%q / %q: %d rows after a refused query, want none", q.Insert, q.Select, got)
	}
}

// TestOutside2EdgesASelectThatIsNoSelectIsRefused: the select must be a
// SELECT (or WITH) as its first word, not its first letters nor a word
// further on: a select that only begins with those letters (a missing
// space, selectid …), or holds a SELECT after another first word
// (VALUES ((SELECT …)), which answers a row of NULL when no user has the
// key; EXPLAIN SELECT …), is an InputError blaming Select before the
// insert runs, on both engines, and so is a select holding a NUL byte.
func TestOutside2EdgesASelectThatIsNoSelectIsRefused(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		setup(t, db)
		ins := queries[racefree.SQLite].insert // ?N: onEngine writes it for db
		for _, sel := range []string{
			"selectid, email FROM users WHERE lower(email) = lower(?1)",
			"WITHDRAWN AS (SELECT 1) SELECT id, email FROM users WHERE lower(email) = lower(?1)",
			"VALUES ((SELECT id FROM users WHERE lower(email) = lower(?1)), ?1)",
			"EXPLAIN SELECT id, email FROM users WHERE lower(email) = lower(?1)",
			"SELECT id, email FROM users WHERE lower(email) = lower(?1)\x00",
		} {
			refusedBeforeAnythingRuns(t, db, getorcreate.Query{Insert: ins, Select: sel}, "Select")
		}
	})
}

// TestOutside2EdgesAnInsertThatCannotWorkIsRefused: the insert's RETURNING
// must belong to its ON CONFLICT … DO NOTHING, not to a second statement
// after a semicolon, and DO UPDATE is refused however it is written (in
// lower or mixed case, with a comment after it that says DO NOTHING): each
// is an InputError blaming Insert before anything runs, on both engines,
// and so is an insert holding a NUL byte.
func TestOutside2EdgesAnInsertThatCannotWorkIsRefused(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		setup(t, db)
		sel := queries[racefree.SQLite].sel
		for _, ins := range []string{
			"INSERT INTO users (email, handle) VALUES (?1, ?2) ON CONFLICT (lower(email)) DO NOTHING; INSERT INTO users (email, handle) VALUES ('second@x', 'second') RETURNING id, email",
			"insert into users (email, handle) values (?1, ?2) on conflict (lower(email)) do update set handle = excluded.handle -- was: DO NOTHING\nreturning id, email",
			"INSERT INTO users (email, handle) VALUES (?1, ?2) ON CONFLICT (lower(email)) Do Update SET handle = 'do nothing' RETURNING id, email",
			queries[racefree.SQLite].insert + "\x00",
		} {
			refusedBeforeAnythingRuns(t, db, getorcreate.Query{Insert: ins, Select: sel}, "Insert")
		}
	})
}

// TestOutside2EdgesAConflictWrapsTheDriversError: a *ConflictError wraps
// the driver's unique violation, as ConflictError.Unwrap promises, beside
// racefree.ErrConflict: errors.Is finds its Err, and errors.As the
// driver's error, with SQLSTATE 23505 on PostgreSQL and the extended code
// 2067 (SQLITE_CONSTRAINT_UNIQUE) on SQLite.
func TestOutside2EdgesAConflictWrapsTheDriversError(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		setup(t, db)
		ins := queries[db.Engine()].insert
		if _, created, err := userByEmail(ctx, db, db, ins, "a@x", "taken"); err != nil || !created {
			t.Fatalf("first: %v, %v", created, err)
		}
		_, created, err := userByEmail(ctx, db, db, ins, "b@x", "taken")
		var ce *getorcreate.ConflictError
		if created || !errors.As(err, &ce) || !errors.Is(err, racefree.ErrConflict) || ce.Err == nil {
			t.Fatalf("a conflict on the handle: created %v, %v; want a *ConflictError with the driver's error", created, err)
		}
		if !errors.Is(err, ce.Err) {
			t.Fatalf("%v: the *ConflictError does not wrap its Err %v", err, ce.Err)
		}
		switch db.Engine() {
		case racefree.Postgres:
			var st interface{ SQLState() string }
			if !errors.As(err, &st) || st.SQLState() != "23505" {
				t.Fatalf("%v: errors.As finds no driver error with SQLSTATE 23505", err)
			}
		default:
			var sc interface{ Code() int }
			if !errors.As(err, &sc) || sc.Code() != 2067 {
				t.Fatalf("%v: errors.As finds no driver error with code 2067", err)
			}
		}
	})
}

// TestOutside2EdgesAContextThatEndsAtTheSavepoint: in the caller's
// *sql.Tx, a ctx that ends as Do opens the savepoint its insert runs
// under (after Do's own check) is the context's error, matching
// context.Canceled and never an unknown outcome, with no insert sent;
// the caller's transaction stays usable: a Do in it then creates the
// row, and its commit keeps one row, on both engines.
func TestOutside2EdgesAContextThatEndsAtTheSavepoint(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		setup(t, db)
		ins := queries[db.Engine()].insert
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		ends := newEndsAtTheSend()
		scans := 0
		var u user
		created, err := getorcreate.Do(ends, tx, getorcreate.Query{
			Insert: ins, InsertArgs: []any{"sp@x", "sp"},
			Select: queries[db.Engine()].sel, SelectArgs: []any{"sp@x"},
		}, func(row *sql.Row) error { scans++; return row.Scan(&u.id, &u.email) })
		if created || !errors.Is(err, context.Canceled) || errors.Is(err, racefree.ErrUnavailable) {
			t.Fatalf("a ctx that ended at the savepoint: created %v, %v; want context.Canceled, not an unknown outcome", created, err)
		}
		if scans != 0 || ends.asked.Load() < 2 {
			t.Fatalf("%d scans, the ctx asked %d times; want no insert sent, and the savepoint tried", scans, ends.asked.Load())
		}
		if _, created, err := userByEmail(ctx, db, tx, ins, "sp@x", "sp"); err != nil || !created {
			t.Fatalf("in the same transaction after the ended ctx: created %v, %v; want created", created, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if got := countEmail(t, db, "sp@x"); got != 1 {
			t.Fatalf("%d rows after the commit, want 1", got)
		}
	})
}
