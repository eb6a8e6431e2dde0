package seq_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/seq"
)

// TestOutside3EdgesInputErrorNamesTheArgument: an *racefree.InputError
// names the argument that is wrong (its Field), so a caller (or the
// server, which answers with it) can point at it: a bad scope is "scope",
// a bad name "name" (from NextN, NextKeyed and Current alike), an n
// outside 1..MaxN is "n" (from NextN and NextKeyed), and NextKeyed without
// an idempotency store is "keys".
func TestOutside3EdgesInputErrorNamesTheArgument(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, keys := seq.New(db), idempotency.New(db, nil)
		long := strings.Repeat("x", seq.MaxNameBytes+1)
		field := func(what string, err error, want string) {
			t.Helper()
			var ie *racefree.InputError
			if !errors.As(err, &ie) || ie.Field != want {
				t.Errorf("%s: %v; want an InputError of field %q", what, err, want)
			}
		}
		for _, in := range []struct{ scope, name, want string }{
			{"", "invoice", "scope"},
			{"acme", "", "name"},
			{"acme", long, "name"},
			{"acme", "in\x00voice", "name"},
		} {
			what := fmt.Sprintf("(%q, %d bytes of name)", in.scope, len(in.name))
			_, err := c.NextN(ctx, db, in.scope, in.name, 1)
			field("NextN"+what, err, in.want)
			_, _, err = c.NextKeyed(ctx, db, keys, in.scope, in.name, 1, "k")
			field("NextKeyed"+what, err, in.want)
			_, err = c.Current(ctx, db, in.scope, in.name)
			field("Current"+what, err, in.want)
		}
		for _, n := range []int64{0, seq.MaxN + 1} {
			_, err := c.NextN(ctx, db, "acme", "invoice", n)
			field(fmt.Sprintf("NextN(n = %d)", n), err, "n")
			_, _, err = c.NextKeyed(ctx, db, keys, "acme", "invoice", n, "k")
			field(fmt.Sprintf("NextKeyed(n = %d)", n), err, "n")
		}
		_, _, err := c.NextKeyed(ctx, db, nil, "acme", "invoice", 1, "k")
		field("NextKeyed without keys", err, "keys")
		if got, err := c.Current(ctx, db, "acme", "invoice"); err != nil || got != 0 {
			t.Fatalf("Current after refused calls = %d, %v; want 0", got, err)
		}
	})
}

// TestOutside3EdgesCancelledCallerGetsNothing: a caller whose context has
// ended before its call gets context.Canceled and no answer: Current
// reads no number (its error names the counter as scope/name), and NextKeyed on the pool consumes nothing and records
// no key, so the same key later hands out the first number, not a replay.
func TestOutside3EdgesCancelledCallerGetsNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, keys := seq.New(db), idempotency.New(db, nil)
		if _, err := c.NextN(ctx, db, "acme", "read", 4); err != nil {
			t.Fatal(err)
		}
		gone, stop := context.WithCancel(ctx)
		stop()
		if got, err := c.Current(gone, db, "acme", "read"); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `"acme"/"read"`) {
			t.Fatalf("Current with a cancelled context = %d, %v; want context.Canceled naming the counter \"acme\"/\"read\"", got, err)
		}
		if first, _, err := c.NextKeyed(gone, db, keys, "acme", "keyed", 2, "gone"); !errors.Is(err, context.Canceled) {
			t.Fatalf("NextKeyed with a cancelled context = %d, %v; want context.Canceled", first, err)
		}
		if got, err := c.Current(ctx, db, "acme", "keyed"); err != nil || got != 0 {
			t.Fatalf("Current after a cancelled NextKeyed = %d, %v; want 0 (nothing consumed)", got, err)
		}
		if first, replayed, err := c.NextKeyed(ctx, db, keys, "acme", "keyed", 2, "gone"); err != nil || first != 1 || replayed {
			t.Fatalf("NextKeyed with the key of a cancelled call = %d, replayed %v, %v; want 1, not replayed", first, replayed, err)
		}
	})
}

// TestOutside3EdgesKeyedExhausted: NextKeyed on a counter that n would
// take past the largest BIGINT answers an error matching ErrExhausted (as
// NextN does, whose error names the counter as scope/name), on
// the pool and in the caller's transaction, and consumes nothing. On the
// pool it records no key: the same key with an n that fits then hands out
// the numbers up to the maximum, not replayed. In the caller's transaction,
// committed all the same, the key stays free for a retry of the same
// request, which runs again and is refused again (never a request in
// progress, never a replay).
func TestOutside3EdgesKeyedExhausted(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, keys := seq.New(db), idempotency.New(db, nil)
		for _, name := range []string{"pool", "tx"} {
			if _, err := c.Next(ctx, db, "full", name); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, fmt.Sprintf(`UPDATE racefree_sequences SET last = %d WHERE scope = 'full' AND name = '%s'`, int64(math.MaxInt64-2), name)); err != nil {
				t.Fatal(err)
			}
		}

		if _, err := c.NextN(ctx, db, "full", "pool", 3); !errors.Is(err, seq.ErrExhausted) || !strings.Contains(err.Error(), `"full"/"pool"`) {
			t.Fatalf("NextN past the maximum: %v; want ErrExhausted naming the counter \"full\"/\"pool\"", err)
		}
		if _, _, err := c.NextKeyed(ctx, db, keys, "full", "pool", 3, "k"); !errors.Is(err, seq.ErrExhausted) {
			t.Fatalf("NextKeyed past the maximum on the pool: %v; want ErrExhausted", err)
		}
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if _, _, err := c.NextKeyed(ctx, tx, keys, "full", "tx", 3, "k"); !errors.Is(err, seq.ErrExhausted) {
				return fmt.Errorf("NextKeyed past the maximum in the caller's transaction: %v; want ErrExhausted", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"pool", "tx"} {
			if got, err := c.Current(ctx, db, "full", name); err != nil || got != math.MaxInt64-2 {
				t.Fatalf("Current(%s) after the refusal = %d, %v; want %d (nothing consumed)", name, got, err, int64(math.MaxInt64-2))
			}
		}
		// The caller's transaction committed: its refused key is free for a
		// retry of the same request, which runs again and is refused again.
		if _, _, err := c.NextKeyed(ctx, db, keys, "full", "tx", 3, "k"); !errors.Is(err, seq.ErrExhausted) {
			t.Fatalf("NextKeyed(tx) retried past the maximum: %v; want ErrExhausted", err)
		}
		for _, in := range []struct{ name, key string }{{"pool", "k"}, {"tx", "k2"}} {
			if first, replayed, err := c.NextKeyed(ctx, db, keys, "full", in.name, 2, in.key); err != nil || first != math.MaxInt64-1 || replayed {
				t.Fatalf("NextKeyed(%s, key %q) up to the maximum = %d, replayed %v, %v; want %d, not replayed", in.name, in.key, first, replayed, err, int64(math.MaxInt64-1))
			}
		}
	})
}
