package claim_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestReapKeepsAClaimReacquiredInAnOpenTransaction is the reaper race of
// READ COMMITTED: a long-lapsed key re-acquired inside a caller's open
// transaction must survive a reap that runs meanwhile, and the reaper must
// not wait for that transaction (it skips the locked row).
func TestReapKeepsAClaimReacquiredInAnOpenTransaction(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		old, err := b.claims.Acquire(ctx, b.db, "k", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(3 * time.Hour)
		tx, err := b.db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		live, err := b.claims.Acquire(ctx, tx, "k", "b", time.Hour)
		if err != nil || live.Fence != old.Fence+1 {
			t.Fatalf("re-acquire in tx: %+v, %v; want fence %d", live, err, old.Fence+1)
		}
		done := make(chan struct{})
		var reaped int64
		var reapErr error
		go func() {
			defer close(done)
			reaped, reapErr = b.claims.Reap(ctx, time.Hour, 10)
		}()
		if b.db.Engine() == racefree.Postgres {
			pid := testdb.BackendPID(t, tx)
			if testdb.BlockedBy(t, b.db, pid, done) {
				t.Error("the reaper waited for the caller's transaction instead of skipping its row")
			}
		}
		// On SQLite the caller's transaction holds the write lock: the
		// reaper runs after the commit, and must find the claim live.
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		<-done
		if reapErr != nil || reaped != 0 {
			t.Fatalf("reap: %d, %v; want 0 (the claim is live)", reaped, reapErr)
		}
		r, err := b.claims.Renew(ctx, b.db, "k", "b", live.Fence, time.Hour)
		if err != nil || r.Fence != live.Fence {
			t.Fatalf("renew after the reap: %+v, %v; want the live claim kept", r, err)
		}
		b.clock.Advance(2 * time.Hour)
		c, err := b.claims.Acquire(ctx, b.db, "k", "c", time.Hour)
		if err != nil || c.Fence != live.Fence+1 {
			t.Fatalf("next tenure: %+v, %v; want fence %d", c, err, live.Fence+1)
		}
	})
}

// TestFencesNeverGoBackwardsAfterAReap: a reaped key, and any new key of
// the namespace, starts above every fence reaped there; other namespaces
// are untouched.
func TestFencesNeverGoBackwardsAfterAReap(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		var last *claim.Claim
		for i := range 3 { // fences 1, 2, 3
			c, err := b.claims.Acquire(ctx, b.db, "k", fmt.Sprintf("h%d", i), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.claims.Release(ctx, b.db, "k", c.Holder, c.Fence); err != nil {
				t.Fatal(err)
			}
			last = c
		}
		if n, err := b.claims.Reap(ctx, 0, 0); err != nil || n != 1 {
			t.Fatalf("reap: %d, %v; want 1", n, err)
		}
		if _, err := b.claims.Get(ctx, b.db, "k"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("get after reap: %v, want ErrNotFound", err)
		}
		// The holder that outlived its row is refused, never succeeds.
		if _, err := b.claims.Renew(ctx, b.db, "k", last.Holder, last.Fence, time.Minute); !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("renew of a reaped claim: %v, want ErrNotHeld", err)
		}
		c, err := b.claims.Acquire(ctx, b.db, "k", "next", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := c.Fence, last.Fence+1; got != want {
			t.Fatalf("fence after reap = %d, want %d", got, want)
		}
		fresh, err := b.claims.Acquire(ctx, b.db, "never-claimed", "x", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := fresh.Fence, last.Fence+1; got != want {
			t.Fatalf("first fence of a new key after a reap = %d, want %d (one above the floor)", got, want)
		}
		other, err := claim.NewNamespace(b.db, "other").Acquire(ctx, b.db, "k", "x", time.Minute)
		if err != nil || other.Fence != 1 {
			t.Fatalf("other namespace: %+v, %v; want fence 1", other, err)
		}
		// A second reap of lower fences never lowers the floor.
		b.clock.Advance(time.Hour)
		if _, err := b.claims.Reap(ctx, 0, 1); err != nil {
			t.Fatal(err)
		}
		again, err := b.claims.Acquire(ctx, b.db, "k", "later", time.Minute)
		if err != nil || again.Fence <= c.Fence {
			t.Fatalf("after a second reap: %+v, %v; want fence above %d", again, err, c.Fence)
		}
	})
}

// TestFencesOfSuccessiveHoldersIncreaseWhileAReaperLoops runs holders that
// acquire and release one key on the engine's own clock while a reaper
// deletes every released claim: each holder, while it holds the key, must
// see a fence above every fence seen before. On PostgreSQL each of 8
// holders wins 12 tenures, 30 with RACEFREE_LONG=1.
func TestFencesOfSuccessiveHoldersIncreaseWhileAReaperLoops(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		claims := claim.New(db)
		workers, tenures := 8, testdb.Scale(12, 30)
		if db.Engine() == racefree.SQLite {
			workers, tenures = 4, 10 // one writer at a time: fewer, slower rounds
		}
		var (
			mu     sync.Mutex
			last   int64
			seen   []int64
			wg     sync.WaitGroup
			reaped int64
			// released is closed at each release and replaced.
			released = make(chan struct{})
			// reapedOnce is closed once the reaper has deleted a claim.
			// Each holder waits for it after its first tenure: once all
			// have waited, the key stays released until the reaper takes
			// it, so the test races the reaper on every run instead of
			// on the runs where the timing happens to leave it a gap.
			reapedOnce = make(chan struct{})
			closeOnce  sync.Once
		)
		stop := make(chan struct{})
		reaperDone := make(chan struct{})
		go func() {
			defer close(reaperDone)
			for {
				select {
				case <-stop:
					return
				default:
				}
				n, err := claims.Reap(ctx, 0, 1)
				if err != nil {
					t.Errorf("reap: %v", err)
					return
				}
				mu.Lock()
				reaped += n
				mu.Unlock()
				if n > 0 {
					closeOnce.Do(func() { close(reapedOnce) })
				}
			}
		}()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				holder := fmt.Sprintf("w%d", w)
				deadline := time.Now().Add(2 * time.Minute)
				for won := 0; won < tenures; {
					if time.Now().After(deadline) {
						t.Errorf("holder %s won %d of %d tenures in 2 minutes", holder, won, tenures)
						return
					}
					mu.Lock()
					next := released
					mu.Unlock()
					c, err := claims.Acquire(ctx, db, "k", holder, time.Minute)
					if errors.Is(err, racefree.ErrRetryable) {
						continue // SQLite's write lock was busy for too long: a transient error, retried
					}
					if errors.Is(err, racefree.ErrHeld) {
						// Wait for the holder's release instead of
						// spinning on the write lock it needs; retry
						// anyway after a while, so a bug that keeps the
						// key held fails the test instead of hanging it.
						select {
						case <-next:
						case <-time.After(200 * time.Millisecond):
						}
						continue
					}
					if err != nil {
						t.Errorf("acquire: %v", err)
						return
					}
					won++
					mu.Lock()
					if c.Fence <= last {
						t.Errorf("holder %s got fence %d after fence %d was issued", holder, c.Fence, last)
					}
					last = c.Fence
					seen = append(seen, c.Fence)
					mu.Unlock()
					err = claims.Release(ctx, db, "k", holder, c.Fence)
					for errors.Is(err, racefree.ErrRetryable) {
						err = claims.Release(ctx, db, "k", holder, c.Fence)
					}
					mu.Lock()
					close(released)
					released = make(chan struct{})
					mu.Unlock()
					if err != nil {
						t.Errorf("release: %v", err)
						return
					}
					if won == 1 {
						select {
						case <-reapedOnce:
						case <-time.After(time.Until(deadline)):
						}
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		<-reaperDone
		if got, want := len(seen), workers*tenures; got != want {
			t.Fatalf("%d tenures, want %d", got, want)
		}
		if reaped == 0 {
			t.Fatal("the reaper deleted nothing: the test did not race it")
		}
		t.Logf("%d tenures, %d reaped, last fence %d", len(seen), reaped, last)
	})
}

// TestClaimQueriesReadTheStatementClock: inside one transaction, once the
// database clock has passed a claim's expiry, the claim is lapsed for Get,
// Renew, Guard and Acquire. A query reading the transaction's start time
// (now() on PostgreSQL) would still see it live.
func TestClaimQueriesReadTheStatementClock(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		claims := claim.New(db)
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		a, err := claims.Acquire(ctx, tx, "k", "a", 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		clockNow := `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`
		if db.Engine() == racefree.SQLite {
			clockNow = `SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER)`
		}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var now int64
			if err := tx.QueryRowContext(ctx, clockNow).Scan(&now); err != nil {
				t.Fatal(err)
			}
			if now >= racefree.Millis(a.ExpiresAt) {
				break
			}
			<-tick.C
		}
		if c, err := claims.Get(ctx, tx, "k"); err != nil || c.Live {
			t.Fatalf("get after expiry: live=%v, %v; want lapsed", c != nil && c.Live, err)
		}
		if _, err := claims.Renew(ctx, tx, "k", "a", a.Fence, time.Minute); !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("renew after expiry: %v, want ErrNotHeld", err)
		}
		if err := claims.Guard(ctx, tx, "k", "a", a.Fence); !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("guard after expiry: %v, want ErrNotHeld", err)
		}
		c, err := claims.Acquire(ctx, tx, "k", "b", time.Minute)
		if err != nil || c.Fence != a.Fence+1 {
			t.Fatalf("acquire after expiry: %+v, %v; want b to win with fence %d", c, err, a.Fence+1)
		}
	})
}

// TestAFenceAheadIsNotStale: a fence that was never issued is ErrNotHeld,
// never ErrStaleFence, and says so; a fence below 1 is bad input.
func TestAFenceAheadIsNotStale(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		a, err := b.claims.Acquire(ctx, b.db, "k", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ahead := a.Fence + 8
		check := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, racefree.ErrNotHeld) || errors.Is(err, racefree.ErrStaleFence) {
				t.Errorf("%s with fence %d ahead of %d: %v; want ErrNotHeld, not stale", op, ahead, a.Fence, err)
			} else if want := "ahead"; !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say the fence is %s", op, err, want)
			}
		}
		_, err = b.claims.Renew(ctx, b.db, "k", "a", ahead, time.Minute)
		check("renew", err)
		check("release", b.claims.Release(ctx, b.db, "k", "a", ahead))
		check("guard", b.db.InTx(ctx, func(tx *sql.Tx) error { return b.claims.Guard(ctx, tx, "k", "a", ahead) }))

		for _, fence := range []int64{0, -1} {
			var ie *racefree.InputError
			if _, err := b.claims.Renew(ctx, b.db, "k", "a", fence, time.Minute); !errors.As(err, &ie) {
				t.Errorf("renew with fence %d: %v, want an InputError", fence, err)
			}
			if err := b.claims.Release(ctx, b.db, "k", "a", fence); !errors.As(err, &ie) {
				t.Errorf("release with fence %d: %v, want an InputError", fence, err)
			}
			if err := b.db.InTx(ctx, func(tx *sql.Tx) error { return b.claims.Guard(ctx, tx, "k", "a", fence) }); !errors.As(err, &ie) {
				t.Errorf("guard with fence %d: %v, want an InputError", fence, err)
			}
		}
		c, err := b.claims.Get(ctx, b.db, "k")
		if err != nil || !c.Live || c.Fence != a.Fence || !c.ExpiresAt.Equal(a.ExpiresAt) {
			t.Fatalf("after refused calls: %+v, %v; want the claim unchanged", c, err)
		}
	})
}

// TestAReapDuringAnAcquireDoesNotRepeatAFence is the race the second
// read of the floor closes, made deterministic: an acquire whose
// statement began before a row of its key was inserted, released and
// reaped (all in one transaction it waits for) must still get a fence
// above the reaped one, on the pool (on PostgreSQL both statements in one
// round trip, raise_new), in a batch of the combiner (on PostgreSQL
// raise_new_many after acquire_many) and in the caller's transaction
// (raise_to_floor).
func TestAReapDuringAnAcquireDoesNotRepeatAFence(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		clock := racefree.NewManualClock(t0)
		b := bundle{db: testdb.Open(t, d, &racefree.Config{Clock: clock}), clock: clock}
		b.claims = claim.New(b.db)
		combining := testdb.Open(t, d, &racefree.Config{Clock: clock, Combine: racefree.CombineOn, CombineBatches: 1})
		// The tenant's first call on a DB registers it, alone.
		if _, err := claim.New(combining).Acquire(context.Background(), combining, "warm", "w", time.Second); err != nil {
			t.Fatal(err)
		}
		for _, where := range []string{"pool", "combined", "tx"} {
			t.Run(where, func(t *testing.T) {
				ctx := context.Background()
				key := "k-" + where
				tx, err := b.db.SQL().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				first, err := b.claims.Acquire(ctx, tx, key, "t", time.Second)
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan struct{})
				var second *claim.Claim
				var acquireErr error
				var wait func() // a batch of two, over arrays on PostgreSQL
				if where == "combined" && b.db.Engine() == racefree.Postgres {
					c := claim.New(combining)
					wait = together(t, combining, c, func() {
						second, acquireErr = c.Acquire(ctx, combining, key, "a", time.Second)
					}, func() {
						if _, err := c.Acquire(ctx, combining, key+"-other", "a", time.Second); err != nil {
							t.Errorf("the other acquire of the batch: %v", err)
						}
					})
				}
				go func() {
					defer close(done)
					switch {
					case wait != nil:
						wait()
						return
					case where == "pool":
						second, acquireErr = b.claims.Acquire(ctx, b.db, key, "a", time.Second)
						return
					case where == "combined":
						second, acquireErr = claim.New(combining).Acquire(ctx, combining, key, "a", time.Second)
						return
					}
					acquireErr = b.db.InTx(ctx, func(tx *sql.Tx) error {
						var err error
						second, err = b.claims.Acquire(ctx, tx, key, "a", time.Second)
						return err
					})
				}()
				if b.db.Engine() == racefree.Postgres {
					pid := testdb.BackendPID(t, tx)
					if !testdb.BlockedBy(t, b.db, pid, done) {
						t.Fatalf("the acquire did not wait for the open insert: %+v, %v", second, acquireErr)
					}
				}
				if err := b.claims.Release(ctx, tx, key, "t", first.Fence); err != nil {
					t.Fatal(err)
				}
				if keys, err := b.claims.ReapBatch(ctx, tx, 0, 10); err != nil || len(keys) != 1 {
					t.Fatalf("reap in tx: %v, %v; want [%s]", keys, err, key)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				<-done
				if acquireErr != nil {
					t.Fatal(acquireErr)
				}
				if second.Fence <= first.Fence {
					t.Fatalf("fence %d after the reaped fence %d: a fence went backwards or repeated", second.Fence, first.Fence)
				}
				if c, err := b.claims.Get(ctx, b.db, key); err != nil || c.Fence != second.Fence {
					t.Fatalf("the stored claim %+v, %v; want the fence Acquire returned, %d", c, err, second.Fence)
				}
			})
		}
	})
}
