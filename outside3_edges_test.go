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
// whose fn failed, at once: its connection is back in the pool when InTx
// returns, on a pool of one the next InTx takes that connection and
// commits, and the failed attempt's write is not there. An attempt left
// open would keep the connection (and, on SQLite, the write lock) and
// every later call would wait for it; the test then ends that attempt's
// backend itself, so that its clean-up does not wait behind it too.
func TestEdges3AFailedAttemptIsRolledBack(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{MaxOpenConns: 1, Combine: racefree.CombineOff}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		if _, err := db.ExecContext(ctx, `CREATE TABLE rf_edges3 (k int PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		failed := errors.New("fn failed")
		pid := 0
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if db.Engine() == racefree.Postgres {
				pid = testdb.BackendPID(t, tx)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO rf_edges3 VALUES (1)`); err != nil {
				return err
			}
			return failed
		})
		if !errors.Is(err, failed) {
			t.Fatalf("InTx whose fn failed: %v; want fn's error", err)
		}
		if !poolReleased(t, db) {
			if pid != 0 {
				admin, err := sql.Open("pgx", testdb.PostgresURL(t))
				if err == nil {
					_, _ = admin.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid)
					_ = admin.Close()
				}
			}
			t.Fatal("after InTx returned fn's error, the pool of one still has its connection in use; want the failed attempt rolled back and its connection back")
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

// poolReleased waits until no connection of db's pool is in use, which is
// so once every call returned, a moment after when the pool's
// housekeeping holds one, and never while a transaction is left open. It
// reports false after 10 s.
func poolReleased(t *testing.T, db *racefree.DB) bool {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); db.SQL().Stats().InUse > 0; {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}
