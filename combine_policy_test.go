package racefree_test

import (
	"context"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
)

// TestTheCombinerIsOnByDefault checks Config.Combine's policies on both
// engines: a DB opened with a nil Config, or with CombineOn, runs a pool
// operation in a batch of the combiner, and one opened with CombineOff
// leaves it to the caller to run alone.
func TestTheCombinerIsOnByDefault(t *testing.T) {
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		// testdb.Open migrates the database; CombineOff is explicit, so
		// that RACEFREE_COMBINE does not change it.
		off := testdb.Open(t, d, &racefree.Config{Combine: racefree.CombineOff})
		if _, err := off.ExecContext(ctx, `CREATE TABLE combine_p (k TEXT PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		// dsn.Open, not testdb.Open: the Config is exactly what a caller
		// passes, untouched by RACEFREE_COMBINE.
		zero, err := dsn.Open(ctx, d, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = zero.Close() })
		on, err := dsn.Open(ctx, d, &racefree.Config{Combine: racefree.CombineOn})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = on.Close() })
		for _, c := range []struct {
			name    string
			db      *racefree.DB
			combine bool
		}{
			{"nil Config", zero, true},
			{"CombineOn", on, true},
			{"CombineOff", off, false},
		} {
			if got := wire.Of(c.db).Combining(); got != c.combine {
				t.Errorf("%s: Combining() = %v, want %v", c.name, got, c.combine)
			}
			before := c.db.CombineStats()
			op := &wire.Op{Group: "g", Key: c.name, Stmts: []*wire.Statement{
				{Query: `INSERT INTO combine_p (k) VALUES ($1)`, Args: []any{c.name}},
			}}
			ran, err := wire.Of(c.db).Combine(ctx, op)
			if ran != c.combine || err != nil {
				t.Fatalf("%s: Combine = %v, %v; want %v, nil", c.name, ran, err, c.combine)
			}
			after := c.db.CombineStats()
			if got, want := after.Batches-before.Batches, map[bool]int64{true: 1, false: 0}[c.combine]; got != want {
				t.Errorf("%s: %d batches ran, want %d", c.name, got, want)
			}
		}
	})
}
