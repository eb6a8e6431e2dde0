package claim_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

func with(t *testing.T, id string) context.Context {
	t.Helper()
	ctx, err := tenant.With(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

// TestTenantsAreIsolated: two tenants using the same namespace, keys and
// holder names hold independent claims with independent fences; no
// operation of one sees or changes the other's claims or floors, and a
// reap of one tenant's lapsed claims leaves the other's claims, lapsed or
// live, where they are.
func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	testdb.EachRole(t, t0, func(t *testing.T, db, _ *racefree.DB, clock *racefree.ManualClock) {
		acme, globex := with(t, "acme"), with(t, "globex")
		claims := claim.New(db)
		get := func(ctx context.Context, key string) claim.Claim {
			t.Helper()
			c, err := claims.Get(ctx, db, key)
			if err != nil {
				t.Fatalf("get %s of %s: %v", key, tenant.From(ctx), err)
			}
			return *c
		}
		// unchanged fails unless globex's claims are as they were.
		var keys = []string{"k", "old", "live"}
		snapshot := func() map[string]claim.Claim {
			m := map[string]claim.Claim{}
			for _, k := range keys {
				if c, err := claims.Get(globex, db, k); err == nil {
					m[k] = *c
				} else if !errors.Is(err, racefree.ErrNotFound) {
					t.Fatal(err)
				}
			}
			return m
		}
		unchanged := func(op string, before map[string]claim.Claim) {
			t.Helper()
			if after := snapshot(); !mapsEqual(after, before) {
				t.Errorf("acme's %s changed globex's claims:\n%+v\nwant\n%+v", op, after, before)
			}
		}

		// Same key, same holder name: both win a first tenure.
		for _, ctx := range []context.Context{acme, globex} {
			c, err := claims.Acquire(ctx, db, "k", "w", time.Minute)
			if err != nil || c.Fence != 1 || c.Count != 1 {
				t.Fatalf("%s acquires k: %+v, %v; want its own claim, fence 1, count 1", tenant.From(ctx), c, err)
			}
		}
		// Another holder of the same key in globex wins nothing of acme's.
		if _, err := claims.Acquire(globex, db, "k", "other", time.Minute); !errors.Is(err, racefree.ErrHeld) {
			t.Fatalf("globex's other holder: %v, want ErrHeld by globex's own w", err)
		}
		// "old": three tenures in acme (fence 3), one in globex (fence 1),
		// all released; "live": globex only, live.
		for i := range 3 {
			c, err := claims.Acquire(acme, db, "old", "w", time.Minute)
			if err != nil || c.Fence != int64(i+1) {
				t.Fatalf("acme old #%d: %+v, %v", i+1, c, err)
			}
			if err := claims.Release(acme, db, "old", "w", c.Fence); err != nil {
				t.Fatal(err)
			}
		}
		if c, err := claims.Acquire(globex, db, "old", "w", time.Minute); err != nil || c.Fence != 1 {
			t.Fatalf("globex old: %+v, %v; want fence 1", c, err)
		}
		if err := claims.Release(globex, db, "old", "w", 1); err != nil {
			t.Fatal(err)
		}
		if _, err := claims.Acquire(globex, db, "live", "g", time.Minute); err != nil {
			t.Fatal(err)
		}

		// Nothing of globex's is visible to acme.
		if _, err := claims.Get(acme, db, "live"); !errors.Is(err, racefree.ErrNotFound) {
			t.Errorf("acme reads globex's live: %v, want ErrNotFound", err)
		}
		if got := get(acme, "old"); got.Fence != 3 {
			t.Errorf("acme reads old at fence %d, want its own 3", got.Fence)
		}
		if got := get(globex, "old"); got.Fence != 1 {
			t.Errorf("globex reads old at fence %d, want its own 1", got.Fence)
		}

		// Every operation of acme leaves globex's claims as they were.
		before := snapshot()
		clock.Advance(10 * time.Second)
		if c, err := claims.Renew(acme, db, "k", "w", 1, time.Hour); err != nil || !c.ExpiresAt.Equal(clock.Now().Add(time.Hour)) {
			t.Fatalf("acme renews k: %+v, %v", c, err)
		}
		unchanged("renew", before)
		if err := db.InTx(acme, func(tx *sql.Tx) error { return claims.Guard(acme, tx, "k", "w", 1) }); err != nil {
			t.Fatalf("acme guards k: %v", err)
		}
		unchanged("guard", before)
		if _, err := claims.Acquire(acme, db, "k", "w", time.Hour); err != nil {
			t.Fatal(err)
		}
		unchanged("acquire", before)
		if err := claims.Release(acme, db, "k", "w", 1); err != nil {
			t.Fatal(err)
		}
		unchanged("release", before)
		if g := get(globex, "k"); !g.Live {
			t.Errorf("globex's k is not live after acme released its own: %+v", g)
		}
		// acme's calls on globex's live key find nothing to hold.
		if _, err := claims.Renew(acme, db, "live", "g", 1, time.Hour); !errors.Is(err, racefree.ErrNotHeld) {
			t.Errorf("acme renews globex's live: %v, want ErrNotHeld", err)
		}
		if err := claims.Release(acme, db, "live", "g", 1); !errors.Is(err, racefree.ErrNotHeld) {
			t.Errorf("acme releases globex's live: %v, want ErrNotHeld", err)
		}
		if err := db.InTx(acme, func(tx *sql.Tx) error { return claims.Guard(acme, tx, "live", "g", 1) }); !errors.Is(err, racefree.ErrNotHeld) {
			t.Errorf("acme guards globex's live: %v, want ErrNotHeld", err)
		}
		unchanged("calls on globex's key", before)

		// A reap of acme's lapsed claims (k and old) leaves globex's
		// claims, its lapsed old too, and its floor.
		var reaped []string
		err := tenant.InTx(context.Background(), db, "acme", func(ctx context.Context, tx *sql.Tx) error {
			var err error
			reaped, err = claims.ReapBatch(ctx, tx, 0, 10)
			return err
		})
		slices.Sort(reaped)
		if err != nil || !slices.Equal(reaped, []string{"k", "old"}) {
			t.Fatalf("acme's reap: %v, %v; want [k old]", reaped, err)
		}
		unchanged("reap", before)
		for _, k := range []string{"k", "old"} {
			if _, err := claims.Get(acme, db, k); !errors.Is(err, racefree.ErrNotFound) {
				t.Errorf("acme's reaped %s: %v, want ErrNotFound", k, err)
			}
		}
		// Floors are per tenant: acme's new keys start above its own
		// reaped fences, globex's at 1.
		if c, err := claims.Acquire(acme, db, "fresh", "w", time.Minute); err != nil || c.Fence != 4 {
			t.Errorf("acme's first fence after its reap: %+v, %v; want 4", c, err)
		}
		if c, err := claims.Acquire(globex, db, "fresh", "w", time.Minute); err != nil || c.Fence != 1 {
			t.Errorf("globex's first fence after acme's reap: %+v, %v; want 1", c, err)
		}

		// Reap visits every tenant: globex's lapsed old goes, its live
		// claims stay.
		if n, err := claims.Reap(context.Background(), 0, 0); err != nil || n != 1 {
			t.Fatalf("reap of every tenant: %d, %v; want 1 (globex's old)", n, err)
		}
		if _, err := claims.Get(globex, db, "old"); !errors.Is(err, racefree.ErrNotFound) {
			t.Errorf("globex's old after the reap: %v, want ErrNotFound", err)
		}
		for _, k := range []string{"k", "live", "fresh"} {
			if c := get(globex, k); !c.Live {
				t.Errorf("globex's %s after the reap: %+v, want live", k, c)
			}
		}
		if c, err := claims.Acquire(globex, db, "old", "w", time.Minute); err != nil || c.Fence != 2 {
			t.Errorf("globex's old after its reap: %+v, %v; want fence 2", c, err)
		}
	})
}

func mapsEqual(a, b map[string]claim.Claim) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// previous reads a statement of the previous release (testdata/previous).
func previous(t *testing.T, engine, name string) string {
	return testdb.Previous(t, "testdata", engine, name)
}

// TestPreviousReleaseRunsOnTheExpandedSchema is the rollout: at migration
// 011 the previous release's statements (testdata/previous, copied from
// the release before tenants) still acquire, renew, guard, release, read
// and reap, beside this release's, and this release sees their rows as
// the default tenant's, and theirs see its rows.
func TestPreviousReleaseRunsOnTheExpandedSchema(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		clock := racefree.NewManualClock(t0)
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated, Clock: clock})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		engine := db.Engine()
		q := func(name string) string { return previous(t, engine, name) }
		now := func() int64 { return racefree.Millis(clock.Now()) }
		type row struct {
			holder                string
			fence, expires, count int64
		}
		acquire := func(ns, key, holder string, ttl time.Duration) row {
			t.Helper()
			var (
				r                        row
				claimed, first, last, at int64
				inserted                 bool
			)
			err := db.QueryRowContext(ctx, q("acquire"), ns, key, holder, ttl.Milliseconds(), now()).
				Scan(&r.holder, &r.fence, &claimed, &r.expires, &r.count, &first, &last, &at, &inserted)
			if err != nil {
				t.Fatalf("previous acquire of %s/%s: %v", ns, key, err)
			}
			return r
		}
		exec := func(name string, args ...any) int64 {
			t.Helper()
			res, err := db.ExecContext(ctx, q(name), args...)
			if err != nil {
				t.Fatalf("previous %s: %v", name, err)
			}
			n, _ := res.RowsAffected()
			return n
		}

		// The previous release's claims: a winner, a loser, a renewal, a
		// guard, a release.
		if r := acquire("", "k", "old-a", time.Minute); r.holder != "old-a" || r.fence != 1 {
			t.Fatalf("previous acquire: %+v; want old-a at fence 1", r)
		}
		if r := acquire("", "k", "old-b", time.Minute); r.holder != "old-a" || r.count != 2 {
			t.Fatalf("previous acquire of a held key: %+v; want old-a's claim, count 2", r)
		}
		if n := exec("renew", "", "k", "old-a", 1, time.Hour.Milliseconds(), now()); n != 1 {
			t.Fatalf("previous renew: %d rows, want 1", n)
		}
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			var one int
			return tx.QueryRowContext(ctx, q("guard"), "", "k", "old-a", 1, now()).Scan(&one)
		})
		if err != nil {
			t.Fatalf("previous guard: %v", err)
		}
		if r := acquire("", "gone", "old-a", time.Minute); r.fence != 1 {
			t.Fatalf("previous acquire of gone: %+v", r)
		}
		if n := exec("release", "", "gone", "old-a", 1, now()); n != 1 {
			t.Fatalf("previous release: %d rows, want 1", n)
		}
		// The previous reaper, in namespace "": gone lapsed, k is live.
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			if engine == racefree.SQLite {
				if _, err := tx.ExecContext(ctx, q("reap_floor"), "", now(), 10); err != nil {
					return err
				}
			}
			rows, err := tx.QueryContext(ctx, q("reap"), "", now(), 10)
			if err != nil {
				return err
			}
			defer rows.Close()
			var keys []string
			for rows.Next() {
				var k string
				if err := rows.Scan(&k); err != nil {
					return err
				}
				keys = append(keys, k)
			}
			if !slices.Equal(keys, []string{"gone"}) {
				t.Errorf("previous reap deleted %v, want [gone]", keys)
			}
			return rows.Err()
		})
		if err != nil {
			t.Fatalf("previous reap: %v", err)
		}

		// This release sees them as the default tenant's.
		claims := claim.New(db)
		c, err := claims.Get(ctx, db, "k")
		if err != nil || c.Holder != "old-a" || c.Fence != 1 || c.Count != 2 || !c.Live || !c.ExpiresAt.Equal(clock.Now().Add(time.Hour)) {
			t.Fatalf("this release reads the previous release's claim: %+v, %v", c, err)
		}
		if _, err := claims.Acquire(ctx, db, "k", "new", time.Minute); !errors.Is(err, racefree.ErrHeld) {
			t.Fatalf("this release acquires a claim the previous release holds: %v, want ErrHeld", err)
		}
		if _, err := claims.Renew(ctx, db, "k", "old-a", 1, time.Hour); err != nil {
			t.Fatalf("this release renews the previous release's tenure: %v", err)
		}
		if c, err := claims.Acquire(ctx, db, "gone", "new", time.Minute); err != nil || c.Fence != 2 {
			t.Fatalf("a key the previous reaper deleted: %+v, %v; want fence 2, above the floor it raised", c, err)
		}
		// And the previous release sees this release's rows.
		if c, err := claims.Acquire(ctx, db, "n", "new", time.Minute); err != nil || c.Fence != 2 {
			t.Fatalf("this release acquires a new key: %+v, %v; want fence 2, above the floor", c, err)
		}
		if r := acquire("", "n", "old-b", time.Minute); r.holder != "new" || r.fence != 2 || r.count != 2 {
			t.Fatalf("the previous release acquires this release's claim: %+v; want new's, count 2", r)
		}
		var holder string
		var n [7]sql.NullInt64
		if err := db.QueryRowContext(ctx, q("get"), "", "n", now()).Scan(&holder, &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6]); err != nil || holder != "new" {
			t.Fatalf("previous get of this release's claim: %q, %v", holder, err)
		}
		if got := exec("release", "", "k", "old-a", 1, now()); got != 1 {
			t.Fatalf("previous release after this release's renewal: %d rows, want 1", got)
		}
		if c, err := claims.Acquire(ctx, db, "k", "new", time.Minute); err != nil || c.Fence != 2 {
			t.Fatalf("this release after the previous release released: %+v, %v; want fence 2", c, err)
		}
		tenants := testdb.Strings(t, db, `SELECT DISTINCT tenant FROM racefree_claims UNION SELECT DISTINCT tenant FROM racefree_claim_floors`)
		if !slices.Equal(tenants, []string{tenant.Default}) {
			t.Fatalf("tenants of the rows: %v, want [%s]", tenants, tenant.Default)
		}
	})
}

// TestPipelinedCallsLeaveNoTenantBehind: as the application role, on a
// pool of one connection, every call on the pool (each statement pipelined
// with its tenant) answers as it does in a transaction, refusals included,
// and the connection carries no tenant after any of them.
func TestPipelinedCallsLeaveNoTenantBehind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	clock := racefree.NewManualClock(t0)
	owner := testdb.Open(t, d, &racefree.Config{Clock: clock})
	db, err := dsn.Open(ctx, testdb.AppDSN(t, owner, d), &racefree.Config{Clock: clock, MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	claims := claim.New(db)
	acme := with(t, "acme")
	clean := func(op string) {
		t.Helper()
		var s sql.NullString
		if err := db.QueryRowContext(ctx, `SELECT current_setting('racefree.tenant_id', true)`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if s.String != "" {
			t.Fatalf("after %s the pooled connection carries tenant %q", op, s.String)
		}
	}
	a, err := claims.Acquire(acme, db, "k", "a", time.Second)
	if err != nil || a.Fence != 1 {
		t.Fatalf("acquire: %+v, %v", a, err)
	}
	clean("Acquire")
	if _, err := claims.Acquire(acme, db, "k", "b", time.Second); !errors.Is(err, racefree.ErrHeld) {
		t.Fatalf("a second holder: %v, want ErrHeld", err)
	}
	clean("a refused Acquire")
	if c, err := claims.Renew(acme, db, "k", "a", 1, time.Second); err != nil || c.Fence != 1 || !c.Live {
		t.Fatalf("renew: %+v, %v", c, err)
	}
	clean("Renew")
	clock.Advance(2 * time.Second)
	if c, err := claims.Renew(acme, db, "k", "a", 1, time.Second); !errors.Is(err, racefree.ErrNotHeld) {
		t.Fatalf("renew of a lapsed claim: %+v, %v; want ErrNotHeld", c, err)
	}
	clean("a refused Renew")
	b, err := claims.Acquire(acme, db, "k", "b", time.Second)
	if err != nil || b.Fence != 2 {
		t.Fatalf("takeover: %+v, %v", b, err)
	}
	if err := claims.Release(acme, db, "k", "a", 1); !errors.Is(err, racefree.ErrStaleFence) {
		t.Fatalf("release by the stale holder: %v, want ErrStaleFence", err)
	}
	clean("a refused Release")
	if err := claims.Release(acme, db, "k", "b", 2); err != nil {
		t.Fatal(err)
	}
	clean("Release")
	if c, err := claims.Get(acme, db, "k"); err != nil || c.Live || c.Holder != "b" {
		t.Fatalf("get: %+v, %v; want b's released claim", c, err)
	}
	if _, err := claims.Get(with(t, "globex"), db, "k"); !errors.Is(err, racefree.ErrNotFound) {
		t.Fatalf("globex reads acme's claim: %v, want ErrNotFound", err)
	}
	clean("Get")
}
