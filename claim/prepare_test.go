package claim_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/testing/testdb"
	"modernc.org/sqlite"
)

// TestPreparedClaimStatementsCompileOnceUnderStatistics runs claims on
// SQLite's pool after ANALYZE wrote statistics, and counts how often the
// connection compiles a statement that updates racefree_claims (SQLite's
// authorizer sees every compilation, first ones and repeats alike).
// SQLite built with STAT4 prepares a statement again at every call when a
// parameter it binds is compared with an indexed column in a join, so a
// release or renew that compared its parameters with the claim's columns
// directly compiled once per call, at twice its cost.
func TestPreparedClaimStatementsCompileOnceUnderStatistics(t *testing.T) {
	ctx := context.Background()
	dsn := testdb.NewDSN(t, racefree.SQLite)
	db := testdb.Open(t, dsn, &racefree.Config{MaxOpenConns: 1})
	claims := claim.New(db)
	cycle := func(db *racefree.DB, claims *claim.Store, key string) {
		t.Helper()
		c, err := claims.Acquire(ctx, db, key, "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := claims.Renew(ctx, db, key, "w", c.Fence, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := claims.Release(ctx, db, key, "w", c.Fence); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 {
		cycle(db, claims, fmt.Sprintf("fill-%d", i))
	}
	if _, err := db.ExecContext(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	var stat4 int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_stat4 WHERE tbl = 'racefree_claims'").Scan(&stat4); err != nil || stat4 == 0 {
		t.Fatalf("ANALYZE wrote no STAT4 samples for racefree_claims (%d, %v): this test proves nothing without them", stat4, err)
	}

	// A pool opened now loads the statistics with the schema.
	after := testdb.Open(t, dsn, &racefree.Config{MaxOpenConns: 1})
	var compiles atomic.Int64
	conn, err := after.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = conn.Raw(func(dc any) error {
		return dc.(sqlite.AuthorizerRegisterer).RegisterAuthorizer(func(action sqlite.AuthorizerActionCode, table, column, _, _ string) sqlite.AuthorizerReturnCode {
			if action == sqlite.AuthUpdate && table == "racefree_claims" && column == "expires_at" {
				compiles.Add(1)
			}
			return sqlite.AuthorizerOK
		})
	})
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	afterClaims := claim.New(after)
	const calls = 50
	for i := range calls {
		cycle(after, afterClaims, fmt.Sprintf("k-%d", i))
	}
	// Acquire (its upsert), Renew and Release compile once each.
	if n := compiles.Load(); n > 6 {
		t.Fatalf("%d compilations of statements updating racefree_claims in %d acquire/renew/release cycles: a statement is prepared again at every call", n, calls)
	}
}

// TestCombinedBatchesRunOnOneGenericPlan runs rounds of four callers at
// once through the combiner on a PostgreSQL pool of one connection, so
// that acquires, renewals and releases share batches and run their
// statements over arrays, and reads from that connection how PostgreSQL
// planned each of them. Left to choose, PostgreSQL plans a prepared
// statement for its values at its first five runs, and at every later one
// while the generic plan's estimate is dearer: a Many form's generic plan
// counts its arrays at 10 elements, so over batches of two to eight it
// was planned at every batch, at a cost above its run
// (docs/performance.md, "A plan at every batch"). The setting that
// forces the generic plan ends with each batch.
func TestCombinedBatchesRunOnOneGenericPlan(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), &racefree.Config{Combine: racefree.CombineOn, MaxOpenConns: 1})
	claims := claim.New(db)
	forms := []string{"acquire_many", "raise_new_many", "renew_many", "release_many"}
	plans := func() (runs, custom map[string]int) {
		t.Helper()
		runs, custom = map[string]int{}, map[string]int{}
		rows, err := db.QueryContext(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var st string
			var g, c int
			if err := rows.Scan(&st, &g, &c); err != nil {
				t.Fatal(err)
			}
			for _, f := range forms {
				if strings.HasPrefix(st, "-- "+f+":") {
					runs[f], custom[f] = g+c, c
				}
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return runs, custom
	}
	ran := func(runs map[string]int) bool {
		for _, f := range forms {
			if runs[f] < 6 {
				return false
			}
		}
		return true
	}
	for round := 0; ; round++ {
		runs, custom := plans()
		if ran(runs) {
			for _, f := range forms {
				if custom[f] != 0 {
					t.Errorf("%s: %d of its %d runs planned for their values, want every run on the generic plan", f, custom[f], runs[f])
				}
			}
			// The setting ended with each batch: the connection's other
			// statements are planned as PostgreSQL chooses.
			var mode string
			if err := db.QueryRowContext(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode); err != nil || mode != "auto" {
				t.Errorf("the connection's plan_cache_mode after the batches: %q (%v), want auto", mode, err)
			}
			return
		}
		if round == 300 {
			t.Fatalf("after %d rounds the forms over arrays ran %v times, want 6 each: no batches of two or more formed", round, runs)
		}
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				key := fmt.Sprintf("k%d-%d", round, w)
				c, err := claims.Acquire(ctx, db, key, "w", time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := claims.Renew(ctx, db, key, "w", c.Fence, time.Minute); err != nil {
					t.Error(err)
				}
				if err := claims.Release(ctx, db, key, "w", c.Fence); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}
