package postgres_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/postgres"
)

// A second round from outside of the PostgreSQL engine (postgres.go,
// pipeline.go) and of the errors it maps onto (errors.go): each test
// holds one promise at the point where a slip would break it.

// closedPort returns an address of this machine on which nothing
// listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// TestEdges2CheckWritableOnANodeNotThereIsUnavailable: CheckWritable,
// whose probe cannot connect, returns the probe's failure after
// InterpretError: ErrUnavailable (an outage, which /readyz answers 503
// and a caller retries), never the driver's error as it is and never a
// verdict of read-only.
func TestEdges2CheckWritableOnANodeNotThereIsUnavailable(t *testing.T) {
	t.Parallel()
	e, err := postgres.NewEngine("postgres://postgres@" + closedPort(t) + "/postgres?sslmode=disable&connect_timeout=10")
	if err != nil {
		t.Fatal(err)
	}
	defer e.SQL().Close()
	err = e.CheckWritable(context.Background(), e.SQL())
	if !errors.Is(err, racefree.ErrUnavailable) || errors.Is(err, racefree.ErrReadOnly) {
		t.Fatalf("CheckWritable on a node not there: %v; want ErrUnavailable, not ErrReadOnly", err)
	}
}

// TestEdges2AFailedConnectIsUnavailableWhateverItsCause: a connection
// that fails before the server answered is ErrUnavailable whatever made
// it fail, a cause that is no network error included: a server that
// refuses TLS to a DSN that requires it (pgx's ConnectError wraps a
// plain error then).
func TestEdges2AFailedConnectIsUnavailableWhateverItsCause(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 8) // the SSLRequest
				if _, err := c.Read(buf); err != nil {
					return
				}
				_, _ = c.Write([]byte{'N'}) // no TLS here
				_, _ = c.Read(buf)          // until the client hangs up
			}()
		}
	}()
	e, err := postgres.NewEngine("postgres://postgres@" + l.Addr().String() + "/postgres?sslmode=require&connect_timeout=10")
	if err != nil {
		t.Fatal(err)
	}
	defer e.SQL().Close()
	err = e.SQL().PingContext(context.Background())
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("a server that refuses TLS: %v; the test needs pgx's ConnectError", err)
	}
	if got := e.InterpretError(err); !errors.Is(got, racefree.ErrUnavailable) {
		t.Errorf("InterpretError(%v) = %v; want ErrUnavailable", err, got)
	}
}

// TestEdges2ABoundBelowAMillisecondStillBounds: a batch with less than a
// millisecond left is bounded to 1 ms, never to 0, which PostgreSQL
// reads as no statement_timeout at all: a statement after the bound that
// sleeps fails with query_canceled (57014).
func TestEdges2ABoundBelowAMillisecondStillBounds(t *testing.T) {
	t.Parallel()
	e, conn := engineConn(t)
	ctx := context.Background()
	var inside string
	if err := e.Pipeline(ctx, conn, []*wire.Statement{
		e.Bound(500 * time.Microsecond),
		{Query: `SELECT current_setting('statement_timeout')`, Dest: []any{&inside}},
	}); err != nil {
		t.Fatal(err)
	}
	if inside != "1ms" {
		t.Errorf("statement_timeout under a bound of 500µs: %q, want 1ms", inside)
	}
	err := e.Pipeline(ctx, conn, []*wire.Statement{
		e.Bound(time.Microsecond),
		{Query: `SELECT pg_sleep(0.2)`},
	})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "57014" {
		t.Fatalf("a 200 ms statement under a bound of 1µs: %v; want query_canceled (57014)", err)
	}
}

// TestEdges2APipelineWhoseCommitFailsCommittedNothing: a pipeline whose
// statements all succeed but whose implicit commit, at its Sync, fails
// (a deferred foreign key) returns that failure, known to have committed
// nothing (ErrNotCommitted), and its rows are not there.
func TestEdges2APipelineWhoseCommitFailsCommittedNothing(t *testing.T) {
	t.Parallel()
	e, conn := engineConn(t)
	ctx := context.Background()
	if _, err := e.SQL().ExecContext(ctx, `CREATE TABLE rf_child (k int PRIMARY KEY,
		parent int REFERENCES rf_edges (k) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	err := e.Pipeline(ctx, conn, []*wire.Statement{
		{Query: `INSERT INTO rf_edges VALUES (1)`},
		{Query: `INSERT INTO rf_child VALUES (1, 2)`}, // no parent 2: refused at the commit
	})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23503" {
		t.Fatalf("a pipeline whose deferred foreign key fails at its commit: %v; want the server's 23503", err)
	}
	if !errors.Is(err, racefree.ErrNotCommitted) {
		t.Errorf("the failed commit: %v; want ErrNotCommitted", err)
	}
	var n int
	if err := e.SQL().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM rf_edges) + (SELECT count(*) FROM rf_child)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d rows after the failed commit; want none", n)
	}
}

// TestEdges2ARowsStatementReportsItsRowsAffected: a pipelined statement
// read through Rows (a write with RETURNING) gets the rows it changed in
// RowsAffected, as one read through Dest or Exec does.
func TestEdges2ARowsStatementReportsItsRowsAffected(t *testing.T) {
	t.Parallel()
	e, conn := engineConn(t)
	var keys []int
	s := &wire.Statement{Query: `INSERT INTO rf_edges SELECT generate_series(1, 3) RETURNING k`, Rows: func(r wire.Rows) error {
		for r.Next() {
			var k int
			if err := r.Scan(&k); err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return nil
	}}
	if err := e.Pipeline(context.Background(), conn, []*wire.Statement{s}); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 || s.RowsAffected != 3 {
		t.Errorf("an insert of 3 rows read through Rows: %v, RowsAffected %d; want 3 rows and 3", keys, s.RowsAffected)
	}
}

// TestEdges2ALocalizedErrorIsARollback: the commit judge reads a
// server's answer by its unlocalized severity, which a server whose
// lc_messages is not English sends beside the localized one: an ERROR
// sent as "FEHLER" rolled back (nothing committed), a FATAL sent as
// "FATAL" did not say so.
func TestEdges2ALocalizedErrorIsARollback(t *testing.T) {
	t.Parallel()
	e, err := postgres.NewEngine("postgres://localhost/x")
	if err != nil {
		t.Fatal(err)
	}
	defer e.SQL().Close()
	if e.MayHaveCommitted(&pgconn.PgError{Severity: "FEHLER", SeverityUnlocalized: "ERROR", Code: "23505"}) {
		t.Error(`an ERROR sent as "FEHLER": may have committed; want known rolled back`)
	}
	if !e.MayHaveCommitted(&pgconn.PgError{Severity: "SCHWERWIEGEND", SeverityUnlocalized: "FATAL", Code: "57P01"}) {
		t.Error(`a FATAL sent as "SCHWERWIEGEND": known rolled back; want an outcome not known`)
	}
}

// TestEdges2NothingSentOnADeadConnection: on a connection pgx knows is
// closed, nothing is sent: a COMMIT that fails so is judged as having
// committed nothing (MayHaveCommitted false), and a pipeline fails known
// to have committed nothing and wrapping driver.ErrBadConn, so that
// database/sql discards the connection instead of keeping it in the pool.
func TestEdges2NothingSentOnADeadConnection(t *testing.T) {
	t.Parallel()
	e, conn := engineConn(t)
	ctx := context.Background()
	var execErr error
	if err := conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		if err := pc.Close(ctx); err != nil {
			return err
		}
		_, execErr = pc.Exec(ctx, `COMMIT`)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !pgconn.SafeToRetry(execErr) {
		t.Fatalf("a COMMIT on a closed connection: %v; the test needs an error marked safe to retry", execErr)
	}
	if e.MayHaveCommitted(execErr) {
		t.Errorf("a COMMIT never sent (%v): may have committed; want known not committed", execErr)
	}
	err := e.Pipeline(ctx, conn, []*wire.Statement{{Query: `INSERT INTO rf_edges VALUES (1)`}})
	if !errors.Is(err, racefree.ErrNotCommitted) || !errors.Is(err, driver.ErrBadConn) {
		t.Errorf("a pipeline on a closed connection: %v; want ErrNotCommitted and driver.ErrBadConn", err)
	}
}

// TestEdges2AReadOnlyErrorUnwrapsToTheServersAnswer: the *ReadOnlyError
// of a write refused with 25006 unwraps to the driver's error, so a
// caller reaches the server's SQLSTATE and message through errors.As.
func TestEdges2AReadOnlyErrorUnwrapsToTheServersAnswer(t *testing.T) {
	t.Parallel()
	e, conn := engineConn(t)
	ctx := context.Background()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SET TRANSACTION READ ONLY`); err != nil {
		t.Fatal(err)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO rf_edges VALUES (1)`)
	err = e.InterpretError(err)
	var ro *racefree.ReadOnlyError
	var pe *pgconn.PgError
	if !errors.As(err, &ro) {
		t.Fatalf("a write in a read-only transaction: %v; want a *ReadOnlyError", err)
	}
	if !errors.As(err, &pe) || pe.Code != "25006" {
		t.Errorf("the *ReadOnlyError %v does not unwrap to the server's 25006", err)
	}
}
