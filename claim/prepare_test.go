package claim_test

import (
	"context"
	"fmt"
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
