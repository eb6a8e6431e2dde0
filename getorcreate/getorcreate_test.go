package getorcreate_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/getorcreate"
	"github.com/racefree/racefree/internal/testdb"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// schema is a users table whose email is unique case-insensitively, through
// an expression index, and whose handle is unique too.
var schema = map[string][]string{
	racefree.SQLite: {
		`CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT NOT NULL, handle TEXT NOT NULL)`,
		`CREATE UNIQUE INDEX users_email ON users (lower(email))`,
		`CREATE UNIQUE INDEX users_handle ON users (handle)`,
	},
	racefree.Postgres: {
		`CREATE TABLE users (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email TEXT NOT NULL, handle TEXT NOT NULL)`,
		`CREATE UNIQUE INDEX users_email ON users (lower(email))`,
		`CREATE UNIQUE INDEX users_handle ON users (handle)`,
	},
}

// queries are the get-or-create of a user by email, per engine.
var queries = map[string]struct{ insert, insertWrongTarget, insertNoTarget, sel string }{
	racefree.SQLite: {
		insert:            `INSERT INTO users (email, handle) VALUES (?1, ?2) ON CONFLICT (lower(email)) DO NOTHING RETURNING id, email`,
		insertWrongTarget: `INSERT INTO users (email, handle) VALUES (?1, ?2) ON CONFLICT (email) DO NOTHING RETURNING id, email`,
		insertNoTarget:    `INSERT INTO users (email, handle) VALUES (?1, ?2) ON CONFLICT DO NOTHING RETURNING id, email`,
		sel:               `SELECT id, email FROM users WHERE lower(email) = lower(?1)`,
	},
	racefree.Postgres: {
		insert:            `INSERT INTO users (email, handle) VALUES ($1, $2) ON CONFLICT (lower(email)) DO NOTHING RETURNING id, email`,
		insertWrongTarget: `INSERT INTO users (email, handle) VALUES ($1, $2) ON CONFLICT (email) DO NOTHING RETURNING id, email`,
		insertNoTarget:    `INSERT INTO users (email, handle) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING id, email`,
		sel:               `SELECT id, email FROM users WHERE lower(email) = lower($1)`,
	},
}

type user struct {
	id    int64
	email string
}

func setup(t testing.TB, db *racefree.DB) {
	t.Helper()
	for _, q := range schema[db.Engine()] {
		if _, err := db.ExecContext(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
}

// userByEmail gets or creates the user with email, giving new users handle.
func userByEmail(ctx context.Context, db *racefree.DB, exec racefree.Executor, insert, email, handle string) (user, bool, error) {
	var u user
	created, err := getorcreate.Do(ctx, exec, getorcreate.Query{
		Insert: insert, InsertArgs: []any{email, handle},
		Select: queries[db.Engine()].sel, SelectArgs: []any{email},
	}, func(row *sql.Row) error { return row.Scan(&u.id, &u.email) })
	return u, created, err
}

func count(t testing.TB, db *racefree.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM users`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCreatesThenGetsThroughAnExpressionIndex(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		setup(t, db)
		ins := queries[db.Engine()].insert
		first, created, err := userByEmail(ctx, db, db, ins, "Alice@Example.com", "alice")
		if err != nil || !created {
			t.Fatalf("first: %+v, created %v, %v; want created", first, created, err)
		}
		again, created, err := userByEmail(ctx, db, db, ins, "alice@example.COM", "alice2")
		if err != nil || created {
			t.Fatalf("second: %+v, created %v, %v; want the existing row", again, created, err)
		}
		if again != first {
			t.Fatalf("got %+v, want %+v", again, first)
		}
		if got, want := count(t, db), 1; got != want {
			t.Fatalf("%d rows, want %d", got, want)
		}
	})
}

// TestConflictTargetMustMatchTheExpression proves the pitfall: against a
// unique index on lower(email), ON CONFLICT (email) is an error on both
// engines, reported as ErrConflictTarget, and writes nothing.
func TestConflictTargetMustMatchTheExpression(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		setup(t, db)
		_, _, err := userByEmail(ctx, db, db, queries[db.Engine()].insertWrongTarget, "a@x", "a")
		if !errors.Is(err, getorcreate.ErrConflictTarget) {
			t.Fatalf("ON CONFLICT (email): %v, want ErrConflictTarget", err)
		}
		if got := count(t, db); got != 0 {
			t.Fatalf("%d rows, want 0", got)
		}
	})
}

// TestConflictOnAnotherIndexIsNotAGet shows why a bare ON CONFLICT DO
// NOTHING is risky: a conflict on the handle index returns no row, the
// select by email finds none, and Do must fail rather than pretend.
func TestConflictOnAnotherIndexIsNotAGet(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		setup(t, db)
		ins := queries[db.Engine()].insertNoTarget
		if _, created, err := userByEmail(ctx, db, db, ins, "a@x", "taken"); err != nil || !created {
			t.Fatalf("first: %v %v", created, err)
		}
		_, created, err := userByEmail(ctx, db, db, ins, "b@x", "taken")
		if !errors.Is(err, getorcreate.ErrVanished) || created {
			t.Fatalf("conflict on handle: created %v, %v; want ErrVanished", created, err)
		}
		// With the right target, the same conflict is a plain unique violation.
		_, _, err = userByEmail(ctx, db, db, queries[db.Engine()].insert, "b@x", "taken")
		if !errors.Is(db.InterpretError(err), racefree.ErrConflict) {
			t.Fatalf("conflict on handle with a target: %v, want ErrConflict", err)
		}
	})
}

func TestRefusesQueriesThatCannotWork(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		setup(t, db)
		q := queries[db.Engine()]
		for _, c := range []struct{ insert, sel string }{
			{`INSERT INTO users (email, handle) VALUES ('a', 'a') RETURNING id, email`, q.sel},
			{`INSERT INTO users (email, handle) VALUES ('a', 'a') ON CONFLICT DO NOTHING`, q.sel},
			{`INSERT INTO users (email, handle) VALUES ('a', 'a') ON CONFLICT (lower(email)) DO UPDATE SET handle = 'b' RETURNING id, email`, q.sel},
			{q.insert, `DELETE FROM users`},
		} {
			_, err := getorcreate.Do(context.Background(), db, getorcreate.Query{Insert: c.insert, Select: c.sel},
				func(*sql.Row) error { t.Fatal("ran a query"); return nil })
			if !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%q / %q: %v, want ErrInvalidInput", c.insert, c.sel, err)
			}
		}
		if got := count(t, db); got != 0 {
			t.Fatalf("%d rows", got)
		}
	})
}

// TestConcurrentCallersCreateOnce runs 64 get-or-creates of one key at once,
// on the pool and inside the callers' own transactions.
func TestConcurrentCallersCreateOnce(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		setup(t, db)
		ctx := context.Background()
		ins := queries[db.Engine()].insert
		for _, mode := range []string{"pool", "tx"} {
			t.Run(mode, func(t *testing.T) {
				const n = 64
				email := "racer-" + mode + "@example.com"
				users := make([]user, n)
				created := make([]bool, n)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						var err error
						if mode == "pool" {
							users[i], created[i], err = userByEmail(ctx, db, db, ins, email, email)
						} else {
							err = db.InTx(ctx, func(tx *sql.Tx) error {
								users[i], created[i], err = userByEmail(ctx, db, tx, ins, email, email)
								return err
							})
						}
						if err != nil {
							t.Error(err)
						}
					}()
				}
				close(start)
				wg.Wait()
				winners := 0
				for i := range n {
					if created[i] {
						winners++
					}
					if users[i] != users[0] || users[i].id == 0 {
						t.Fatalf("caller %d got %+v, caller 0 got %+v; want the same row", i, users[i], users[0])
					}
				}
				if winners != 1 {
					t.Fatalf("%d callers created the row, want 1", winners)
				}
				var rows int
				if err := db.QueryRowContext(ctx, map[string]string{
					racefree.SQLite:   `SELECT count(*) FROM users WHERE email = ?`,
					racefree.Postgres: `SELECT count(*) FROM users WHERE email = $1`,
				}[db.Engine()], email).Scan(&rows); err != nil || rows != 1 {
					t.Fatalf("%d rows for the key (%v), want 1", rows, err)
				}
			})
		}
	})
}
