package seq_test

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/seq"
)

// TestOutside2EdgesKeyedPastInt32: NextKeyed answers numbers of the whole
// BIGINT range, on the pool and in the caller's transaction: on a counter
// past the largest 32-bit integer (2147483647) it answers the number after
// it, and its retry with the same key the same number, replayed; a key
// that takes the largest BIGINT itself is answered and replayed too.
func TestOutside2EdgesKeyedPastInt32(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, keys := seq.New(db), idempotency.New(db, nil)
		set := func(name string, last int64) {
			t.Helper()
			if _, err := c.Next(ctx, db, "wide", name); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, fmt.Sprintf(`UPDATE racefree_sequences SET last = %d WHERE scope = 'wide' AND name = '%s'`, last, name)); err != nil {
				t.Fatal(err)
			}
		}
		keyed := func(exec racefree.Executor, name string, n int64, key string, want int64, wantReplayed bool) {
			t.Helper()
			first, replayed, err := c.NextKeyed(ctx, exec, keys, "wide", name, n, key)
			if err != nil || first != want || replayed != wantReplayed {
				t.Fatalf("NextKeyed(%s, n %d, key %q) = %d, replayed %v, %v; want %d, replayed %v", name, n, key, first, replayed, err, want, wantReplayed)
			}
		}

		set("int32", math.MaxInt32)
		keyed(db, "int32", 2, "pool", math.MaxInt32+1, false)
		keyed(db, "int32", 2, "pool", math.MaxInt32+1, true)
		if err := db.InTx(ctx, func(tx *sql.Tx) error {
			keyed(tx, "int32", 1, "tx", math.MaxInt32+3, false)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		keyed(db, "int32", 1, "tx", math.MaxInt32+3, true)

		set("top", math.MaxInt64-1)
		keyed(db, "top", 1, "last", math.MaxInt64, false)
		keyed(db, "top", 1, "last", math.MaxInt64, true)
		if cur, err := c.Current(ctx, db, "wide", "top"); err != nil || cur != math.MaxInt64 {
			t.Fatalf("Current = %d, %v; want the maximum", cur, err)
		}
	})
}

// TestOutside2EdgesCurrentAsExecSeesIt: Current reads the counter as the
// executor it is given sees it. In the caller's open transaction it
// answers that transaction's own increment, while the pool still answers
// what was committed; once the transaction rolls back, both answer the
// committed number again.
func TestOutside2EdgesCurrentAsExecSeesIt(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := seq.New(db)
		current := func(exec racefree.Executor, where string, want int64) {
			t.Helper()
			if got, err := c.Current(ctx, exec, "books", "inv"); err != nil || got != want {
				t.Fatalf("Current %s = %d, %v; want %d", where, got, err, want)
			}
		}
		if _, err := c.Next(ctx, db, "books", "inv"); err != nil {
			t.Fatal(err)
		}
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		if first, err := c.NextN(ctx, tx, "books", "inv", 3); err != nil || first != 2 {
			t.Fatalf("NextN in the transaction = %d, %v; want 2", first, err)
		}
		current(tx, "in the transaction", 4)
		current(db, "on the pool, the transaction open", 1)
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		current(db, "after the rollback", 1)
	})
}
