package claim_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestCombinedCallsKeepTheirOutcomes runs claims through the combiner
// (racefree.Config.Combine): concurrent holders on their own keys, on one
// hot key, and in two tenants, with renewals, releases and stale fences.
// Every call gets the outcome it would get alone.
func TestCombinedCallsKeepTheirOutcomes(t *testing.T) {
	testdb.Each(t, &racefree.Config{Combine: true}, func(t *testing.T, db *racefree.DB) {
		claims := claim.New(db)
		base := context.Background()
		other, err := tenant.With(base, "other")
		if err != nil {
			t.Fatal(err)
		}
		// The first call of each tenant registers it, alone.
		for _, ctx := range []context.Context{base, other} {
			if _, err := claims.Acquire(ctx, db, "warm", "w", time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		const workers = 16
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners = map[string]int{} // tenant -> winners of "hot"
		)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, id := base, tenant.Default
				if w%2 == 1 {
					ctx, id = other, "other"
				}
				holder := fmt.Sprintf("h%d", w)
				key := fmt.Sprintf("own-%d", w)
				c, err := claims.Acquire(ctx, db, key, holder, time.Minute)
				if err != nil {
					t.Errorf("worker %d acquire: %v", w, err)
					return
				}
				if _, err := claims.Renew(ctx, db, key, holder, c.Fence, time.Minute); err != nil {
					t.Errorf("worker %d renew: %v", w, err)
				}
				if err := claims.Release(ctx, db, key, holder, c.Fence); err != nil {
					t.Errorf("worker %d release: %v", w, err)
				}
				again, err := claims.Acquire(ctx, db, key, holder, time.Minute)
				if err != nil || again.Fence != c.Fence+1 {
					t.Errorf("worker %d acquire after release: %+v, %v; want fence %d", w, again, err, c.Fence+1)
				}
				if _, err := claims.Renew(ctx, db, key, holder, c.Fence, time.Minute); !errors.Is(err, racefree.ErrStaleFence) {
					t.Errorf("worker %d renew of the old tenure: %v, want ErrStaleFence", w, err)
				}
				if err := claims.Release(ctx, db, key, holder, c.Fence); !errors.Is(err, racefree.ErrStaleFence) {
					t.Errorf("worker %d release of the old tenure: %v, want ErrStaleFence", w, err)
				}
				_, err = claims.Acquire(ctx, db, "hot", holder, time.Minute)
				switch {
				case err == nil:
					mu.Lock()
					winners[id]++
					mu.Unlock()
				case !errors.Is(err, racefree.ErrHeld):
					t.Errorf("worker %d acquire hot: %v", w, err)
				}
			}()
		}
		wg.Wait()
		if winners[tenant.Default] != 1 || winners["other"] != 1 {
			t.Errorf("winners of the hot key per tenant: %v, want one each", winners)
		}
		if s := db.CombineStats(); s.Ops == 0 {
			t.Errorf("no call went through the combiner: %+v", s)
		}
	})
}
