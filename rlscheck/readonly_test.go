package rlscheck

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestCheckRunsReadOnly: the transaction a check runs in refuses writes, and
// carries the statement timeout for itself only.
func TestCheckRunsReadOnly(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("pgx", testdb.NewDSN(t, racefree.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // the next transaction reuses the connection
	ctx := context.Background()
	c := New(db)
	err = c.readOnly(ctx, 1234*time.Millisecond, func(tx *sql.Tx) error {
		var timeout string
		if err := tx.QueryRowContext(ctx, `SHOW statement_timeout`).Scan(&timeout); err != nil {
			return err
		}
		if timeout != "1234ms" {
			t.Errorf("statement_timeout %s inside the check, want 1234ms", timeout)
		}
		_, err := tx.ExecContext(ctx, `CREATE TABLE written (id int)`)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "read-only transaction") {
		t.Fatalf("CREATE TABLE in the check's transaction: %v, want a read-only refusal", err)
	}
	var timeout string
	if err := db.QueryRowContext(ctx, `SHOW statement_timeout`).Scan(&timeout); err != nil {
		t.Fatal(err)
	}
	if timeout == "1234ms" {
		t.Fatal("the statement timeout outlived the check's transaction")
	}
}
