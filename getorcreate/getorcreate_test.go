package getorcreate_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/getorcreate"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
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
	testdb.ExecAll(t, db, schema[db.Engine()]...)
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
	})
}

// TestConflictOnAnotherIndexNamesIt proves the documented answer to a
// unique violation on another index than the target when no row has the
// key: a *ConflictError naming that index, matching racefree.ErrConflict,
// the same on both engines, and, inside the caller's transaction, a
// transaction that is still usable and commits the caller's other writes.
func TestConflictOnAnotherIndexNamesIt(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		setup(t, db)
		ins := queries[db.Engine()].insert
		if _, created, err := userByEmail(ctx, db, db, ins, "a@x", "taken"); err != nil || !created {
			t.Fatalf("first: %v %v", created, err)
		}
		check := func(err error) {
			t.Helper()
			var ce *getorcreate.ConflictError
			if !errors.As(err, &ce) || !errors.Is(err, racefree.ErrConflict) {
				t.Fatalf("conflict on handle: %v, want a *ConflictError matching ErrConflict", err)
			}
			if !strings.Contains(ce.Constraint, "handle") {
				t.Fatalf("Constraint = %q, want it to name the handle index", ce.Constraint)
			}
		}
		_, created, err := userByEmail(ctx, db, db, ins, "b@x", "taken")
		if created {
			t.Fatal("created")
		}
		check(err)
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			_, _, err := userByEmail(ctx, db, tx, ins, "b@x", "taken")
			check(err)
			// The transaction goes on: the caller picks another handle.
			_, created, err := userByEmail(ctx, db, tx, ins, "b@x", "b")
			if err != nil || !created {
				return fmt.Errorf("after the conflict, in the same transaction: created %v, %w", created, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := count(t, db), 2; got != want {
			t.Fatalf("%d rows, want %d", got, want)
		}
	})
}

// twinSchema is a table whose handle index is created before its email
// index, so that PostgreSQL checks the handle first when it inserts a row.
var twinSchema = map[string][]string{
	racefree.SQLite: {
		`CREATE TABLE twins (id INTEGER PRIMARY KEY, email TEXT NOT NULL, handle TEXT NOT NULL)`,
		`CREATE UNIQUE INDEX twins_handle ON twins (handle)`,
		`CREATE UNIQUE INDEX twins_email ON twins (email)`,
	},
	racefree.Postgres: {
		`CREATE TABLE twins (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email TEXT NOT NULL, handle TEXT NOT NULL)`,
		`CREATE UNIQUE INDEX twins_handle ON twins (handle)`,
		`CREATE UNIQUE INDEX twins_email ON twins (email)`,
	},
}

// TestRaceOnAnotherIndexGetsTheRow re-creates, step by step, the race in
// which a concurrent caller's row for the same key collides with Do's
// insert on the other unique index rather than on the target: on
// PostgreSQL, Do's insert passes the email check, then waits on the
// handle index for a transaction that then commits the same user. Do must
// return that row (created false), not the unique violation, on the pool
// and inside the caller's transaction. SQLite runs writers one at a time,
// so the same sequence is the plain "exists" case there: the same answer.
func TestRaceOnAnotherIndexGetsTheRow(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		testdb.ExecAll(t, db, twinSchema[db.Engine()]...)
		p := func(q string) string { // placeholders per engine
			if db.Engine() == racefree.Postgres {
				return strings.NewReplacer("?1", "$1", "?2", "$2").Replace(q)
			}
			return q
		}
		for _, mode := range []string{"pool", "tx"} {
			t.Run(mode, func(t *testing.T) {
				email, handle := mode+"@x", "h-"+mode
				get := func() (id int64, created bool, err error) {
					run := func(exec racefree.Executor) error {
						created, err = getorcreate.Do(ctx, exec, getorcreate.Query{
							Insert:     p(`INSERT INTO twins (email, handle) VALUES (?1, ?2) ON CONFLICT (email) DO NOTHING RETURNING id`),
							InsertArgs: []any{email, handle},
							Select:     p(`SELECT id FROM twins WHERE email = ?1`), SelectArgs: []any{email},
						}, func(row *sql.Row) error { return row.Scan(&id) })
						return err
					}
					if mode == "pool" {
						err = run(db)
					} else {
						err = db.InTx(ctx, func(tx *sql.Tx) error { return run(tx) })
					}
					return id, created, err
				}
				other, err := db.SQL().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = other.Rollback() }()
				// The other caller holds the handle, not yet the email.
				if _, err := other.ExecContext(ctx, p(`INSERT INTO twins (email, handle) VALUES (?1, ?2)`), "pending-"+email, handle); err != nil {
					t.Fatal(err)
				}
				type result struct {
					id      int64
					created bool
					err     error
				}
				done := make(chan result, 1)
				if db.Engine() == racefree.Postgres {
					pid := testdb.BackendPID(t, other)
					go func() {
						id, created, err := get()
						done <- result{id, created, err}
					}()
					// Wait until Do's insert waits for the other transaction.
					waitFor(t, db, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid)
				}
				if _, err := other.ExecContext(ctx, p(`UPDATE twins SET email = ?1 WHERE handle = ?2`), email, handle); err != nil {
					t.Fatal(err)
				}
				var want int64
				if err := other.QueryRowContext(ctx, p(`SELECT id FROM twins WHERE email = ?1`), email).Scan(&want); err != nil {
					t.Fatal(err)
				}
				if err := other.Commit(); err != nil {
					t.Fatal(err)
				}
				if db.Engine() == racefree.SQLite {
					id, created, err := get()
					done <- result{id, created, err}
				}
				r := <-done
				if r.err != nil || r.created || r.id != want {
					t.Fatalf("got id %d, created %v, %v; want the other caller's row %d", r.id, r.created, r.err, want)
				}
			})
		}
	})
}

// waitFor polls q until it counts at least one row, or fails the test
// after ten seconds.
func waitFor(t *testing.T, db *racefree.DB, q string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		var n int
		if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
			t.Fatalf("waiting: %v", err)
		}
		if n > 0 {
			return
		}
		time.Sleep(time.Millisecond) // between polls of the state, not instead of it
	}
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
			// A NUL: SQLite would stop reading there, PostgreSQL refuses it.
			{q.insert + "\x00; DELETE FROM users", q.sel},
			{q.insert, q.sel + "\x00"},
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

// TestConcurrentCallersOnAnotherIndex runs 32 get-or-creates of distinct
// emails sharing one handle at once, on the pool and inside the callers'
// own transactions: exactly one creates its user, every other gets a
// *ConflictError naming the handle index (never a row, never a raw driver
// error), and the table holds one row for the handle.
func TestConcurrentCallersOnAnotherIndex(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		setup(t, db)
		ctx := context.Background()
		ins := queries[db.Engine()].insert
		for _, mode := range []string{"pool", "tx"} {
			t.Run(mode, func(t *testing.T) {
				const n = 32
				handle := "shared-" + mode
				errs := make([]error, n)
				created := make([]bool, n)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						email := fmt.Sprintf("%s-%d@example.com", mode, i)
						if mode == "pool" {
							_, created[i], errs[i] = userByEmail(ctx, db, db, ins, email, handle)
							return
						}
						errs[i] = db.InTx(ctx, func(tx *sql.Tx) error {
							var err error
							_, created[i], err = userByEmail(ctx, db, tx, ins, email, handle)
							return err
						})
					}()
				}
				close(start)
				wg.Wait()
				winners := 0
				for i := range n {
					var ce *getorcreate.ConflictError
					switch {
					case errs[i] == nil && created[i]:
						winners++
					case errors.As(errs[i], &ce) && strings.Contains(ce.Constraint, "handle") && !created[i]:
					default:
						t.Errorf("caller %d: created %v, %v; want created or a *ConflictError on the handle", i, created[i], errs[i])
					}
				}
				if winners != 1 {
					t.Fatalf("%d callers created a user, want 1", winners)
				}
				var rows int
				if err := db.QueryRowContext(ctx, map[string]string{
					racefree.SQLite:   `SELECT count(*) FROM users WHERE handle = ?`,
					racefree.Postgres: `SELECT count(*) FROM users WHERE handle = $1`,
				}[db.Engine()], handle).Scan(&rows); err != nil || rows != 1 {
					t.Fatalf("%d rows for the handle (%v), want 1", rows, err)
				}
			})
		}
	})
}

// TestSerializationFailureIsReturned proves the documented PostgreSQL
// failure mode: inside a REPEATABLE READ transaction, an insert that
// conflicts with a row its snapshot cannot see is a serialization failure
// (40001), which Do returns as it is (racefree.ErrRetryable once
// interpreted) for the caller's transaction helper to retry, and a retry
// in a fresh transaction gets the row.
func TestSerializationFailureIsReturned(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		if db.Engine() != racefree.Postgres {
			t.Skip("SQLite transactions are serializable by taking the write lock: no snapshot to conflict with")
		}
		ctx := context.Background()
		setup(t, db)
		ins := queries[db.Engine()].insert
		tx, err := db.SQL().BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.ExecContext(ctx, `SELECT 1 FROM users`); err != nil { // takes the snapshot
			t.Fatal(err)
		}
		if _, created, err := userByEmail(ctx, db, db, ins, "snap@x", "snap"); err != nil || !created {
			t.Fatalf("outside the snapshot: created %v, %v", created, err)
		}
		_, created2, err := userByEmail(ctx, db, tx, ins, "snap@x", "snap")
		if !errors.Is(wire.Of(db).InterpretError(err), racefree.ErrRetryable) || created2 {
			t.Fatalf("in the older snapshot: created %v, %v; want a serialization failure", created2, err)
		}
		_ = tx.Rollback()
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			_, created, err := userByEmail(ctx, db, tx, ins, "snap@x", "snap")
			if err == nil && created {
				return errors.New("created it again")
			}
			return err
		})
		if err != nil {
			t.Fatalf("the retry: %v", err)
		}
	})
}

// TestConflictOnAnotherPrimaryKeyNamesIt proves the *ConflictError answer
// when the other unique index is a primary key rather than a UNIQUE index:
// SQLite reports that violation under its own extended code
// (SQLITE_CONSTRAINT_PRIMARYKEY, 1555, not _UNIQUE, 2067), which Do must
// recognise too; PostgreSQL reports 23505 as for any unique index.
func TestConflictOnAnotherPrimaryKeyNamesIt(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		p := "?"
		if db.Engine() == racefree.Postgres {
			p = "$"
		}
		testdb.ExecAll(t, db,
			`CREATE TABLE accounts (handle TEXT PRIMARY KEY, email TEXT NOT NULL)`,
			`CREATE UNIQUE INDEX accounts_email ON accounts (lower(email))`,
		)
		get := func(email, handle string) (bool, error) {
			var got string
			return getorcreate.Do(ctx, db, getorcreate.Query{
				Insert:     `INSERT INTO accounts (handle, email) VALUES (` + p + `1, ` + p + `2) ON CONFLICT (lower(email)) DO NOTHING RETURNING email`,
				InsertArgs: []any{handle, email},
				Select:     `SELECT email FROM accounts WHERE lower(email) = lower(` + p + `1)`,
				SelectArgs: []any{email},
			}, func(row *sql.Row) error { return row.Scan(&got) })
		}
		if created, err := get("a@x", "taken"); err != nil || !created {
			t.Fatalf("first: %v %v", created, err)
		}
		created, err := get("b@x", "taken")
		var ce *getorcreate.ConflictError
		if created || !errors.As(err, &ce) || !errors.Is(err, racefree.ErrConflict) {
			t.Fatalf("conflict on the primary key: created %v, %v; want a *ConflictError matching ErrConflict", created, err)
		}
		if !strings.Contains(ce.Constraint, "handle") && !strings.Contains(ce.Constraint, "pkey") {
			t.Fatalf("Constraint = %q, want it to name the primary key", ce.Constraint)
		}
	})
}

// TestSelectNeedsNoLockWithoutASynchronousStandby: Do locks what the
// select read only where a synchronous standby waits for commits (the
// package documentation, "A row another transaction committed"); on a
// PostgreSQL without one, a select PostgreSQL cannot lock (DISTINCT here)
// returns the row that exists, as it does on SQLite, which has no
// standbys. With a synchronous standby the same select is the engine's
// error (reliability:TestExistsWaitsForTheSynchronousStandby).
func TestSelectNeedsNoLockWithoutASynchronousStandby(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		setup(t, db)
		q := queries[db.Engine()]
		if _, created, err := userByEmail(ctx, db, db, q.insert, "lock@x", "lock"); err != nil || !created {
			t.Fatalf("create: %v, %v", created, err)
		}
		var u user
		created, err := getorcreate.Do(ctx, db, getorcreate.Query{
			Insert: q.insert, InsertArgs: []any{"lock@x", "lock"},
			Select: strings.Replace(q.sel, "SELECT", "SELECT DISTINCT", 1), SelectArgs: []any{"lock@x"},
		}, func(row *sql.Row) error { return row.Scan(&u.id, &u.email) })
		if err != nil || created || u.email != "lock@x" {
			t.Fatalf("a DISTINCT select of a row that exists: %+v created %v, %v; want the row", u, created, err)
		}
	})
}
