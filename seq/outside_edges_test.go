package seq_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/seq"
)

// TestOutsideEdgesKeyedRefusesABadCounterBeforeItsKey: NextKeyed judges
// the counter's scope and name before it touches the request key. An
// empty scope or name is an InputError that records no key, on the pool
// and in the caller's transaction, which then commits its own write: the
// idempotency table holds no record afterwards, and the caller's counter
// counted once.
func TestOutsideEdgesKeyedRefusesABadCounterBeforeItsKey(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, keys := seq.New(db), idempotency.New(db, nil)
		bad := []struct{ scope, name string }{{"", "n"}, {"s", ""}}
		for _, in := range bad {
			if _, _, err := c.NextKeyed(ctx, db, keys, in.scope, in.name, 1, "k"); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("NextKeyed(%q, %q) on the pool: %v; want an InputError", in.scope, in.name, err)
			}
		}
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			for _, in := range bad {
				if _, _, err := c.NextKeyed(ctx, tx, keys, in.scope, in.name, 1, "k"); !errors.Is(err, racefree.ErrInvalidInput) {
					t.Errorf("NextKeyed(%q, %q) in the caller's transaction: %v; want an InputError", in.scope, in.name, err)
				}
			}
			_, err := c.Next(ctx, tx, "edge", "own") // the caller's own write, committed
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		var records int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_idempotency`).Scan(&records); err != nil || records != 0 {
			t.Fatalf("%d idempotency records, %v; want none: a refused call recorded its key", records, err)
		}
		if got, err := c.Current(ctx, db, "edge", "own"); err != nil || got != 1 {
			t.Fatalf("the caller's counter = %d, %v; want 1", got, err)
		}
	})
}
