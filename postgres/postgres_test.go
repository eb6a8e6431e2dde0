package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testdb"
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
	err := db.InterpretError(db.QueryRowContext(ctx, `SELECT 1 WHERE false`).Scan(new(int)))
	if !errors.Is(err, racefree.ErrNotFound) {
		t.Errorf("no rows: got %v", err)
	}
	_, err = db.ExecContext(ctx, `DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40001'; END $$`)
	if !errors.Is(db.InterpretError(err), racefree.ErrRetryable) {
		t.Errorf("40001: got %v", err)
	}
	_, err = db.ExecContext(ctx, `DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40P01'; END $$`)
	if !errors.Is(db.InterpretError(err), racefree.ErrRetryable) {
		t.Errorf("40P01: got %v", err)
	}
}
