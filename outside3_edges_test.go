package racefree_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// A third round from outside of InTx's retry classes (tx.go): each test
// holds one promise at the point where a slip would break it.

// TestEdges3AFailedAttemptIsRolledBack: InTx rolls back a transaction
// whose fn failed, at once: on a pool of one connection the next InTx
// takes that connection and commits, and the failed attempt's write is
// not there. An attempt left open would keep the connection (and, on
// SQLite, the write lock) and every later call would wait for it.
func TestEdges3AFailedAttemptIsRolledBack(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{MaxOpenConns: 1, Combine: racefree.CombineOff}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		if _, err := db.ExecContext(ctx, `CREATE TABLE rf_edges3 (k int PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		failed := errors.New("fn failed")
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO rf_edges3 VALUES (1)`); err != nil {
				return err
			}
			return failed
		})
		if !errors.Is(err, failed) {
			t.Fatalf("InTx whose fn failed: %v; want fn's error", err)
		}
		wait, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err = db.InTx(wait, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(wait, `INSERT INTO rf_edges3 VALUES (2)`)
			return err
		})
		if err != nil {
			t.Fatalf("the next InTx on a pool of one: %v; want it to commit, the failed attempt rolled back", err)
		}
		if got := testdb.Strings(t, db, `SELECT k FROM rf_edges3 ORDER BY k`); len(got) != 1 || got[0] != "2" {
			t.Errorf("rows after a failed and a committed InTx: %v; want [2]", got)
		}
	})
}
