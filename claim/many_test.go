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
)

// TestABatchOfAcquiresGivesEachCallerItsOwnRow sends a batch of acquires
// on distinct keys, some held by others, as one statement over arrays
// (PostgreSQL, racefree.Config.Combine), then a batch of releases, some
// not the caller's. Every key has a fence of its own, so a caller handed
// another's row would see a wrong key, holder or fence: each caller gets
// its own outcome, as alone.
func TestABatchOfAcquiresGivesEachCallerItsOwnRow(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1})
	claims := claim.New(db)
	ctx := context.Background()
	const n = 12
	key := func(i int) string { return fmt.Sprintf("k%02d", i) }
	// Key i has had i tenures; every third key is then held by another.
	for i := range n {
		for range i {
			c, err := claims.Acquire(ctx, db, key(i), "old", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := claims.Release(ctx, db, key(i), "old", c.Fence); err != nil {
				t.Fatal(err)
			}
		}
		if i%3 == 0 {
			if _, err := claims.Acquire(ctx, db, key(i), fmt.Sprintf("other-%d", i), time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	var acquired [n]*claim.Claim
	gated(t, db, claims, n, func(i int) {
		c, err := claims.Acquire(ctx, db, key(i), fmt.Sprintf("c-%d", i), time.Minute)
		var held *claim.HeldError
		switch {
		case i%3 == 0:
			if !errors.As(err, &held) || held.Claim.Key != key(i) || held.Claim.Holder != fmt.Sprintf("other-%d", i) || held.Claim.Fence != int64(i+1) {
				t.Errorf("acquire %s: %+v, %v; want held by other-%d at fence %d", key(i), c, err, i, i+1)
			}
		case err != nil || c.Key != key(i) || c.Holder != fmt.Sprintf("c-%d", i) || c.Fence != int64(i+1) || !c.Live:
			t.Errorf("acquire %s: %+v, %v; want c-%d's live claim at fence %d", key(i), c, err, i, i+1)
		default:
			acquired[i] = c
		}
	})
	gated(t, db, claims, n, func(i int) {
		err := claims.Release(ctx, db, key(i), fmt.Sprintf("c-%d", i), int64(i+1))
		if i%3 == 0 {
			if !errors.Is(err, racefree.ErrNotHeld) {
				t.Errorf("release %s by a loser: %v, want ErrNotHeld", key(i), err)
			}
		} else if err != nil {
			t.Errorf("release %s: %v", key(i), err)
		}
	})
	for i := range n {
		c, err := claims.Get(ctx, db, key(i))
		if err != nil || c.Fence != int64(i+1) || c.Live != (i%3 == 0) {
			t.Errorf("%s after the releases: %+v, %v; want fence %d, live %v", key(i), c, err, i+1, i%3 == 0)
		}
	}
}

// gated runs call(0) … call(n-1) at once in one batch (together) and
// waits for them.
func gated(t *testing.T, db *racefree.DB, claims *claim.Store, n int, call func(i int)) {
	t.Helper()
	calls := make([]func(), n)
	for i := range calls {
		calls[i] = func() { call(i) }
	}
	before := db.CombineStats()
	together(t, db, claims, calls...)()
	// The gate's two batches of one (its acquire, then its wait) and one
	// batch of the n calls.
	if s := db.CombineStats(); s.Batches != before.Batches+3 || s.Ops != before.Ops+2+int64(n) {
		t.Fatalf("combiner %+v after %+v: want the gate's two batches of one and one of %d", s, before, n)
	}
}

// together starts calls at once so that they share one batch of db's
// combiner (Config.CombineBatches 1): a batch held in flight behind a row
// lock on a key of its own keeps them queued until all are, then the lock
// goes and the next batch takes them all. It returns once the gate's batch
// is done; wait waits for the calls.
func together(t *testing.T, db *racefree.DB, claims *claim.Store, calls ...func()) (wait func()) {
	t.Helper()
	ctx := context.Background()
	gate, err := claims.Acquire(ctx, db, "gate", "g", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := claims.Renew(ctx, tx, "gate", "g", gate.Fence, time.Minute); err != nil { // locks the gate's row
		t.Fatal(err)
	}
	var pid int
	if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var gateErr error
	go func() {
		defer close(done)
		_, gateErr = claims.Acquire(ctx, db, "gate", "g", time.Minute)
	}()
	if !testdb.BlockedBy(t, db, pid, done) {
		t.Fatalf("the gate's batch did not wait for the lock: %v", gateErr)
	}
	var wg sync.WaitGroup
	for _, call := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call()
		}()
	}
	testdb.WaitCombiner(t, db, fmt.Sprintf("%d calls queued", len(calls)), func(s racefree.CombineStats) bool { return s.Queued >= len(calls) })
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	<-done
	if gateErr != nil {
		t.Fatal(gateErr)
	}
	return wg.Wait
}
