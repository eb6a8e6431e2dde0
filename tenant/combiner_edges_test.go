package tenant_test

import (
	"context"
	"slices"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// Edges of send.Do, the one way a primitive's statements travel (the
// combiner, a pipeline, or one statement alone), found by reading it from
// outside.

// TestEdgesAStatementAloneReportsTheRowsItChanged: send.Do's statement
// alone (Op.Alone) without Dest, with the combiner on or off, sets its RowsAffected to the rows it changed: 1 for
// the row there, 0 for one that is not.
func TestEdgesAStatementAloneReportsTheRowsItChanged(t *testing.T) {
	t.Parallel()
	testdb.EachPath(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		testdb.ExecAll(t, db,
			`CREATE TABLE edges_alone (k TEXT PRIMARY KEY, v BIGINT NOT NULL)`,
			`INSERT INTO edges_alone (k, v) VALUES ('here', 0)`)
		q := `UPDATE edges_alone SET v = v + 1 WHERE k = ?`
		if db.Engine() == racefree.Postgres {
			q = `UPDATE edges_alone SET v = v + 1 WHERE k = $1`
		}
		for k, want := range map[string]int64{"here": 1, "nowhere": 0} {
			st := &wire.Statement{Query: q, Args: []any{k}}
			way, err := send.Do(ctx, db, db, &send.Op{Alone: st})
			if err != nil || way != send.Alone {
				t.Fatalf("%s: way %v, %v; want Alone, no error", k, way, err)
			}
			if st.RowsAffected != want {
				t.Errorf("%s: RowsAffected %d, want %d", k, st.RowsAffected, want)
			}
		}
	})
}

// TestEdgesATenantsFirstCombinedWriteRecordsIt: a tenant's first write on
// the pool, with the combiner on, is never combined before the process
// recorded the tenant: it runs alone and records it, so that tenant.Each
// (every reaper) visits it; its later writes combine.
func TestEdgesATenantsFirstCombinedWriteRecordsIt(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn}, func(t *testing.T, db *racefree.DB) {
		ctx, err := tenant.With(context.Background(), "edges-fresh")
		if err != nil {
			t.Fatal(err)
		}
		testdb.ExecAll(t, db, `CREATE TABLE edges_first (k TEXT PRIMARY KEY)`)
		q := `INSERT INTO edges_first (k) VALUES (?)`
		if db.Engine() == racefree.Postgres {
			q = `INSERT INTO edges_first (k) VALUES ($1)`
		}
		for i, k := range []string{"first", "second"} {
			st := &wire.Statement{Query: q, Args: []any{k}}
			way, err := send.Do(ctx, db, db, &send.Op{Key: "edges:" + k, Stmts: []*wire.Statement{st}, Alone: st})
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			if want := []send.Way{send.Alone, send.Together}[i]; way != want {
				t.Errorf("%s write: way %v, want %v", k, way, want)
			}
		}
		var seen []string
		if err := tenant.Each(context.Background(), db, func(ctx context.Context) error {
			seen = append(seen, tenant.From(ctx))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(seen, "edges-fresh") {
			t.Fatalf("tenant.Each visits %v, not the tenant whose first write was on the pool", seen)
		}
	})
}
