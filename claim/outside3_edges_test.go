package claim_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
)

// The tests of this file try what the earlier rounds left out: ReapBatch
// given a negative grace, one key in two namespaces under Guard, Get,
// Release and Reap, a release of a lapsed tenure alone, Lost of a lost
// acquire, a takeover's ClaimedAt and a renewal's Live.

// eachWay runs body on both engines in the two ways a call on the pool
// runs, as the subtests "combined" (through the combiner, the default)
// and "alone".
func eachWay(t *testing.T, body func(t *testing.T, b bundle)) {
	for name, combine := range map[string]racefree.CombinePolicy{"combined": racefree.CombineDefault, "alone": racefree.CombineOff} {
		t.Run(name, func(t *testing.T) { eachWith(t, combine, body) })
	}
}

// TestOutside3EdgesReapBatchRefusesANegativeGrace holds ReapBatch's
// bound: a grace below 0 is an *racefree.InputError, as Reap's is, and
// deletes nothing, not even a claim that lapsed long ago.
func TestOutside3EdgesReapBatchRefusesANegativeGrace(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		if _, err := b.claims.Acquire(ctx, b.db, "old", "a", time.Minute); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Hour)
		var keys []string
		err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			var err error
			keys, err = b.claims.ReapBatch(ctx, tx, -time.Millisecond, 10)
			return err
		})
		if !errors.Is(err, racefree.ErrInvalidInput) || len(keys) != 0 {
			t.Fatalf("ReapBatch with grace -1ms: %v, %v; want ErrInvalidInput and nothing reaped", keys, err)
		}
		if _, err := b.claims.Get(ctx, b.db, "old"); err != nil {
			t.Fatalf("the lapsed claim after a refused ReapBatch: %v, want it still there", err)
		}
	})
}

// TestOutside3EdgesOneKeyInTwoNamespaces holds the namespace apart in
// every statement that names a key: with "k" held by "h" at fence 1 in
// namespace a, namespace b has no claim on "k" (Get is ErrNotFound,
// Guard and Release by the same holder and fence are ErrNotHeld and leave
// a's claim live), and b's Reap deletes none of a's lapsed claims, which
// a's own Reap then does.
func TestOutside3EdgesOneKeyInTwoNamespaces(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		na, nb := claim.NewNamespace(b.db, "a"), claim.NewNamespace(b.db, "b")
		c, err := na.Acquire(ctx, b.db, "k", "h", time.Hour)
		if err != nil || c.Fence != 1 {
			t.Fatalf("acquire in a: %+v, %v", c, err)
		}
		if got, err := nb.Get(ctx, b.db, "k"); !errors.Is(err, racefree.ErrNotFound) {
			t.Errorf("get in b of a key held in a: %+v, %v; want ErrNotFound", got, err)
		}
		err = b.db.InTx(ctx, func(tx *sql.Tx) error { return nb.Guard(ctx, tx, "k", "h", 1) })
		if !errors.Is(err, racefree.ErrNotHeld) {
			t.Errorf("guard in b by a's holder and fence: %v, want ErrNotHeld", err)
		}
		if err := nb.Release(ctx, b.db, "k", "h", 1); !errors.Is(err, racefree.ErrNotHeld) {
			t.Errorf("release in b by a's holder and fence: %v, want ErrNotHeld", err)
		}
		if got, err := na.Get(ctx, b.db, "k"); err != nil || !got.Live || !got.ExpiresAt.Equal(t0.Add(time.Hour)) {
			t.Errorf("a's claim after b's guard and release: %+v, %v; want it live until %v", got, err, t0.Add(time.Hour))
		}
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error { return na.Guard(ctx, tx, "k", "h", 1) }); err != nil {
			t.Errorf("guard in a by its holder: %v", err)
		}

		if _, err := na.Acquire(ctx, b.db, "old", "h", time.Minute); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(2 * time.Minute)
		if n, err := nb.Reap(ctx, 0, 0); err != nil || n != 0 {
			t.Errorf("b's reap with a's claim lapsed: %d, %v; want 0", n, err)
		}
		if _, err := na.Get(ctx, b.db, "old"); err != nil {
			t.Errorf("a's lapsed claim after b's reap: %v, want it still there", err)
		}
		if n, err := na.Reap(ctx, 0, 0); err != nil || n != 1 {
			t.Errorf("a's reap: %d, %v; want 1", n, err)
		}
	})
}

// TestOutside3EdgesReleaseOfALapsedTenureKeepsItsExpiry releases a tenure
// that lapsed without a takeover, alone and through the combiner: it
// succeeds and the claim's expiry stays when it lapsed, not when it was
// released (the reap's grace counts from the lapse).
func TestOutside3EdgesReleaseOfALapsedTenureKeepsItsExpiry(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		c, err := b.claims.Acquire(ctx, b.db, "k", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(5 * time.Minute)
		if err := b.claims.Release(ctx, b.db, "k", "a", c.Fence); err != nil {
			t.Fatalf("release of a lapsed tenure: %v", err)
		}
		got, err := b.claims.Get(ctx, b.db, "k")
		if err != nil || got.Live || !got.ExpiresAt.Equal(t0.Add(time.Minute)) {
			t.Fatalf("after the release: %+v, %v; want the expiry left at %v", got, err, t0.Add(time.Minute))
		}
	})
}

// TestOutside3EdgesLostOfALostAcquire holds Lost's promise for every
// error that means the claim is lost for good: the *HeldError of an
// Acquire lost to another holder, wrapped or not, is lost; a failure
// that may pass (ErrUnavailable) is not.
func TestOutside3EdgesLostOfALostAcquire(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		if _, err := b.claims.Acquire(ctx, b.db, "k", "a", time.Minute); err != nil {
			t.Fatal(err)
		}
		_, err := b.claims.Acquire(ctx, b.db, "k", "b", time.Minute)
		var held *claim.HeldError
		if !errors.As(err, &held) {
			t.Fatalf("acquire of a held key: %v, want a *HeldError", err)
		}
		for _, e := range []error{err, fmt.Errorf("work: %w", err), racefree.ErrHeld} {
			if !claim.Lost(e) {
				t.Errorf("Lost(%v) = false, want true", e)
			}
		}
		if claim.Lost(racefree.ErrUnavailable) {
			t.Errorf("Lost(ErrUnavailable) = true, want false")
		}
	})
}

// TestOutside3EdgesATakeoverBeginsItsOwnTenure holds ClaimedAt: it is
// when the current tenure began, so a takeover's claim, and Get's of it,
// say the takeover's time while FirstSeen keeps the key's first attempt.
func TestOutside3EdgesATakeoverBeginsItsOwnTenure(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		if _, err := b.claims.Acquire(ctx, b.db, "k", "a", time.Minute); err != nil {
			t.Fatal(err)
		}
		at := t0.Add(2 * time.Minute)
		b.clock.Set(at)
		c, err := b.claims.Acquire(ctx, b.db, "k", "b", time.Minute)
		if err != nil || !c.ClaimedAt.Equal(at) || !c.FirstSeen.Equal(t0) {
			t.Fatalf("takeover: %+v, %v; want ClaimedAt %v and FirstSeen %v", c, err, at, t0)
		}
		got, err := b.claims.Get(ctx, b.db, "k")
		if err != nil || !got.ClaimedAt.Equal(at) || !got.FirstSeen.Equal(t0) {
			t.Fatalf("get after the takeover: %+v, %v; want ClaimedAt %v and FirstSeen %v", got, err, at, t0)
		}
	})
}

// TestOutside3EdgesARenewedClaimIsLive renews a claim, alone and through
// the combiner: the claim Renew returns is live, until now + ttl.
func TestOutside3EdgesARenewedClaimIsLive(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		c, err := b.claims.Acquire(ctx, b.db, "k", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(30 * time.Second)
		r, err := b.claims.Renew(ctx, b.db, "k", "a", c.Fence, time.Minute)
		if want := t0.Add(90 * time.Second); err != nil || !r.Live || !r.ExpiresAt.Equal(want) {
			t.Fatalf("renewal: %+v, %v; want it live until %v", r, err, want)
		}
	})
}
