package claim_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestOutside2EdgesInputBounds tries the documented input limits at their
// edges: a TTL of exactly MaxTTL is taken and one nanosecond more refused;
// a fence of 0 is an *racefree.InputError for Renew, Release and Guard,
// never a trip to the database; Get of an invalid key and Release by an
// invalid holder are *racefree.InputError too, not ErrNotFound or
// ErrNotHeld.
func TestOutside2EdgesInputBounds(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		c, err := b.claims.Acquire(ctx, b.db, "max", "a", claim.MaxTTL)
		if err != nil || !c.ExpiresAt.Equal(t0.Add(claim.MaxTTL)) {
			t.Fatalf("acquire for exactly MaxTTL: %+v, %v; want a claim until %v", c, err, t0.Add(claim.MaxTTL))
		}
		if r, err := b.claims.Renew(ctx, b.db, "max", "a", c.Fence, claim.MaxTTL); err != nil || !r.ExpiresAt.Equal(t0.Add(claim.MaxTTL)) {
			t.Fatalf("renew for exactly MaxTTL: %+v, %v", r, err)
		}
		if _, err := b.claims.Acquire(ctx, b.db, "over", "a", claim.MaxTTL+time.Nanosecond); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Fatalf("acquire for MaxTTL+1ns: %v, want ErrInvalidInput", err)
		}

		if _, err := b.claims.Renew(ctx, b.db, "max", "a", 0, time.Minute); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("renew at fence 0: %v, want ErrInvalidInput", err)
		}
		if err := b.claims.Release(ctx, b.db, "max", "a", 0); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("release at fence 0: %v, want ErrInvalidInput", err)
		}
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error { return b.claims.Guard(ctx, tx, "max", "a", 0) }); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("guard at fence 0: %v, want ErrInvalidInput", err)
		}

		for _, key := range []string{"", "a\x00b", strings.Repeat("k", claim.MaxKeyBytes+1), "\xff"} {
			if _, err := b.claims.Get(ctx, b.db, key); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("get of key %q: %v, want ErrInvalidInput", key, err)
			}
		}
		for _, holder := range []string{"", "a\x00", strings.Repeat("h", claim.MaxHolderBytes+1)} {
			if err := b.claims.Release(ctx, b.db, "max", holder, c.Fence); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("release by holder %q: %v, want ErrInvalidInput", holder, err)
			}
		}
		if got, err := b.claims.Get(ctx, b.db, "max"); err != nil || got.Holder != "a" || !got.Live {
			t.Fatalf("after the refused calls: %+v, %v; want a's live claim", got, err)
		}
	})
}

// TestOutside2EdgesTheExpiryMillisecond holds "live while now <
// expires_at" at the millisecond itself: one millisecond before, Get says
// live and Guard passes; at expires_at, Get says not live, Guard answers
// ErrNotHeld, and so does the holder's Renew, which is no stale fence
// (nobody else began a tenure).
func TestOutside2EdgesTheExpiryMillisecond(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		c, err := b.claims.Acquire(ctx, b.db, "edge", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		guard := func() error {
			return b.db.InTx(ctx, func(tx *sql.Tx) error { return b.claims.Guard(ctx, tx, "edge", "a", c.Fence) })
		}
		b.clock.Set(c.ExpiresAt.Add(-time.Millisecond))
		if got, err := b.claims.Get(ctx, b.db, "edge"); err != nil || !got.Live {
			t.Fatalf("get a millisecond before expiry: %+v, %v; want live", got, err)
		}
		if err := guard(); err != nil {
			t.Fatalf("guard a millisecond before expiry: %v", err)
		}
		b.clock.Set(c.ExpiresAt)
		if got, err := b.claims.Get(ctx, b.db, "edge"); err != nil || got.Live {
			t.Fatalf("get at expiry: %+v, %v; want not live", got, err)
		}
		if err := guard(); !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("guard at expiry: %v, want ErrNotHeld", err)
		}
		_, err = b.claims.Renew(ctx, b.db, "edge", "a", c.Fence, time.Minute)
		if !errors.Is(err, racefree.ErrNotHeld) || errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("renew of the holder's own lapsed claim: %v, want ErrNotHeld and no stale fence", err)
		}
	})
}

// TestOutside2EdgesReapGraceAndFloor holds Reap's bounds: with grace 0
// and batch 0 (1000) it deletes every lapsed claim; a claim is reaped
// once it lapsed exactly grace ago and not a millisecond before; and a
// later reap of lower fences never lowers the namespace's floor, so a key
// reaped at a high fence starts above it again.
func TestOutside2EdgesReapGraceAndFloor(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		// "high" reaches fence 5, "low" fence 1.
		for i := range 5 {
			c, err := b.claims.Acquire(ctx, b.db, "high", fmt.Sprint("h", i), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.claims.Release(ctx, b.db, "high", c.Holder, c.Fence); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := b.claims.Reap(ctx, 0, 0); err != nil || n != 1 {
			t.Fatalf("reap with grace 0, batch 0: %d, %v; want 1", n, err)
		}
		low, err := b.claims.Acquire(ctx, b.db, "low", "l", time.Minute)
		if err != nil || low.Fence != 6 {
			t.Fatalf("acquire of a new key above floor 5: %+v, %v; want fence 6", low, err)
		}
		// "low" expires at t0+1m; with grace 1h it is due at t0+1h1m.
		const grace = time.Hour
		b.clock.Set(low.ExpiresAt.Add(grace - time.Millisecond))
		if n, err := b.claims.Reap(ctx, grace, 0); err != nil || n != 0 {
			t.Fatalf("reap a millisecond before the claim lapsed grace ago: %d, %v; want 0", n, err)
		}
		b.clock.Set(low.ExpiresAt.Add(grace))
		if n, err := b.claims.Reap(ctx, grace, 0); err != nil || n != 1 {
			t.Fatalf("reap when the claim lapsed exactly grace ago: %d, %v; want 1", n, err)
		}
		// The floor is 6 now: "high" starts above it.
		if c, err := b.claims.Acquire(ctx, b.db, "high", "again", time.Minute); err != nil || c.Fence != 7 {
			t.Fatalf("acquire of the reaped key: %+v, %v; want fence 7", c, err)
		}
	})
}

// TestOutside2EdgesTheFloorNeverGoesDown reaps a key at fence 3, then a
// key whose fence 1 was issued before that reap and lapsed after it, and
// then acquires the first key again: it starts above 3, since the second
// reap, of a lower fence, must not lower the namespace's floor.
func TestOutside2EdgesTheFloorNeverGoesDown(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		low, err := b.claims.Acquire(ctx, b.db, "low", "l", time.Hour) // fence 1, lapses late
		if err != nil || low.Fence != 1 {
			t.Fatalf("acquire low: %+v, %v", low, err)
		}
		for i := range 3 {
			c, err := b.claims.Acquire(ctx, b.db, "high", fmt.Sprint("h", i), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.claims.Release(ctx, b.db, "high", c.Holder, c.Fence); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := b.claims.Reap(ctx, 0, 0); err != nil || n != 1 {
			t.Fatalf("first reap: %d, %v; want 1 (high, fence 3)", n, err)
		}
		b.clock.Advance(2 * time.Hour)
		if n, err := b.claims.Reap(ctx, 0, 0); err != nil || n != 1 {
			t.Fatalf("second reap: %d, %v; want 1 (low, fence 1)", n, err)
		}
		if c, err := b.claims.Acquire(ctx, b.db, "high", "again", time.Minute); err != nil || c.Fence <= 3 {
			t.Fatalf("acquire of the key reaped at fence 3 after a reap at fence 1: %+v, %v; want a fence above 3", c, err)
		}
	})
}

// TestOutside2EdgesKeepStopsAtNotHeld releases the kept claim itself (no
// other tenure began): the next renewal answers ErrNotHeld, which is lost
// for good, so Keep cancels with that cause rather than retrying until
// the TTL runs out (ErrLapsed).
func TestOutside2EdgesKeepStopsAtNotHeld(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		c, err := b.claims.Acquire(ctx, b.db, "kept", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.claims.Release(ctx, b.db, "kept", "a", c.Fence); err != nil {
			t.Fatal(err)
		}
		kept, stop := b.claims.Keep(ctx, c, 300*time.Millisecond)
		defer stop()
		<-kept.Done()
		if cause := context.Cause(kept); !errors.Is(cause, racefree.ErrNotHeld) {
			t.Fatalf("kept after its release: cause %v, want ErrNotHeld", cause)
		}
	})
}

// TestOutside2EdgesBatchesAtTheirEdges sends batches of twelve calls
// through the combiner's Many forms (PostgreSQL: arrays; SQLite: a JSON
// array, eight calls or more) at the edges of each promise: live holders
// re-acquiring extend their expiry and keep their fence; renewals at the
// very millisecond of expiry answer ErrNotHeld; a renewal by another
// holder naming the live fence answers ErrNotHeld and extends nothing; a
// release of lapsed claims keeps their expiry; a release at a stale fence
// of the same holder answers ErrStaleFence and frees nothing; and keys
// reaped at fence 3 start above the floor.
func TestOutside2EdgesBatchesAtTheirEdges(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1, Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		claims := claim.New(db)
		const n = 12
		key := func(p string, i int) string { return fmt.Sprintf("%s%02d", p, i) }
		holder := func(i int) string { return fmt.Sprint("h-", i) }
		acquire := func(p string, ttl time.Duration) [n]*claim.Claim {
			var cs [n]*claim.Claim
			for i := range n {
				c, err := claims.Acquire(ctx, db, key(p, i), holder(i), ttl)
				if err != nil {
					t.Fatal(err)
				}
				cs[i] = c
			}
			return cs
		}

		// Re-acquire by the live holders: expiry extended, fence kept.
		re := acquire("re", time.Minute)
		clock.Advance(10 * time.Second)
		gated(t, db, claims, n, func(i int) {
			c, err := claims.Acquire(ctx, db, key("re", i), holder(i), time.Minute)
			if err != nil || c.Fence != re[i].Fence || !c.ExpiresAt.Equal(t0.Add(70*time.Second)) {
				t.Errorf("re-acquire %d by its live holder: %+v, %v; want fence %d until %v", i, c, err, re[i].Fence, t0.Add(70*time.Second))
			}
		})

		// Renewals at the millisecond of expiry.
		clock.Set(t0)
		at := acquire("at", time.Minute)
		clock.Set(at[0].ExpiresAt)
		gated(t, db, claims, n, func(i int) {
			if c, err := claims.Renew(ctx, db, key("at", i), holder(i), at[i].Fence, time.Minute); !errors.Is(err, racefree.ErrNotHeld) {
				t.Errorf("renew %d at its expiry: %+v, %v; want ErrNotHeld", i, c, err)
			}
		})

		// Renewals by another holder naming the live fence.
		clock.Set(t0)
		other := acquire("ot", time.Minute)
		clock.Advance(time.Second)
		gated(t, db, claims, n, func(i int) {
			if c, err := claims.Renew(ctx, db, key("ot", i), "intruder", other[i].Fence, time.Hour); !errors.Is(err, racefree.ErrNotHeld) {
				t.Errorf("renew %d by another holder: %+v, %v; want ErrNotHeld", i, c, err)
			}
		})
		for i := range n {
			if c, err := claims.Get(ctx, db, key("ot", i)); err != nil || c.Holder != holder(i) || !c.ExpiresAt.Equal(other[i].ExpiresAt) {
				t.Errorf("after another holder's renewal %d: %+v, %v; want %s's claim until %v", i, c, err, holder(i), other[i].ExpiresAt)
			}
		}

		// Releases of lapsed claims: each keeps the expiry it lapsed at.
		clock.Set(t0)
		lapsed := acquire("la", time.Minute)
		clock.Advance(2 * time.Minute)
		gated(t, db, claims, n, func(i int) {
			if err := claims.Release(ctx, db, key("la", i), holder(i), lapsed[i].Fence); err != nil {
				t.Errorf("release %d of a lapsed claim: %v", i, err)
			}
		})
		for i := range n {
			if c, err := claims.Get(ctx, db, key("la", i)); err != nil || !c.ExpiresAt.Equal(lapsed[i].ExpiresAt) {
				t.Errorf("after the release of lapsed claim %d: %+v, %v; want its expiry kept at %v", i, c, err, lapsed[i].ExpiresAt)
			}
		}

		// Releases at a stale fence of the same holder.
		clock.Set(t0)
		first := acquire("st", time.Minute)
		for i := range n {
			if err := claims.Release(ctx, db, key("st", i), holder(i), first[i].Fence); err != nil {
				t.Fatal(err)
			}
		}
		second := acquire("st", time.Minute)
		gated(t, db, claims, n, func(i int) {
			if err := claims.Release(ctx, db, key("st", i), holder(i), first[i].Fence); !errors.Is(err, racefree.ErrStaleFence) {
				t.Errorf("release %d at a stale fence: %v, want ErrStaleFence", i, err)
			}
		})
		for i := range n {
			if c, err := claims.Get(ctx, db, key("st", i)); err != nil || !c.Live || c.Fence != second[i].Fence {
				t.Errorf("after a stale release %d: %+v, %v; want the live claim at fence %d", i, c, err, second[i].Fence)
			}
		}

		// Keys reaped at fence 3 start above the floor in a batch.
		ns := claim.NewNamespace(db, "floor")
		for round := range 3 {
			for i := range n {
				c, err := ns.Acquire(ctx, db, key("fl", i), holder(round), time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if err := ns.Release(ctx, db, key("fl", i), c.Holder, c.Fence); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got, err := ns.Reap(ctx, 0, 0); err != nil || got != n {
			t.Fatalf("reap: %d, %v; want %d", got, err, n)
		}
		gated(t, db, claims, n, func(i int) {
			if c, err := ns.Acquire(ctx, db, key("fl", i), "new", time.Minute); err != nil || c.Fence <= 3 {
				t.Errorf("acquire %d of a key reaped at fence 3: %+v, %v; want a fence above 3", i, c, err)
			}
		})
	})
}
