package snapshot_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/snapshot"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestEdgesReadOnlyReadsOneSnapshot holds the edge between two queries
// of one check: a row another session commits between them is not seen
// by the second, because ReadOnly's transaction runs at REPEATABLE READ
// (one snapshot for all its queries), not READ COMMITTED (a snapshot per
// query), so rls-check and unique-check never judge a catalogue or a
// table that changed half-way through.
func TestEdgesReadOnlyReadsOneSnapshot(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("pgx", testdb.NewDSN(t, racefree.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE rf_snap (k int); INSERT INTO rf_snap VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	err = snapshot.ReadOnly(ctx, db, 30*time.Second, func(tx *sql.Tx) error {
		var level string
		if err := tx.QueryRowContext(ctx, `SHOW transaction_isolation`).Scan(&level); err != nil {
			return err
		}
		if level != "repeatable read" {
			t.Errorf("transaction_isolation %q, want repeatable read", level)
		}
		var first, second int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM rf_snap`).Scan(&first); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO rf_snap VALUES (2)`); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM rf_snap`).Scan(&second); err != nil {
			return err
		}
		if first != 1 || second != 1 {
			t.Errorf("counts %d then %d across another session's commit; want 1 and 1, one snapshot", first, second)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
