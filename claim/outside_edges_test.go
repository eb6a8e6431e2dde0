package claim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestEdgesLeasesAndFloorsSurviveTheContractMigration holds the edge of
// the tenants' contract step (migration 012, which SQLite runs by
// rebuilding each table and copying its rows): a lease taken before it
// is still its holder's after it, at its fence, and refused to another
// holder; a key the reaper deleted before it starts above the floor the
// reap raised, never at fence 1 again (fences never go backwards, not
// across a migration).
func TestEdgesLeasesAndFloorsSurviveTheContractMigration(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		clock := racefree.NewManualClock(t0)
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated, Clock: clock})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		claims := claim.New(db)
		held, err := claims.Acquire(ctx, db, "held", "a", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, holder := range []string{"a", "b", "c"} { // fences 1, 2, 3 on "gone"
			c, err := claims.Acquire(ctx, db, "gone", holder, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := claims.Release(ctx, db, "gone", holder, c.Fence); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Second)
		if n, err := claims.Reap(ctx, 0, 0); err != nil || n != 1 {
			t.Fatalf("reap before the migration: %d, %v; want 1", n, err)
		}
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		after, err := claims.Get(ctx, db, "held")
		if err != nil || after.Holder != "a" || after.Fence != held.Fence || !after.Live || !after.ExpiresAt.Equal(held.ExpiresAt) {
			t.Fatalf("the lease after the migration: %+v, %v; want a's live lease at fence %d until %v", after, err, held.Fence, held.ExpiresAt)
		}
		if c, err := claims.Acquire(ctx, db, "held", "b", time.Minute); !errors.Is(err, racefree.ErrHeld) {
			t.Fatalf("another holder's acquire of the lease after the migration: %+v, %v; want ErrHeld", c, err)
		}
		if c, err := claims.Acquire(ctx, db, "gone", "d", time.Minute); err != nil || c.Fence <= 3 {
			t.Fatalf("acquire of a key reaped at fence 3 before the migration: %+v, %v; want a fence above 3", c, err)
		}
	})
}
