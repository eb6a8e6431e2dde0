package seq_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/seq"
)

// TestEdgesInputAtItsBounds tries seq's input limits at the limit and one
// past, on each engine. A scope of exactly MaxScopeBytes and a name of
// exactly MaxNameBytes (two-byte characters: the limit counts bytes, not
// characters) are a counter that NextN, NextKeyed and Current accept; one
// byte more, in either alone, is an InputError from each. NextKeyed with n
// outside 1..MaxN (0, -1, MaxN+1) in the caller's transaction is an
// InputError that records no key there: the transaction commits the
// caller's other writes, and the same key with n = 1 then hands out the
// next number, neither a mismatch nor a request still in progress.
func TestEdgesInputAtItsBounds(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, keys := seq.New(db), idempotency.New(db, nil)
		scope := strings.Repeat("é", seq.MaxScopeBytes/2)
		name := strings.Repeat("ñ", seq.MaxNameBytes/2)
		if len(scope) != seq.MaxScopeBytes || len(name) != seq.MaxNameBytes {
			t.Fatalf("scope of %d bytes, name of %d; want %d and %d", len(scope), len(name), seq.MaxScopeBytes, seq.MaxNameBytes)
		}
		if n, err := c.NextN(ctx, db, scope, name, 2); err != nil || n != 1 {
			t.Fatalf("NextN at both limits = %d, %v; want 1", n, err)
		}
		if first, replayed, err := c.NextKeyed(ctx, db, keys, scope, name, 1, "at-the-limit"); err != nil || first != 3 || replayed {
			t.Fatalf("NextKeyed at both limits = %d, replayed %v, %v; want 3, not replayed", first, replayed, err)
		}
		if got, err := c.Current(ctx, db, scope, name); err != nil || got != 3 {
			t.Fatalf("Current at both limits = %d, %v; want 3", got, err)
		}
		for _, in := range []struct{ scope, name string }{{scope + "x", name}, {scope, name + "x"}} {
			if _, err := c.NextN(ctx, db, in.scope, in.name, 1); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("NextN with a scope of %d bytes and a name of %d: %v; want an InputError", len(in.scope), len(in.name), err)
			}
			if _, _, err := c.NextKeyed(ctx, db, keys, in.scope, in.name, 1, "one-past"); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("NextKeyed with a scope of %d bytes and a name of %d: %v; want an InputError", len(in.scope), len(in.name), err)
			}
			if _, err := c.Current(ctx, db, in.scope, in.name); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Current with a scope of %d bytes and a name of %d: %v; want an InputError", len(in.scope), len(in.name), err)
			}
		}

		err := db.InTx(ctx, func(tx *sql.Tx) error {
			for _, n := range []int64{0, -1, seq.MaxN + 1} {
				if _, _, err := c.NextKeyed(ctx, tx, keys, "edge", "n", n, "bad-n"); !errors.Is(err, racefree.ErrInvalidInput) {
					t.Errorf("NextKeyed(n = %d) in the caller's transaction: %v; want an InputError", n, err)
				}
			}
			_, err := c.Next(ctx, tx, "edge", "n") // the caller's own write, committed
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if first, replayed, err := c.NextKeyed(ctx, db, keys, "edge", "n", 1, "bad-n"); err != nil || first != 2 || replayed {
			t.Fatalf("NextKeyed(n = 1) with the key of the refused calls = %d, replayed %v, %v; want 2, not replayed: the refused calls recorded nothing", first, replayed, err)
		}
	})
}
