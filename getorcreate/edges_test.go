package getorcreate_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/getorcreate"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// The tests of this file try the getorcreate promises at their edges (the
// boundary matrix of docs/contributing.md): MaxAttempts at the limit and
// one past it, each class of error Do tells apart, the caller's
// transaction committed and rolled back and each kind of executor, and a
// caller cancelled at each stage.

// onEngine writes q's ?N placeholders as db's engine wants them.
func onEngine(db *racefree.DB, q string) string {
	if db.Engine() != racefree.Postgres {
		return q
	}
	return strings.NewReplacer("?1", "$1", "?2", "$2").Replace(q)
}

// countEmail counts the users whose email is email, whatever its case.
func countEmail(t *testing.T, db *racefree.DB, email string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), onEngine(db, `SELECT count(*) FROM users WHERE lower(email) = lower(?1)`), email).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEdgesMaxAttempts tries the rounds of insert and select at their
// bound: a select that finds the row only in round MaxAttempts returns
// it (created false), one that would find it only in round MaxAttempts +
// 1 is ErrVanished after exactly MaxAttempts inserts; a row deleted
// between the insert that met it and the select is created again in the
// next round (created true), never answered as found.
func TestEdgesMaxAttempts(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		setup(t, db)
		testdb.ExecAll(t, db, `CREATE TABLE rounds (n INTEGER NOT NULL)`, `INSERT INTO rounds (n) VALUES (0)`)
		ins := queries[db.Engine()].insert
		existing, created, err := userByEmail(ctx, db, db, ins, "v@x", "v")
		if err != nil || !created {
			t.Fatalf("create: %v, %v", created, err)
		}
		// The select sees the row only from round `from` on: the scan of
		// each insert's answer (no row: the key exists) counts a round.
		run := func(from int) (u user, created bool, inserts int, err error) {
			t.Helper()
			if _, err := db.ExecContext(ctx, `UPDATE rounds SET n = 0`); err != nil {
				t.Fatal(err)
			}
			scans := 0
			created, err = getorcreate.Do(ctx, db, getorcreate.Query{
				Insert: ins, InsertArgs: []any{"v@x", "v2"},
				Select:     onEngine(db, `SELECT id, email FROM users WHERE lower(email) = lower(?1) AND (SELECT n FROM rounds) >= ?2`),
				SelectArgs: []any{"v@x", from},
			}, func(row *sql.Row) error {
				scans++
				if scans%2 == 1 { // the insert's
					inserts++
					if _, err := db.ExecContext(ctx, `UPDATE rounds SET n = n + 1`); err != nil {
						t.Fatal(err)
					}
				}
				return row.Scan(&u.id, &u.email)
			})
			return u, created, inserts, err
		}
		u, created, inserts, err := run(getorcreate.MaxAttempts)
		if err != nil || created || u != existing || inserts != getorcreate.MaxAttempts {
			t.Fatalf("found in round MaxAttempts: %+v, created %v, %d inserts, %v; want %+v after %d", u, created, inserts, err, existing, getorcreate.MaxAttempts)
		}
		_, created, inserts, err = run(getorcreate.MaxAttempts + 1)
		if !errors.Is(err, getorcreate.ErrVanished) || created || inserts != getorcreate.MaxAttempts {
			t.Fatalf("found only in round MaxAttempts + 1: created %v, %d inserts, %v; want ErrVanished after %d", created, inserts, err, getorcreate.MaxAttempts)
		}

		// Deleted in between: the next round creates it anew.
		deleted := false
		var again user
		created, err = getorcreate.Do(ctx, db, getorcreate.Query{
			Insert: ins, InsertArgs: []any{"v@x", "v3"},
			Select: queries[db.Engine()].sel, SelectArgs: []any{"v@x"},
		}, func(row *sql.Row) error {
			err := row.Scan(&again.id, &again.email)
			if errors.Is(err, sql.ErrNoRows) && !deleted {
				deleted = true
				if _, err := db.ExecContext(ctx, onEngine(db, `DELETE FROM users WHERE lower(email) = lower(?1)`), "v@x"); err != nil {
					t.Fatal(err)
				}
			}
			return err
		})
		if err != nil || !created || !deleted || again.email != "v@x" || countEmail(t, db, "v@x") != 1 {
			t.Fatalf("deleted between insert and select: %+v, created %v, %v; want a new row, created", again, created, err)
		}
	})
}

// TestEdgesErrorClasses tells apart each class of error Do meets: a
// violation of another kind of constraint (NOT NULL) is returned as it
// is after the one insert, never a *ConflictError, racefree.ErrConflict
// or a retry; a select that fails (not "no rows") is returned after the
// one round, never taken for a row that vanished; a unique violation on
// another index is a *ConflictError and a target that matches no index is
// ErrConflictTarget, each after the one insert too.
func TestEdgesErrorClasses(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		setup(t, db)
		q := queries[db.Engine()]
		if _, created, err := userByEmail(ctx, db, db, q.insert, "a@x", "taken"); err != nil || !created {
			t.Fatalf("create: %v, %v", created, err)
		}
		do := func(insert, sel string, insertArgs ...any) (scans int, err error) {
			t.Helper()
			var u user
			created, err := getorcreate.Do(ctx, db, getorcreate.Query{
				Insert: insert, InsertArgs: insertArgs, Select: sel, SelectArgs: []any{insertArgs[0]},
			}, func(row *sql.Row) error { scans++; return row.Scan(&u.id, &u.email) })
			if created {
				t.Errorf("%q with %v: created", insert, insertArgs)
			}
			return scans, err
		}
		scans, err := do(q.insert, q.sel, "b@x", nil)
		var ce *getorcreate.ConflictError
		if err == nil || errors.As(err, &ce) || errors.Is(err, racefree.ErrConflict) || errors.Is(err, getorcreate.ErrVanished) || scans != 1 {
			t.Errorf("a NOT NULL violation: %v after %d scans; want the engine's error after the insert alone", err, scans)
		}
		scans, err = do(q.insert, strings.Replace(q.sel, "SELECT id, email", "SELECT id, no_such_column", 1), "a@x", "a")
		if err == nil || errors.Is(err, getorcreate.ErrVanished) || errors.Is(err, sql.ErrNoRows) || scans != 2 {
			t.Errorf("a select that fails: %v after %d scans; want the engine's error after one round", err, scans)
		}
		scans, err = do(q.insert, q.sel, "c@x", "taken")
		if !errors.As(err, &ce) || scans != 2 {
			t.Errorf("a unique violation on the handle: %v after %d scans; want a *ConflictError after one round", err, scans)
		}
		scans, err = do(q.insertWrongTarget, q.sel, "d@x", "d")
		if !errors.Is(err, getorcreate.ErrConflictTarget) || scans != 1 {
			t.Errorf("a target that matches no index: %v after %d scans; want ErrConflictTarget after the insert alone", err, scans)
		}
		if got := count(t, db); got != 1 {
			t.Fatalf("%d rows after the errors, want 1", got)
		}
	})
}

// TestEdgesEachExecutorAndTheCallersTransaction runs Do in the caller's
// transaction, rolled back (a later reader sees no row, and a later Do
// creates it) and committed (a later Do gets it); and creates and gets
// through each kind of executor the docs name, *racefree.DB, *sql.DB,
// *sql.Conn and *sql.Tx, on each engine: each creates once and gets the
// row that exists.
func TestEdgesEachExecutorAndTheCallersTransaction(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		setup(t, db)
		ins := queries[db.Engine()].insert
		boom := errors.New("caller failed")
		var inTx user
		if err := db.InTx(ctx, func(tx *sql.Tx) error {
			u, created, err := userByEmail(ctx, db, tx, ins, "tx@x", "tx")
			if err != nil || !created {
				t.Fatalf("in the transaction: created %v, %v", created, err)
			}
			inTx = u
			return boom
		}); !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if n := countEmail(t, db, "tx@x"); n != 0 {
			t.Fatalf("%d rows after the rollback, want none", n)
		}
		if err := db.InTx(ctx, func(tx *sql.Tx) error {
			u, created, err := userByEmail(ctx, db, tx, ins, "tx@x", "tx")
			if err == nil && !created {
				t.Errorf("after the rollback, in a new transaction: %+v, not created", u)
			}
			inTx = u
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if u, created, err := userByEmail(ctx, db, db, ins, "TX@x", "tx2"); err != nil || created || u.id != inTx.id {
			t.Fatalf("after the commit: %+v, created %v, %v; want %+v", u, created, err, inTx)
		}

		// Each executor creates a row of its own and gets every row
		// created before. The caller's transaction comes last: on SQLite
		// it holds the write lock until its commit.
		emails := []string{"tx@x"}
		through := func(name string, exec racefree.Executor) {
			t.Helper()
			if _, created, err := userByEmail(ctx, db, exec, ins, name+"@x", name); err != nil || !created {
				t.Fatalf("create through %s: created %v, %v", name, created, err)
			}
			emails = append(emails, name+"@x")
			for _, email := range emails {
				u, created, err := userByEmail(ctx, db, exec, ins, email, "other")
				if err != nil || created || u.email != email {
					t.Errorf("get %s through %s: %+v, created %v, %v; want the row, not created", email, name, u, created, err)
				}
			}
		}
		through("*racefree.DB", db)
		through("*sql.DB", db.SQL())
		conn, err := db.SQL().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		through("*sql.Conn", conn)
		if err := conn.Close(); err != nil {
			t.Fatal(err)
		}
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		through("*sql.Tx", tx)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if got, want := count(t, db), 5; got != want {
			t.Fatalf("%d rows, want %d (one per executor, and tx@x)", got, want)
		}
	})
}

// TestEdgesCancelledCaller cancels Do before it sends anything (the
// context's error alone, nothing created), in the caller's transaction
// before its commit (nothing created, and a later Do creates), and, on
// PostgreSQL, on the pool while its insert waits for another
// transaction's uncommitted row of the same key: the insert commits by
// itself, and the server may run it all the same once the row's fate is
// known (unless pgx's cancel request arrives first), so the caller gets
// the context's error with racefree.ErrUnavailable, an unknown outcome;
// a Do again settles it: one row, whoever created it.
func TestEdgesCancelledCaller(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		setup(t, db)
		ins := queries[db.Engine()].insert
		gone, stop := context.WithCancel(ctx)
		stop()
		for _, exec := range []racefree.Executor{db, db.SQL()} {
			if _, _, err := userByEmail(gone, db, exec, ins, "gone@x", "gone"); !errors.Is(err, context.Canceled) || errors.Is(err, racefree.ErrUnavailable) {
				t.Fatalf("with a cancelled context: %v, want context.Canceled alone (nothing was sent)", err)
			}
		}
		if got := count(t, db); got != 0 {
			t.Fatalf("%d rows after a cancelled Do, want none", got)
		}

		txCtx, stopTx := context.WithCancel(ctx)
		tx, err := db.SQL().BeginTx(txCtx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, created, err := userByEmail(txCtx, db, tx, ins, "tx@x", "tx"); err != nil || !created {
			t.Fatalf("in the transaction: created %v, %v", created, err)
		}
		stopTx()
		if err := tx.Commit(); err == nil {
			t.Fatal("the commit of a transaction whose context ended succeeded")
		}
		if _, created, err := userByEmail(ctx, db, db, ins, "tx@x", "tx"); err != nil || !created {
			t.Fatalf("after the cancelled transaction: created %v, %v; want created", created, err)
		}

		if db.Engine() != racefree.Postgres {
			return
		}
		for _, exec := range []racefree.Executor{db, db.SQL()} {
			email := "wait@x"
			if exec != racefree.Executor(db) {
				email = "wait-sql@x"
			}
			other, err := db.SQL().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = other.Rollback() }()
			if _, err := other.ExecContext(ctx, `INSERT INTO users (email, handle) VALUES ($1, $2)`, email, email); err != nil {
				t.Fatal(err)
			}
			pid := testdb.BackendPID(t, other)
			waitCtx, stopWait := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, _, err := userByEmail(waitCtx, db, exec, ins, email, "mine-"+email)
				done <- err
			}()
			if !testdb.BlockedBy(t, db, pid, nil) {
				t.Fatal("the insert did not wait for the other transaction's row")
			}
			stopWait()
			if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, racefree.ErrUnavailable) {
				t.Fatalf("%T: a Do cancelled while its insert waits: %v; want context.Canceled and ErrUnavailable (an unknown outcome)", exec, err)
			}
			if err := other.Rollback(); err != nil {
				t.Fatal(err)
			}
			testdb.Unblocked(t, db, pid, 10*time.Second)
			if _, _, err := userByEmail(ctx, db, exec, ins, email, "mine-"+email); err != nil {
				t.Fatalf("%T: Do again: %v", exec, err)
			}
			if n := countEmail(t, db, email); n != 1 {
				t.Fatalf("%T: %d rows for %s after Do again, want 1", exec, n, email)
			}
		}
	})
}

// endable is a context whose deadline the test ends when it chooses: its
// Err is context.DeadlineExceeded once end is called, as a deadline that
// passed while the statement ran.
type endable struct {
	context.Context
	done chan struct{}
}

func (e *endable) Done() <-chan struct{} { return e.done }

func (e *endable) Err() error {
	select {
	case <-e.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (e *endable) end() { close(e.done) }

// TestEdgesADeadlineThatPassesWhileTheInsertWaits: on PostgreSQL a ctx
// whose deadline passes once the insert was sent (while it waits for
// another transaction's uncommitted row of the same key) is a ctx that
// ended, as a cancel is: given a *sql.DB, which names no engine, the
// caller gets context.DeadlineExceeded with racefree.ErrUnavailable, an
// unknown outcome, never a plain failure; a Do again settles it.
func TestEdgesADeadlineThatPassesWhileTheInsertWaits(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		if db.Engine() != racefree.Postgres {
			return // SQLite commits in the process: no reply is lost
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		setup(t, db)
		ins := queries[db.Engine()].insert
		for _, exec := range []racefree.Executor{db, db.SQL()} {
			email := "deadline@x"
			if exec != racefree.Executor(db) {
				email = "deadline-sql@x"
			}
			other, err := db.SQL().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = other.Rollback() }()
			if _, err := other.ExecContext(ctx, `INSERT INTO users (email, handle) VALUES ($1, $2)`, email, email); err != nil {
				t.Fatal(err)
			}
			pid := testdb.BackendPID(t, other)
			waitCtx := &endable{Context: ctx, done: make(chan struct{})}
			done := make(chan error, 1)
			go func() {
				_, _, err := userByEmail(waitCtx, db, exec, ins, email, "mine-"+email)
				done <- err
			}()
			if !testdb.BlockedBy(t, db, pid, nil) {
				t.Fatal("the insert did not wait for the other transaction's row")
			}
			waitCtx.end()
			if err := <-done; !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, racefree.ErrUnavailable) {
				t.Fatalf("%T: a Do whose deadline passed while its insert waits: %v; want context.DeadlineExceeded and ErrUnavailable", exec, err)
			}
			if err := other.Rollback(); err != nil {
				t.Fatal(err)
			}
			testdb.Unblocked(t, db, pid, 10*time.Second)
			if _, _, err := userByEmail(ctx, db, exec, ins, email, "mine-"+email); err != nil {
				t.Fatalf("%T: Do again: %v", exec, err)
			}
			if n := countEmail(t, db, email); n != 1 {
				t.Fatalf("%T: %d rows for %s after Do again, want 1", exec, n, email)
			}
		}
	})
}
