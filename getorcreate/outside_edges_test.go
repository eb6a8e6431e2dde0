package getorcreate_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/getorcreate"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// The tests of this file prove from outside what the package
// documentation promises at edges the other tests leave open: a context
// that ends between two rounds, before the select, at the send of the
// insert on SQLite, or while the insert waits inside the caller's
// transaction, and the exact name a *ConflictError gives on each engine.

// executors are the executors of db a test tries one by one: the
// *racefree.DB, which names its engine, and a *sql.DB, which does not.
func executors(db *racefree.DB) []racefree.Executor {
	return []racefree.Executor{db, db.SQL()}
}

// TestOutsideEdgesAContextThatEndsBetweenRounds: a ctx that ends during
// a round (here once the select found no row: the insert's conflict was
// on another unique index, absorbed by a bare ON CONFLICT DO NOTHING) is
// checked before the next insert is sent. Do returns the context's error
// alone, nothing more sent: exactly one insert and one select ran, the
// error is not an unknown outcome (racefree.ErrUnavailable), and no row
// was created.
func TestOutsideEdgesAContextThatEndsBetweenRounds(t *testing.T) {
	t.Parallel()
	cancelAtScan(t, 2, func(engine string) getorcreate.Query { // the select's scan: the caller gives up now
		q := queries[engine]
		return getorcreate.Query{Insert: q.insertNoTarget, InsertArgs: []any{"b@x", "h"}, Select: q.sel, SelectArgs: []any{"b@x"}}
	})
}

// TestOutsideEdgesAContextThatEndsBeforeTheSelect: when the ctx ends
// between the insert that met the key and the select that reads it, Do
// returns the select's error with its kind: it matches context.Canceled,
// never an unknown outcome, on every executor.
func TestOutsideEdgesAContextThatEndsBeforeTheSelect(t *testing.T) {
	t.Parallel()
	cancelAtScan(t, 1, func(engine string) getorcreate.Query { // the insert's scan (no row: the key exists)
		q := queries[engine]
		return getorcreate.Query{Insert: q.insert, InsertArgs: []any{"a@x", "h2"}, Select: q.sel, SelectArgs: []any{"a@x"}}
	})
}

// cancelAtScan runs Do on every executor after a first user was created,
// with a ctx that ends at the at-th scan, and checks what both tests
// promise: Do returns an error matching context.Canceled and never an
// unknown outcome, it created nothing, it scanned twice, one insert and
// one select (no round sent after the ctx ended), and the table holds
// one row.
func cancelAtScan(t *testing.T, at int, query func(engine string) getorcreate.Query) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		setup(t, db)
		q := queries[db.Engine()]
		if _, created, err := userByEmail(context.Background(), db, db, q.insert, "a@x", "h"); err != nil || !created {
			t.Fatalf("first: %v, %v", created, err)
		}
		for _, exec := range executors(db) {
			ctx, cancel := context.WithCancel(context.Background())
			scans := 0
			var u user
			created, err := getorcreate.Do(ctx, exec, query(db.Engine()), func(row *sql.Row) error {
				scans++
				err := row.Scan(&u.id, &u.email)
				if scans == at {
					cancel()
				}
				return err
			})
			cancel()
			if created || !errors.Is(err, context.Canceled) || errors.Is(err, racefree.ErrUnavailable) {
				t.Fatalf("%T: a ctx that ended at scan %d: created %v, %v; want context.Canceled, not an unknown outcome", exec, at, created, err)
			}
			if scans != 2 {
				t.Fatalf("%T: %d scans, want 2 (one insert, one select): a statement was sent after the ctx ended", exec, scans)
			}
		}
		if got := count(t, db); got != 1 {
			t.Fatalf("%d rows, want 1", got)
		}
	})
}

// endsAtTheSend is a context that has ended, but whose Err says so only
// from its second call on: Do's own check before the insert finds it
// alive, and the driver, the next to ask, finds it ended, as when the
// caller gives up at the moment Do sends the insert.
type endsAtTheSend struct {
	context.Context
	asked atomic.Int32
}

func newEndsAtTheSend() *endsAtTheSend {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return &endsAtTheSend{Context: ctx}
}

func (e *endsAtTheSend) Err() error {
	if e.asked.Add(1) == 1 {
		return nil
	}
	return e.Context.Err()
}

// TestOutsideEdgesSQLiteNeverAnswersAnUnknownOutcome: SQLite commits in
// the process and rolls an interrupted insert back, so an insert that
// ended with its ctx is a plain failure there, never racefree's unknown
// outcome, given a *sql.DB or a *sql.Conn, which name no engine as the
// *racefree.DB does: the error matches context.Canceled and not
// racefree.ErrUnavailable, and no row exists.
func TestOutsideEdgesSQLiteNeverAnswersAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	setup(t, db)
	conn, err := db.SQL().Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	q := queries[racefree.SQLite]
	for _, exec := range []racefree.Executor{db, db.SQL(), conn} {
		ctx := newEndsAtTheSend()
		_, created, err := userByEmail(ctx, db, exec, q.insert, "s@x", "s")
		if created || !errors.Is(err, context.Canceled) || errors.Is(err, racefree.ErrUnavailable) {
			t.Fatalf("%T: an insert that ended with its ctx on SQLite: created %v, %v; want context.Canceled, not ErrUnavailable", exec, created, err)
		}
		if ctx.asked.Load() < 2 {
			t.Fatalf("%T: the driver never asked the context: the insert was not tried", exec)
		}
	}
	if got := count(t, db); got != 0 {
		t.Fatalf("%d rows, want none", got)
	}
}

// TestOutsideEdgesACancelInsideTheCallersTransaction (PostgreSQL): inside
// the caller's *sql.Tx the insert never commits by itself, so an insert
// whose ctx ended once it was sent (while it waits for another
// transaction's row of the same key) is the context's error, not an
// unknown outcome: the caller's transaction has not committed it and
// never will. After the rollback no row of the caller's exists.
func TestOutsideEdgesACancelInsideTheCallersTransaction(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	setup(t, db)
	ins := queries[racefree.Postgres].insert
	other, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback() }()
	if _, err := other.ExecContext(ctx, `INSERT INTO users (email, handle) VALUES ($1, $2)`, "w@x", "theirs"); err != nil {
		t.Fatal(err)
	}
	pid := testdb.BackendPID(t, other)
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	waitCtx, stopWait := context.WithCancel(ctx)
	defer stopWait()
	done := make(chan error, 1)
	go func() {
		_, _, err := userByEmail(waitCtx, db, tx, ins, "w@x", "mine")
		done <- err
	}()
	if !testdb.BlockedBy(t, db, pid, nil) {
		t.Fatal("the insert did not wait for the other transaction's row")
	}
	stopWait()
	if err := <-done; !errors.Is(err, context.Canceled) || errors.Is(err, racefree.ErrUnavailable) {
		t.Fatalf("a Do cancelled while its insert waits in the caller's transaction: %v; want context.Canceled, not ErrUnavailable", err)
	}
	_ = tx.Rollback()
	if err := other.Rollback(); err != nil {
		t.Fatal(err)
	}
	testdb.Unblocked(t, db, pid, 10*time.Second)
	if got := count(t, db); got != 0 {
		t.Fatalf("%d rows after both transactions rolled back, want none", got)
	}
}

// TestOutsideEdgesAConflictNamesTheIndexExactly: ConflictError.Constraint
// is what the engine names, no more: on PostgreSQL the index or
// constraint ("users_handle", "accounts_pkey"), on SQLite the columns
// ("users.handle", "accounts.handle"), without the driver's error code.
func TestOutsideEdgesAConflictNamesTheIndexExactly(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		setup(t, db)
		testdb.ExecAll(t, db,
			`CREATE TABLE accounts (handle TEXT PRIMARY KEY, email TEXT NOT NULL)`,
			`CREATE UNIQUE INDEX accounts_email ON accounts (email)`,
		)
		q := queries[db.Engine()]
		if _, created, err := userByEmail(ctx, db, db, q.insert, "a@x", "taken"); err != nil || !created {
			t.Fatalf("first: %v, %v", created, err)
		}
		want := map[string][2]string{
			racefree.Postgres: {"users_handle", "accounts_pkey"},
			racefree.SQLite:   {"users.handle", "accounts.handle"},
		}[db.Engine()]
		var ce *getorcreate.ConflictError
		_, _, err := userByEmail(ctx, db, db, q.insert, "b@x", "taken")
		if !errors.As(err, &ce) || ce.Constraint != want[0] {
			t.Fatalf("a conflict on the handle index: %v; want a *ConflictError whose Constraint is %q", err, want[0])
		}
		accounts := onEngine(db, `INSERT INTO accounts (handle, email) VALUES (?1, ?2) ON CONFLICT (email) DO NOTHING RETURNING email`)
		get := func(email, handle string) (bool, error) {
			var got string
			return getorcreate.Do(ctx, db, getorcreate.Query{
				Insert: accounts, InsertArgs: []any{handle, email},
				Select: onEngine(db, `SELECT email FROM accounts WHERE email = ?1`), SelectArgs: []any{email},
			}, func(row *sql.Row) error { return row.Scan(&got) })
		}
		if created, err := get("a@x", "taken"); err != nil || !created {
			t.Fatalf("first account: %v, %v", created, err)
		}
		_, err = get("b@x", "taken")
		if !errors.As(err, &ce) || ce.Constraint != want[1] {
			t.Fatalf("a conflict on the primary key: %v; want a *ConflictError whose Constraint is %q", err, want[1])
		}
	})
}
