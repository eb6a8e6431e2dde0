// Package snapshot runs a checker's reads of a PostgreSQL database in one
// snapshot that can change nothing and that the server ends in time: the
// one way rls-check and unique-check open their transaction.
package snapshot

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// ReadOnly runs fn in BEGIN READ ONLY at REPEATABLE READ on db, so that
// every query of fn reads one snapshot and none can write, with
// statement_timeout set to timeout for the transaction only
// (set_config(…, true) is SET LOCAL, so a pooled connection goes back
// without it), and rolls back whatever fn returns. Errors: the BEGIN's
// ("begin read only: …"), the setting's ("statement timeout: …"), or
// fn's as it returned it.
func ReadOnly(ctx context.Context, db *sql.DB, timeout time.Duration, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return fmt.Errorf("begin read only: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT set_config('statement_timeout', $1, true)`, fmt.Sprintf("%dms", timeout.Milliseconds())); err != nil {
		return fmt.Errorf("statement timeout: %w", err)
	}
	return fn(tx)
}
