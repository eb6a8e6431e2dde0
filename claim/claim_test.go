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
	"github.com/racefree/racefree/tenant"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type bundle struct {
	db     *racefree.DB
	clock  *racefree.ManualClock
	claims *claim.Store
}

// each runs body on both engines with a manual clock at t0.
func each(t *testing.T, body func(t *testing.T, b bundle)) {
	t.Helper()
	eachWith(t, racefree.CombineDefault, body)
}

// eachWith is each with the combiner's policy set: CombineOff for a test
// of a call alone on the pool.
func eachWith(t *testing.T, combine racefree.CombinePolicy, body func(t *testing.T, b bundle)) {
	t.Helper()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock, Combine: combine}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		body(t, bundle{db: db, clock: clock, claims: claim.New(db)})
	})
}

// race has n holders acquire key at once and returns the winners' claims
// and the number of losers.
func race(t *testing.T, b bundle, key string, n int, ttl time.Duration, round int) (won []*claim.Claim, lost int) {
	t.Helper()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := b.claims.Acquire(context.Background(), b.db, key, fmt.Sprintf("r%d-w%d", round, i), ttl)
			mu.Lock()
			defer mu.Unlock()
			var held *claim.HeldError
			switch {
			case err == nil:
				won = append(won, c)
			case errors.As(err, &held) && errors.Is(err, racefree.ErrHeld):
				lost++
			default:
				t.Errorf("acquire: %v", err)
			}
		}()
	}
	wg.Wait()
	return won, lost
}

func TestExactlyOneWinnerPerTTL(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		const n = 64
		ttl := 30 * time.Second
		won, lost := race(t, b, "job-1", n, ttl, 1)
		if len(won) != 1 || lost != n-1 {
			t.Fatalf("round 1: %d winners, %d losers; want 1, %d", len(won), lost, n-1)
		}
		if got, want := won[0].Fence, int64(1); got != want {
			t.Fatalf("fence = %d, want %d", got, want)
		}
		if got, want := won[0].ExpiresAt, t0.Add(ttl); !got.Equal(want) {
			t.Fatalf("expires_at = %v, want %v", got, want)
		}

		b.clock.Advance(ttl) // exactly at expires_at: free
		won2, lost2 := race(t, b, "job-1", n, ttl, 2)
		if len(won2) != 1 || lost2 != n-1 {
			t.Fatalf("round 2: %d winners, %d losers; want 1, %d", len(won2), lost2, n-1)
		}
		if got, want := won2[0].Fence, int64(2); got != want {
			t.Fatalf("fence after expiry = %d, want %d", got, want)
		}
		c, err := b.claims.Get(context.Background(), b.db, "job-1")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := c.Count, int64(2*n); got != want {
			t.Fatalf("count = %d, want %d: every attempt counts", got, want)
		}
		if !c.FirstSeen.Equal(t0) || !c.LastSeen.Equal(t0.Add(ttl)) {
			t.Fatalf("first/last seen = %v/%v", c.FirstSeen, c.LastSeen)
		}

		// The holder of round 1 is stale now.
		stale := won[0]
		ctx := context.Background()
		if _, err := b.claims.Renew(ctx, b.db, "job-1", stale.Holder, stale.Fence, ttl); !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("stale renew: %v, want ErrStaleFence", err)
		}
		if err := b.claims.Release(ctx, b.db, "job-1", stale.Holder, stale.Fence); !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("stale release: %v, want ErrStaleFence", err)
		}
		err = b.db.InTx(ctx, func(tx *sql.Tx) error { return b.claims.Guard(ctx, tx, "job-1", stale.Holder, stale.Fence) })
		if !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("stale guard: %v, want ErrStaleFence", err)
		}
	})
}

func TestBoundaryIsTheExactMillisecond(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		a, err := b.claims.Acquire(ctx, b.db, "k", "a", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b.clock.Set(a.ExpiresAt.Add(-time.Millisecond))
		if _, err := b.claims.Acquire(ctx, b.db, "k", "b", time.Second); !errors.Is(err, racefree.ErrHeld) {
			t.Fatalf("1ms before expiry: %v, want ErrHeld", err)
		}
		if c, err := b.claims.Get(ctx, b.db, "k"); err != nil || !c.Live {
			t.Fatalf("1ms before expiry: live=%v, %v; want live", c != nil && c.Live, err)
		}
		b.clock.Set(a.ExpiresAt)
		if c, err := b.claims.Get(ctx, b.db, "k"); err != nil || c.Live {
			t.Fatalf("at expiry: live=%v, %v; want not live", c != nil && c.Live, err)
		}
		if _, err := b.claims.Renew(ctx, b.db, "k", "a", a.Fence, time.Second); !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("renew at expiry: %v, want ErrNotHeld", err)
		}
		c, err := b.claims.Acquire(ctx, b.db, "k", "b", time.Second)
		if err != nil || c.Fence != a.Fence+1 {
			t.Fatalf("at expiry: %+v, %v; want b to win with fence %d", c, err, a.Fence+1)
		}
	})
}

func TestRenewKeepsFenceAndExpiryIsPerHolder(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		a, err := b.claims.Acquire(ctx, b.db, "k", "a", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(9 * time.Second)
		r, err := b.claims.Renew(ctx, b.db, "k", "a", a.Fence, 10*time.Second)
		if err != nil || r.Fence != a.Fence || !r.ExpiresAt.Equal(t0.Add(19*time.Second)) {
			t.Fatalf("renew: %+v, %v", r, err)
		}
		// A short-TTL acquirer does not shorten a's claim.
		b.clock.Advance(5 * time.Second)
		if _, err := b.claims.Acquire(ctx, b.db, "k", "b", time.Millisecond); !errors.Is(err, racefree.ErrHeld) {
			t.Fatalf("b: %v, want ErrHeld", err)
		}
		// The holder re-acquiring its live claim gets it back, same fence.
		again, err := b.claims.Acquire(ctx, b.db, "k", "a", 10*time.Second)
		if err != nil || again.Fence != a.Fence {
			t.Fatalf("re-acquire by holder: %+v, %v; want fence %d", again, err, a.Fence)
		}
		// After a lapse, the same holder name starts a new tenure: the old
		// fence is stale even for it.
		b.clock.Set(again.ExpiresAt)
		next, err := b.claims.Acquire(ctx, b.db, "k", "a", 10*time.Second)
		if err != nil || next.Fence != a.Fence+1 {
			t.Fatalf("new tenure: %+v, %v; want fence %d", next, err, a.Fence+1)
		}
		if _, err := b.claims.Renew(ctx, b.db, "k", "a", a.Fence, time.Second); !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("renew with the old fence: %v, want ErrStaleFence", err)
		}
	})
}

func TestReleaseFreesTheKeyAndIsRetryable(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		a, err := b.claims.Acquire(ctx, b.db, "k", "a", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.claims.Release(ctx, b.db, "k", "b", a.Fence); !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("release by another: %v, want ErrNotHeld", err)
		}
		if err := b.claims.Release(ctx, b.db, "k", "a", a.Fence); err != nil {
			t.Fatal(err)
		}
		if err := b.claims.Release(ctx, b.db, "k", "a", a.Fence); err != nil {
			t.Fatalf("retried release: %v, want nil", err)
		}
		if _, err := b.claims.Renew(ctx, b.db, "k", "a", a.Fence, time.Hour); !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("renew after release: %v, want ErrNotHeld", err)
		}
		c, err := b.claims.Acquire(ctx, b.db, "k", "b", time.Hour)
		if err != nil || c.Fence != a.Fence+1 {
			t.Fatalf("acquire after release: %+v, %v", c, err)
		}
		if err := b.claims.Release(ctx, b.db, "nope", "a", 1); !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("release of no claim: %v, want ErrNotHeld", err)
		}
	})
}

func TestGuardMakesWritesExclusive(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		a, err := b.claims.Acquire(ctx, b.db, "k", "a", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := b.db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := b.claims.Guard(ctx, tx, "k", "a", a.Fence); err != nil {
			t.Fatalf("guard: %v", err)
		}
		// The claim lapses while tx is open; a takeover must wait for tx.
		b.clock.Advance(time.Second)
		done := make(chan struct{})
		var takeover error
		go func() {
			defer close(done)
			_, takeover = b.claims.Acquire(ctx, b.db, "k", "b", time.Second)
		}()
		if b.db.Engine() == racefree.Postgres {
			// Wait until the takeover waits on tx's lock (or fails the
			// test by completing first).
			pid := testdb.BackendPID(t, tx)
			if !testdb.BlockedBy(t, b.db, pid, done) {
				t.Fatalf("takeover completed while the guarded transaction was open: %v", takeover)
			}
		}
		// On SQLite tx holds the only write lock from BEGIN IMMEDIATE: the
		// takeover cannot run before the commit, whenever it starts.
		select {
		case <-done:
			t.Fatalf("takeover completed while the guarded transaction was open: %v", takeover)
		default:
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		<-done
		if takeover != nil {
			t.Fatal(takeover)
		}
		err = b.db.InTx(ctx, func(tx *sql.Tx) error { return b.claims.Guard(ctx, tx, "k", "a", a.Fence) })
		if !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("guard after takeover: %v, want ErrStaleFence", err)
		}
	})
}

func TestLegacyRowsAreClaimable(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		// A row written by code that predates the lease columns.
		if _, err := b.db.ExecContext(ctx, `INSERT INTO racefree_claims (tenant, ns, key, holder, count, first_seen, last_seen) VALUES ('default', '', 'old', 'legacy', 5, 1, 2)`); err != nil {
			t.Fatal(err)
		}
		c, err := b.claims.Acquire(ctx, b.db, "old", "new", time.Minute)
		if err != nil || c.Fence != 1 || c.Count != 6 || !c.FirstSeen.Equal(racefree.FromMillis(1)) {
			t.Fatalf("acquire of a legacy row: %+v, %v; want fence 1, count 6", c, err)
		}
	})
}

// TestRowsWithoutALeaseAreHeldByNobody puts a NULL on one side of every
// comparison of a nullable column: a row written before migration 002 has
// a NULL fence and expiry. Renew, Release and Guard (fence = $n) match it
// for no holder and no fence, a reap (expires_at <= cutoff) keeps it, and
// Acquire (expires_at IS NULL OR …) takes it with fence 1.
func TestRowsWithoutALeaseAreHeldByNobody(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		if _, err := b.db.ExecContext(ctx, `INSERT INTO racefree_claims (tenant, ns, key, holder, count, first_seen, last_seen) VALUES ('default', '', 'old', 'legacy', 5, 1, 2)`); err != nil {
			t.Fatal(err)
		}
		before, err := b.claims.Get(ctx, b.db, "old")
		if err != nil || before.Fence != 0 || before.Live || !before.ExpiresAt.IsZero() {
			t.Fatalf("get of a legacy row: %+v, %v; want fence 0, no expiry, not live", before, err)
		}
		if _, err := b.claims.Renew(ctx, b.db, "old", "legacy", 1, time.Minute); !errors.Is(err, racefree.ErrNotHeld) {
			t.Errorf("renew of a legacy row: %v, want ErrNotHeld", err)
		}
		if err := b.claims.Release(ctx, b.db, "old", "legacy", 1); !errors.Is(err, racefree.ErrNotHeld) {
			t.Errorf("release of a legacy row: %v, want ErrNotHeld", err)
		}
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error { return b.claims.Guard(ctx, tx, "old", "legacy", 1) }); !errors.Is(err, racefree.ErrNotHeld) {
			t.Errorf("guard of a legacy row: %v, want ErrNotHeld", err)
		}
		b.clock.Advance(24 * time.Hour)
		if n, err := b.claims.Reap(ctx, 0, 0); err != nil || n != 0 {
			t.Errorf("reap: %d, %v; want 0 (a NULL expiry never lapsed)", n, err)
		}
		after, err := b.claims.Get(ctx, b.db, "old")
		if err != nil || *after != *before {
			t.Fatalf("after refused calls and a reap: %+v, %v; want %+v", after, err, before)
		}
		c, err := b.claims.Acquire(ctx, b.db, "old", "new", time.Minute)
		if err != nil || c.Fence != 1 || c.Count != 6 {
			t.Fatalf("acquire of a legacy row: %+v, %v; want fence 1, count 6", c, err)
		}
	})
}

// TestEveryCallNeedsTheTenantsMigration: before migration 011 every call is
// ErrSchemaOutdated and writes nothing; at 011 the same Store works for the
// default tenant and sees the rows written before; another tenant needs
// 012.
func TestEveryCallNeedsTheTenantsMigration(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		clock := racefree.NewManualClock(t0)
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated, Clock: clock})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion-1); err != nil {
			t.Fatal(err)
		}
		// A claim of the previous release that lapsed long ago, and a floor.
		if _, err := db.ExecContext(ctx, `INSERT INTO racefree_claims (ns, key, holder, fence, claimed_at, expires_at, count, first_seen, last_seen) VALUES ('', 'k', 'a', 1, 1, 2, 1, 1, 1)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO racefree_claim_floors (ns, floor) VALUES ('', 1)`); err != nil {
			t.Fatal(err)
		}
		before := dump(t, db)
		claims := claim.New(db)
		outdated := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, racefree.ErrSchemaOutdated) {
				t.Errorf("%s at schema %d: %v, want ErrSchemaOutdated", op, tenant.TenantsVersion-1, err)
			}
		}
		_, err := claims.Acquire(ctx, db, "new", "a", time.Minute)
		outdated("acquire of a new key", err)
		_, err = claims.Acquire(ctx, db, "k", "b", time.Minute)
		outdated("acquire", err)
		_, err = claims.Renew(ctx, db, "k", "a", 1, time.Minute)
		outdated("renew", err)
		outdated("release", claims.Release(ctx, db, "k", "a", 1))
		outdated("guard", db.InTx(ctx, func(tx *sql.Tx) error { return claims.Guard(ctx, tx, "k", "a", 1) }))
		_, err = claims.Get(ctx, db, "k")
		outdated("get", err)
		n, err := claims.Reap(ctx, 0, 0)
		outdated("reap", err)
		if n != 0 {
			t.Errorf("reap at schema %d deleted %d claims", tenant.TenantsVersion-1, n)
		}
		outdated("reap batch", db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := claims.ReapBatch(ctx, tx, 0, 10)
			return err
		}))
		if after := dump(t, db); after != before {
			t.Fatalf("calls at schema %d wrote:\n%s\nwant:\n%s", tenant.TenantsVersion-1, after, before)
		}

		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		c, err := claims.Get(ctx, db, "k")
		if err != nil || c.Holder != "a" || c.Fence != 1 {
			t.Fatalf("get at schema %d: %+v, %v; want the previous release's claim", tenant.TenantsVersion, c, err)
		}
		if c, err = claims.Acquire(ctx, db, "k", "b", time.Minute); err != nil || c.Fence != 2 {
			t.Fatalf("acquire at schema %d: %+v, %v; want fence 2", tenant.TenantsVersion, c, err)
		}
		if err := claims.Release(ctx, db, "k", "b", 2); err != nil {
			t.Fatal(err)
		}
		if n, err := claims.Reap(ctx, 0, 0); err != nil || n != 1 {
			t.Fatalf("reap at schema %d: %d, %v; want 1", tenant.TenantsVersion, n, err)
		}
		if c, err = claims.Acquire(ctx, db, "fresh", "b", time.Minute); err != nil || c.Fence != 3 {
			t.Fatalf("acquire of a new key after the reap: %+v, %v; want fence 3", c, err)
		}
		acme, err := tenant.With(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := claims.Acquire(acme, db, "k", "a", time.Minute); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("another tenant at schema %d: %v, want ErrSchemaOutdated", tenant.TenantsVersion, err)
		}
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		if c, err = claims.Acquire(acme, db, "k", "a", time.Minute); err != nil || c.Fence != 1 {
			t.Fatalf("another tenant at the current schema: %+v, %v; want fence 1", c, err)
		}
	})
}

// dump returns every claim and floor of every tenant, read as the owner.
func dump(t *testing.T, db *racefree.DB) string {
	t.Helper()
	var out strings.Builder
	for _, q := range []string{
		`SELECT ns || '/' || key || '/' || holder || '/' || COALESCE(fence, 0) || '/' || COALESCE(expires_at, 0) || '/' || count FROM racefree_claims ORDER BY 1`,
		`SELECT ns || '/' || floor FROM racefree_claim_floors ORDER BY 1`,
	} {
		for _, s := range testdb.Strings(t, db, q) {
			out.WriteString(s + "\n")
		}
	}
	return out.String()
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		long := string(make([]byte, 257))
		for _, tc := range []struct {
			key, holder string
			ttl         time.Duration
		}{
			{"", "h", time.Second}, {long, "h", time.Second}, {"\xff", "h", time.Second},
			{"k", "", time.Second}, {"k", long[:129], time.Second},
			{"k\x00", "h", time.Second}, {"k", "h\x00", time.Second},
			{"k", "h", 0}, {"k", "h", -time.Second}, {"k", "h", 31 * 24 * time.Hour},
		} {
			_, err := b.claims.Acquire(ctx, b.db, tc.key, tc.holder, tc.ttl)
			var ie *racefree.InputError
			if !errors.As(err, &ie) || !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Acquire(%q, %q, %v): %v, want an InputError", tc.key, tc.holder, tc.ttl, err)
			}
		}
		var n int
		if err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_claims`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d rows, %v; want none", n, err)
		}
	})
}

func TestNamespacesAreApart(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		other := claim.NewNamespace(b.db, "other")
		if _, err := b.claims.Acquire(ctx, b.db, "k", "a", time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Acquire(ctx, b.db, "k", "b", time.Minute); err != nil {
			t.Fatalf("same key, other namespace: %v", err)
		}
	})
}

func TestAcquireRollsBackWithTheCallersTransaction(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		boom := errors.New("caller failed")
		// On SQLite an Acquire outside the caller's transaction waits for
		// the write lock that transaction holds: end it within seconds,
		// not after every busy timeout of every retry.
		bounded, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := b.claims.Acquire(bounded, tx, "k", "a", time.Minute); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if _, err := b.claims.Get(ctx, b.db, "k"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("after rollback: %v, want ErrNotFound", err)
		}
	})
}

func TestReapDeletesOnlyLongLapsedClaims(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		for i := range 5 {
			if _, err := b.claims.Acquire(ctx, b.db, fmt.Sprintf("k%d", i), "a", time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		other := claim.NewNamespace(b.db, "other")
		if _, err := other.Acquire(ctx, b.db, "k0", "a", time.Minute); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Minute + time.Hour - time.Millisecond)
		if n, err := b.claims.Reap(ctx, time.Hour, 2); err != nil || n != 0 {
			t.Fatalf("within the grace period: reaped %d, %v", n, err)
		}
		b.clock.Advance(time.Millisecond)
		if n, err := b.claims.Reap(ctx, time.Hour, 2); err != nil || n != 5 {
			t.Fatalf("after the grace period: reaped %d, %v; want 5", n, err)
		}
		if _, err := other.Get(ctx, b.db, "k0"); err != nil {
			t.Fatalf("another namespace was reaped: %v", err)
		}
	})
}

func TestReleaseOfALapsedTenureSucceeds(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		a, err := b.claims.Acquire(ctx, b.db, "k", "a", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(2 * time.Second)
		if err := b.claims.Release(ctx, b.db, "k", "a", a.Fence); err != nil {
			t.Fatalf("release of a lapsed tenure nobody took over: %v, want nil", err)
		}
		c, err := b.claims.Get(ctx, b.db, "k")
		if err != nil || !c.ExpiresAt.Equal(a.ExpiresAt) {
			t.Fatalf("after releasing a lapsed tenure: %+v, %v; want the expiry unchanged", c, err)
		}
		n, err := b.claims.Acquire(ctx, b.db, "k", "b", time.Second)
		if err != nil || n.Fence != a.Fence+1 {
			t.Fatalf("next tenure: %+v, %v; want fence %d", n, err, a.Fence+1)
		}
	})
}
