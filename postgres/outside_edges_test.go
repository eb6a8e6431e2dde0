package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/postgres"
)

// engineConn opens an Engine on a fresh schema, a table rf_edges (k int
// PRIMARY KEY) in it, and one connection of its pool for Pipeline.
func engineConn(t *testing.T) (*postgres.Engine, *sql.Conn) {
	t.Helper()
	e, err := postgres.NewEngine(testdb.NewDSN(t, racefree.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.SQL().Close() })
	ctx := context.Background()
	if _, err := e.SQL().ExecContext(ctx, `CREATE TABLE rf_edges (k int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	conn, err := e.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return e, conn
}

// TestEdgesInterpretErrorKeepsAContextsEnd holds the edge where the
// driver itself reports a context's end: pgx answers a call whose
// context had ended with an error it marks safe to retry (nothing was
// sent), which wire.ConnectionLost alone would call a lost connection.
// InterpretError returns it as it is, matching the context's error and
// never ErrUnavailable: the caller gave up, the server did not go away.
func TestEdgesInterpretErrorKeepsAContextsEnd(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	ctx := context.Background()
	conn, err := db.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"cancelled", cancelled, context.Canceled}, {"expired", expired, context.DeadlineExceeded}} {
		var qerr error
		if err := conn.Raw(func(dc any) error {
			_, qerr = dc.(*stdlib.Conn).Conn().Exec(c.ctx, `SELECT 1`)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !pgconn.SafeToRetry(qerr) || !errors.Is(qerr, c.want) {
			t.Fatalf("%s: pgx answered %v; the test needs an error marked safe to retry that wraps %v", c.name, qerr, c.want)
		}
		got := wire.Of(db).InterpretError(qerr)
		if !errors.Is(got, c.want) || errors.Is(got, racefree.ErrUnavailable) {
			t.Errorf("%s: InterpretError = %v; want the context's error as it is, not ErrUnavailable", c.name, got)
		}
	}
}

// TestEdgesInterpretErrorClassesByTheWholeCode holds the edges of the
// SQLSTATEs InterpretError reads: ErrConflict is 23505 alone, not the
// other integrity violations of its class (a CHECK, NOT NULL, a foreign
// key, an exclusion); NotDurableError is 22P02 only with the strict
// prelude's prefix, not a value that fails its cast, and its Reason is
// the prelude's text, without the cast message's closing quote.
func TestEdgesInterpretErrorClassesByTheWholeCode(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	ctx := context.Background()
	raise := func(code string) error {
		_, err := db.ExecContext(ctx, `DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '`+code+`'; END $$`)
		return wire.Of(db).InterpretError(err)
	}
	if err := raise("23505"); !errors.Is(err, racefree.ErrConflict) {
		t.Errorf("23505: %v, want ErrConflict", err)
	}
	for _, code := range []string{"23502", "23503", "23514", "23P01"} {
		if err := raise(code); err == nil || errors.Is(err, racefree.ErrConflict) {
			t.Errorf("%s: %v, want an error that is not ErrConflict", code, err)
		}
	}
	// A real CHECK violation, as the audit chain's trigger raises one.
	if _, err := db.ExecContext(ctx, `CREATE TABLE rf_checked (n int CHECK (n > 0))`); err != nil {
		t.Fatal(err)
	}
	_, err := db.ExecContext(ctx, `INSERT INTO rf_checked VALUES (0)`)
	if err = wire.Of(db).InterpretError(err); err == nil || errors.Is(err, racefree.ErrConflict) {
		t.Errorf("a CHECK violation: %v, want an error that is not ErrConflict", err)
	}

	err = wire.Of(db).InterpretError(db.QueryRowContext(ctx, `SELECT 'twelve'::int`).Scan(new(int)))
	if err == nil || errors.Is(err, racefree.ErrNotDurable) || errors.Is(err, racefree.ErrUnavailable) {
		t.Errorf("a value that fails its cast (22P02): %v, want a plain error, neither ErrNotDurable nor ErrUnavailable", err)
	}
	const reason = "synchronous_standby_names is empty, so a commit waits for no standby"
	err = wire.Of(db).InterpretError(db.QueryRowContext(ctx, `SELECT ('racefree: not durable: ' || $1)::int`, reason).Scan(new(int)))
	var nd *racefree.NotDurableError
	if !errors.As(err, &nd) || !errors.Is(err, racefree.ErrUnavailable) {
		t.Fatalf("the strict prelude's refusal: %v, want a *NotDurableError (ErrUnavailable)", err)
	}
	if nd.Reason != reason {
		t.Errorf("NotDurableError.Reason = %q, want %q", nd.Reason, reason)
	}
}

// TestEdgesPipelineFatalAnswerIsAnUnknownOutcome holds the edge between
// an ERROR and a FATAL answer: a pipeline whose backend is terminated
// while it runs (FATAL 57P01, as a backend terminated while its commit
// waited for a synchronous standby, which had committed locally) is an
// outcome Pipeline cannot know, never ErrNotCommitted, which would let
// the combiner run its operations again.
func TestEdgesPipelineFatalAnswerIsAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	e, conn := engineConn(t)
	ctx := context.Background()
	var pid int
	if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- e.Pipeline(ctx, conn, []*wire.Statement{
			{Query: `INSERT INTO rf_edges VALUES (1)`},
			{Query: `SELECT pg_sleep(60)`},
		})
	}()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := e.SQL().QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE pid = $1 AND state = 'active' AND query LIKE '%pg_sleep%'`, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pipeline never reached its pg_sleep")
		}
		time.Sleep(2 * time.Millisecond) // polls the server's state
	}
	if _, err := e.SQL().ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	err := testdb.Within(t, 30*time.Second, "the terminated pipeline", func() error { return <-done })
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !strings.EqualFold(pe.Severity, "FATAL") {
		t.Fatalf("the terminated pipeline: %v; the test needs the server's FATAL answer", err)
	}
	if errors.Is(err, racefree.ErrNotCommitted) {
		t.Fatalf("a pipeline answered FATAL: %v matches ErrNotCommitted; a FATAL answer may come after the commit", err)
	}
}

// TestEdgesBoundHoldsForItsBatchOnly holds Bound's two edges: inside its
// pipeline the statements after it run under statement_timeout of the
// duration given, in milliseconds (1500 ms reads 1500ms, not 1 s or
// 1 ms), and after the pipeline the connection, which goes back to the
// pool, has the statement_timeout it had before.
func TestEdgesBoundHoldsForItsBatchOnly(t *testing.T) {
	t.Parallel()
	e, conn := engineConn(t)
	ctx := context.Background()
	var before, inside, after string
	if err := conn.QueryRowContext(ctx, `SHOW statement_timeout`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := e.Pipeline(ctx, conn, []*wire.Statement{
		e.Bound(1500 * time.Millisecond),
		{Query: `SELECT current_setting('statement_timeout')`, Dest: []any{&inside}},
	}); err != nil {
		t.Fatal(err)
	}
	if inside != "1500ms" {
		t.Errorf("statement_timeout inside the bound pipeline: %q, want 1500ms", inside)
	}
	if err := conn.QueryRowContext(ctx, `SHOW statement_timeout`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("statement_timeout after the bound pipeline: %q, want %q as before it", after, before)
	}
}

// TestEdgesMigrationLockEndsWithItsTransaction holds the edge of the
// migration lock's scope: once MigrateUp returned (here twice: at Open
// and again), no session holds the schema's migration lock, so the next
// migrator (another instance, a later MigrateUp on another connection of
// the pool) takes it at once. A lock of the session would stay with the
// pooled connection that migrated, and every other migrator of the
// schema would wait for it forever.
func TestEdgesMigrationLockEndsWithItsTransaction(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	db := testdb.Open(t, d, nil)
	ctx := context.Background()
	if _, err := db.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("pgx", d)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var free bool
	if err := tx.QueryRowContext(ctx, `SELECT pg_try_advisory_xact_lock(hashtext('racefree.migrate.' || current_schema()))`).Scan(&free); err != nil {
		t.Fatal(err)
	}
	if !free {
		t.Fatal("after MigrateUp returned, another session cannot take the schema's migration lock: a session holds it still")
	}
}
