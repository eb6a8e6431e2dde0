package claim_test

import (
	"context"
	"database/sql"
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
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn}, func(t *testing.T, db *racefree.DB) {
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

// TestCallsOnOneClaimTakeTurns queues acquires, renewals and releases of
// one key, by two holders, in a known order behind a batch held in flight
// (Config.CombineBatches 1), and gives each caller the outcome it gets
// alone, one after the other: of two acquires one wins and the other sees
// the winner, a release frees the key for the next acquire, which starts
// the next fence, and a release of the old tenure after it is stale.
// Claim's calls have Many forms on both engines (one statement over
// arrays; on SQLite from eight of a kind), so a batch holds the key once:
// one batch each, in the order they came.
func TestCallsOnOneClaimTakeTurns(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		claims := claim.New(db)
		gate, err := claims.Acquire(ctx, db, "gate", "g", time.Hour) // registers the tenant
		if err != nil {
			t.Fatal(err)
		}
		type outcome struct {
			c   *claim.Claim
			err error
		}
		got := make([]outcome, 7)
		acquire := func(i int, holder string) func() {
			return func() { got[i].c, got[i].err = claims.Acquire(ctx, db, "k", holder, time.Minute) }
		}
		calls := []func(){
			acquire(0, "h1"),
			acquire(1, "h2"),
			func() { got[2].c, got[2].err = claims.Renew(ctx, db, "k", "h1", 1, time.Minute) },
			func() { got[3].err = claims.Release(ctx, db, "k", "h1", 1) },
			acquire(4, "h2"),
			func() { got[5].err = claims.Release(ctx, db, "k", "h1", 1) },
			acquire(6, "h1"),
		}
		// The gate: a batch in flight, waiting for the gate's row, which a
		// transaction holds (on SQLite, the write lock).
		before, wait := testdb.Behind(t, db,
			func(tx *sql.Tx) error {
				_, err := claims.Renew(ctx, tx, "gate", "g", gate.Fence, time.Hour)
				return err
			},
			func() error { _, err := claims.Acquire(ctx, db, "gate", "g", time.Hour); return err },
			calls...)
		wait()

		if c := got[0].c; got[0].err != nil || c.Holder != "h1" || c.Fence != 1 || c.Count != 1 {
			t.Errorf("h1's acquire: %+v, %v; want won at fence 1, count 1", c, got[0].err)
		}
		var held1 *claim.HeldError
		if !errors.As(got[1].err, &held1) || held1.Claim.Holder != "h1" || held1.Claim.Fence != 1 || held1.Claim.Count != 2 {
			t.Errorf("h2's acquire: %+v, %v; want ErrHeld by h1 at fence 1, count 2", got[1].c, got[1].err)
		}
		if c := got[2].c; got[2].err != nil || c.Holder != "h1" || c.Fence != 1 {
			t.Errorf("h1's renewal: %+v, %v; want renewed at fence 1", c, got[2].err)
		}
		if got[3].err != nil {
			t.Errorf("h1's release: %v", got[3].err)
		}
		if c := got[4].c; got[4].err != nil || c.Holder != "h2" || c.Fence != 2 || c.Count != 3 {
			t.Errorf("h2's acquire after the release: %+v, %v; want won at fence 2, count 3", c, got[4].err)
		}
		if !errors.Is(got[5].err, racefree.ErrStaleFence) {
			t.Errorf("h1's release of its old tenure: %v, want ErrStaleFence", got[5].err)
		}
		var held2 *claim.HeldError
		if !errors.As(got[6].err, &held2) || held2.Claim.Holder != "h2" || held2.Claim.Fence != 2 || held2.Claim.Count != 4 {
			t.Errorf("h1's acquire after h2's: %+v, %v; want ErrHeld by h2 at fence 2, count 4", got[6].c, got[6].err)
		}
		s := db.CombineStats()
		batches := int64(1 + len(calls)) // the held one, then one each
		if got := s.Batches - before.Batches; got != batches || s.Failed != before.Failed {
			t.Errorf("%d batches (%+v), want %d, none failed", got, s, batches)
		}
	})
}

// TestACombinedCallGivesUpAtItsDeadline holds the write lock (SQLite) or
// the claims' row locks (PostgreSQL) in an open transaction with the
// combiner on: an acquire, a renewal and a release whose caller's context
// has a deadline of 200 ms lead batches that cannot run, and each returns
// the context's error at that deadline, not when the lock is free, having
// changed nothing. On PostgreSQL the server ends each batch at the
// deadline too: no session is left waiting to commit it later.
func TestACombinedCallGivesUpAtItsDeadline(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		claims := claim.New(db)
		held, err := claims.Acquire(ctx, db, "k", "w1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		free, err := claims.Acquire(ctx, db, "free", "w1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := claims.Release(ctx, db, "free", "w1", free.Fence); err != nil {
			t.Fatal(err)
		}
		before := map[string]*claim.Claim{}
		for _, key := range []string{"k", "free"} {
			if before[key], err = claims.Get(ctx, db, key); err != nil {
				t.Fatal(err)
			}
		}
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `UPDATE racefree_claims SET count = count WHERE key IN ('k', 'free')`); err != nil {
			t.Fatal(err)
		}
		failed := db.CombineStats().Failed
		for _, c := range []struct {
			what string
			call func(ctx context.Context) error
		}{
			{"acquire", func(ctx context.Context) error {
				_, err := claims.Acquire(ctx, db, "free", "w2", time.Minute)
				return err
			}},
			{"renew", func(ctx context.Context) error {
				_, err := claims.Renew(ctx, db, "k", "w1", held.Fence, 10*time.Minute)
				return err
			}},
			{"release", func(ctx context.Context) error { return claims.Release(ctx, db, "k", "w1", held.Fence) }},
		} {
			err := testdb.Within(t, 5*time.Second, c.what+" bounded by 200ms", func() error {
				cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				return c.call(cctx)
			})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s past its deadline: %v; want context.DeadlineExceeded", c.what, err)
			}
		}
		if s := db.CombineStats(); s.Failed-failed != 3 {
			t.Errorf("combiner %+v: want the three batches that gave up (%d before)", s, failed)
		}
		if db.Engine() == racefree.Postgres {
			pid := testdb.BackendPID(t, tx)
			testdb.Unblocked(t, db, pid, 5*time.Second)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"k", "free"} {
			after, err := claims.Get(ctx, db, key)
			if err != nil {
				t.Fatal(err)
			}
			if after.Holder != before[key].Holder || after.Fence != before[key].Fence ||
				!after.ExpiresAt.Equal(before[key].ExpiresAt) || after.Count != before[key].Count {
				t.Errorf("%s after the calls that gave up: %+v, want as before them: %+v", key, after, before[key])
			}
		}
	})
}
