package racefree_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestInTxRetriesTransientConflictsUpToTxAttempts counts the attempts of
// InTx: a transient conflict (ErrRetryable) runs fn again, up to exactly
// TxAttempts times in all (10 when unset, with the default backoff; 3
// and 1 when set), and the last attempt's error is returned; a conflict
// that clears before the last attempt commits; any other error is not
// retried; a context that ends during the backoff stops the retries.
func TestInTxRetriesTransientConflictsUpToTxAttempts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  racefree.Config
		want int
	}{
		{racefree.Config{}, 10},
		{racefree.Config{TxAttempts: 3, TxBackoff: time.Microsecond}, 3},
		{racefree.Config{TxAttempts: 1, TxBackoff: time.Microsecond}, 1},
	} {
		// A pool of one: an attempt left open holds the connection the
		// next one waits for, and each run's 10 s context ends the wait
		// (on SQLite, rather than 10 s of busy waiting per attempt).
		c.cfg.MaxOpenConns = 1
		ok := t.Run(fmt.Sprintf("TxAttempts %d", c.cfg.TxAttempts), func(t *testing.T) {
			testdb.Each(t, &c.cfg, func(t *testing.T, db *racefree.DB) {
				ctx := context.Background()
				transient := fmt.Errorf("a serialization failure: %w", racefree.ErrRetryable)
				// run runs InTx with an fn that fails with fail for its
				// first failures attempts, and reports the attempts; one
				// attempt more than allowed stops the loop with another
				// error.
				run := func(ctx context.Context, failures int, fail error) (int, error) {
					ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					attempts := 0
					err := db.InTx(ctx, func(tx *sql.Tx) error {
						attempts++
						if attempts > c.want {
							return errors.New("one attempt more than TxAttempts")
						}
						if attempts <= failures {
							return fail
						}
						return nil
					})
					if !poolReleased(t, db) {
						t.Fatalf("after InTx returned %v, a connection of the pool is still in use; want each failed attempt rolled back", err)
					}
					return attempts, err
				}
				if n, err := run(ctx, c.want, transient); n != c.want || !errors.Is(err, racefree.ErrRetryable) {
					t.Errorf("always transient: %d attempts, %v; want %d, ErrRetryable", n, err, c.want)
				}
				if n, err := run(ctx, c.want-1, transient); n != c.want || err != nil {
					t.Errorf("transient until the last attempt: %d attempts, %v; want %d, nil", n, err, c.want)
				}
				other := errors.New("not transient")
				if n, err := run(ctx, c.want, other); n != 1 || !errors.Is(err, other) {
					t.Errorf("another error: %d attempts, %v; want 1, that error", n, err)
				}
				if c.want == 1 {
					return
				}
				cctx, cancel := context.WithCancel(ctx)
				attempts := 0
				err := db.InTx(cctx, func(tx *sql.Tx) error {
					attempts++
					cancel() // the backoff after this attempt ends at once
					return transient
				})
				if attempts != 1 || !errors.Is(err, context.Canceled) {
					t.Errorf("cancelled during the backoff: %d attempts, %v; want 1, context.Canceled", attempts, err)
				}
			})
		})
		if !ok {
			break // the next cases would only wait as long again
		}
	}
}

// TestOpenAppliesPoolDefaults: the pool holds at most MaxOpenConns
// connections, 10 when unset.
func TestOpenAppliesPoolDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  racefree.Config
		want int
	}{
		{racefree.Config{}, 10},
		{racefree.Config{MaxOpenConns: 3}, 3},
	} {
		t.Run(fmt.Sprintf("MaxOpenConns %d", c.cfg.MaxOpenConns), func(t *testing.T) {
			testdb.Each(t, &c.cfg, func(t *testing.T, db *racefree.DB) {
				if got := db.SQL().Stats().MaxOpenConnections; got != c.want {
					t.Fatalf("MaxOpenConnections %d, want %d", got, c.want)
				}
			})
		})
	}
}
