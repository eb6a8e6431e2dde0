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
// on distinct keys, some held by others, as one statement (racefree.Config.Combine:
// on PostgreSQL over arrays, on SQLite over a JSON array, the batch being
// at least the engine's ManyFrom), then a batch of renewals, some of
// tenures that are not the caller's, then a batch of releases, some not
// the caller's. Every key has a fence of its own, so a caller handed
// another's row would see a wrong key, holder or fence: each caller gets
// its own outcome, as alone, and every call of each batch ran through its
// Many form.
func TestABatchOfAcquiresGivesEachCallerItsOwnRow(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1}, func(t *testing.T, db *racefree.DB) {
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
			c, err := claims.Renew(ctx, db, key(i), fmt.Sprintf("c-%d", i), int64(i+1), 2*time.Minute)
			if i%3 == 0 {
				if !errors.Is(err, racefree.ErrNotHeld) {
					t.Errorf("renew %s by a loser: %+v, %v, want ErrNotHeld", key(i), c, err)
				}
				return
			}
			if acquired[i] == nil {
				return // the acquire failed, and said so
			}
			if err != nil || c.Key != key(i) || c.Holder != fmt.Sprintf("c-%d", i) || c.Fence != int64(i+1) || !c.Live ||
				!c.ExpiresAt.After(acquired[i].ExpiresAt) || c.ClaimedAt != acquired[i].ClaimedAt {
				t.Errorf("renew %s: %+v, %v; want c-%d's claim at fence %d, claimed at %v, expiring after %v",
					key(i), c, err, i, i+1, acquired[i].ClaimedAt, acquired[i].ExpiresAt)
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
	})
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
	// batch of the n calls, all through their Many forms.
	if s := db.CombineStats(); s.Batches != before.Batches+3 || s.Ops != before.Ops+2+int64(n) || s.Many != before.Many+int64(n) {
		t.Fatalf("combiner %+v after %+v: want the gate's two batches of one and one of %d, by Many forms", s, before, n)
	}
}

// together starts calls at once so that they share one batch of db's
// combiner (Config.CombineBatches 1): a batch held in flight behind a row
// lock on a key of its own (on SQLite, the write lock) keeps them queued
// until all are, then the lock goes and the next batch takes them all. It
// returns once the gate's batch is done; wait waits for the calls.
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
	if db.Engine() == racefree.Postgres {
		pid = testdb.BackendPID(t, tx)
	}
	done := make(chan struct{})
	var gateErr error
	go func() {
		defer close(done)
		_, gateErr = claims.Acquire(ctx, db, "gate", "g", time.Minute)
	}()
	if db.Engine() == racefree.Postgres && !testdb.BlockedBy(t, db, pid, done) {
		t.Fatalf("the gate's batch did not wait for the lock: %v", gateErr)
	}
	// On SQLite the gate's batch, in flight, waits for the write lock tx
	// holds until tx ends.
	testdb.WaitCombiner(t, db, "the gate's batch", func(s racefree.CombineStats) bool { return s.Running == 1 })
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

// TestEdgesABatchDecidesEachKeyAsAlone sends batches (racefree.Config.Combine,
// as many calls as make each kind run through its Many form on either
// engine) of acquires, then renewals, then releases, whose keys each try
// an edge, on a clock moved by hand: a key with no row after a reap
// starts above the namespace's floor, a lapsed or released key starts the
// next tenure at its fence plus one, the live holder re-acquiring keeps
// its fence and claim time and gets the new expiry, another's live claim
// is lost; a renewal of a lapsed claim, of a stale or never-issued fence,
// or of another's claim fails; a release of a stale fence or of another's
// claim fails, and one of a tenure that lapsed untaken succeeds. Each
// caller gets the outcome it would get alone.
func TestEdgesABatchDecidesEachKeyAsAlone(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1, Clock: clock}, func(t *testing.T, db *racefree.DB) {
		claims := claim.New(db)
		ctx := context.Background()
		must := func(c *claim.Claim, err error) *claim.Claim {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		// The namespace's floor: five tenures of r, reaped.
		for range 5 {
			c := must(claims.Acquire(ctx, db, "r", "old", time.Minute))
			if err := claims.Release(ctx, db, "r", "old", c.Fence); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Second)
		if n, err := claims.Reap(ctx, 0, 0); err != nil || n != 1 {
			t.Fatalf("reap: %d, %v; want r reaped", n, err)
		}
		const floor = 5
		// L: lapsed; R: released; H: another's, live; M: the caller's own, live.
		for _, k := range []string{"L0", "L1"} {
			must(claims.Acquire(ctx, db, k, "old", time.Millisecond))
		}
		r := must(claims.Acquire(ctx, db, "R0", "old", time.Minute))
		if err := claims.Release(ctx, db, "R0", "old", r.Fence); err != nil {
			t.Fatal(err)
		}
		must(claims.Acquire(ctx, db, "H0", "other", time.Hour))
		mine := map[string]*claim.Claim{}
		for _, k := range []string{"M0", "M1"} {
			mine[k] = must(claims.Acquire(ctx, db, k, "c-"+k, time.Minute))
		}
		clock.Advance(time.Second) // L0 and L1 lapse

		// N: no row; S: no row, a short tenure.
		keys := []string{"N0", "N1", "L0", "L1", "R0", "H0", "M0", "M1", "S0", "S1"}
		ttl := func(k string) time.Duration {
			if k[0] == 'S' {
				return time.Millisecond
			}
			return time.Minute
		}
		now := clock.Now()
		gated(t, db, claims, len(keys), func(i int) {
			k := keys[i]
			c, err := claims.Acquire(ctx, db, k, "c-"+k, ttl(k))
			var held *claim.HeldError
			wantFence := map[byte]int64{'N': floor + 1, 'S': floor + 1, 'L': floor + 2, 'R': floor + 2, 'M': floor + 1}[k[0]]
			switch {
			case k[0] == 'H':
				if !errors.As(err, &held) || held.Claim.Key != k || held.Claim.Holder != "other" || held.Claim.Fence != floor+1 {
					t.Errorf("acquire %s: %+v, %v; want held by other at fence %d", k, c, err, floor+1)
				}
			case err != nil || c.Key != k || c.Holder != "c-"+k || c.Fence != wantFence || !c.ExpiresAt.Equal(now.Add(ttl(k))):
				t.Errorf("acquire %s: %+v, %v; want c-%s's claim at fence %d until %v", k, c, err, k, wantFence, now.Add(ttl(k)))
			case k[0] == 'M' && !c.ClaimedAt.Equal(mine[k].ClaimedAt):
				t.Errorf("acquire %s by its live holder: claimed at %v, want %v (the same tenure)", k, c.ClaimedAt, mine[k].ClaimedAt)
			case k[0] != 'M' && !c.ClaimedAt.Equal(now):
				t.Errorf("acquire %s: claimed at %v, want %v (a new tenure)", k, c.ClaimedAt, now)
			}
		})

		clock.Advance(time.Second) // S0 and S1 lapse
		now = clock.Now()
		type call struct {
			fence int64
			want  error // nil, ErrStaleFence or ErrNotHeld
		}
		renewals := map[string]call{
			"N0": {floor + 1, nil}, "N1": {floor, racefree.ErrStaleFence},
			"L0": {floor + 2, nil}, "L1": {floor + 1, racefree.ErrStaleFence},
			"R0": {floor + 3, racefree.ErrNotHeld}, // never issued
			"H0": {floor + 1, racefree.ErrNotHeld}, // another's
			"M0": {floor + 1, nil}, "M1": {floor + 1, nil},
			"S0": {floor + 1, racefree.ErrNotHeld}, "S1": {floor + 1, racefree.ErrNotHeld}, // lapsed
		}
		gated(t, db, claims, len(keys), func(i int) {
			k := keys[i]
			w := renewals[k]
			c, err := claims.Renew(ctx, db, k, "c-"+k, w.fence, 2*time.Minute)
			switch {
			case w.want != nil:
				if !errors.Is(err, w.want) {
					t.Errorf("renew %s at fence %d: %+v, %v; want %v", k, w.fence, c, err, w.want)
				}
			case err != nil || c.Key != k || c.Fence != w.fence || !c.ExpiresAt.Equal(now.Add(2*time.Minute)) || !c.Live:
				t.Errorf("renew %s: %+v, %v; want fence %d, live until %v", k, c, err, w.fence, now.Add(2*time.Minute))
			}
		})
		releases := map[string]call{
			"N0": {floor + 1, nil}, "N1": {floor + 1, nil},
			"L0": {floor + 1, racefree.ErrStaleFence}, "L1": {floor + 2, nil},
			"R0": {floor + 2, nil},
			"H0": {floor + 1, racefree.ErrNotHeld},
			"M0": {floor, racefree.ErrStaleFence}, "M1": {floor + 1, nil},
			"S0": {floor + 1, nil}, "S1": {floor + 1, nil}, // lapsed, never taken over
		}
		gated(t, db, claims, len(keys), func(i int) {
			k := keys[i]
			w := releases[k]
			if err := claims.Release(ctx, db, k, "c-"+k, w.fence); !errors.Is(err, w.want) || err != nil && w.want == nil {
				t.Errorf("release %s at fence %d: %v; want %v", k, w.fence, err, w.want)
			}
		})
		live := map[string]bool{"L0": true, "H0": true, "M0": true}
		for _, k := range keys {
			c, err := claims.Get(ctx, db, k)
			if err != nil || c.Live != live[k] {
				t.Errorf("%s after the releases: %+v, %v; want live %v", k, c, err, live[k])
			}
		}
	})
}
