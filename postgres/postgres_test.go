package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/postgres"
)

func TestOpenRejectsABadURL(t *testing.T) {
	t.Parallel()
	if _, err := postgres.Open(context.Background(), "postgres://x:badport/db", nil); err == nil {
		t.Fatal("want an error")
	}
}

func TestInterpretError(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	ctx := context.Background()
	err := wire.Of(db).InterpretError(db.QueryRowContext(ctx, `SELECT 1 WHERE false`).Scan(new(int)))
	if !errors.Is(err, racefree.ErrNotFound) {
		t.Errorf("no rows: got %v", err)
	}
	_, err = db.ExecContext(ctx, `DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40001'; END $$`)
	if !errors.Is(wire.Of(db).InterpretError(err), racefree.ErrRetryable) {
		t.Errorf("40001: got %v", err)
	}
	_, err = db.ExecContext(ctx, `DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40P01'; END $$`)
	if !errors.Is(wire.Of(db).InterpretError(err), racefree.ErrRetryable) {
		t.Errorf("40P01: got %v", err)
	}
}

func TestInterpretErrorUnavailable(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	ctx := context.Background()
	for _, code := range []string{"08006", "57P01", "57P03"} {
		_, err := db.ExecContext(ctx, `DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '`+code+`'; END $$`)
		if !errors.Is(wire.Of(db).InterpretError(err), racefree.ErrUnavailable) {
			t.Errorf("%s: got %v", code, err)
		}
	}
	_, err := db.ExecContext(ctx, `DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '57014'; END $$`)
	if errors.Is(wire.Of(db).InterpretError(err), racefree.ErrUnavailable) {
		t.Errorf("57014 query_canceled is not an outage: got %v", err)
	}

	// A backend terminated under an open connection.
	conn, err := db.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pid := testdb.BackendPID(t, conn)
	if _, err := db.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	err = conn.QueryRowContext(ctx, `SELECT 1`).Scan(new(int))
	if got := wire.Of(db).InterpretError(err); !errors.Is(got, racefree.ErrUnavailable) {
		t.Errorf("terminated backend: got %v", got)
	}
}
