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
	"github.com/racefree/racefree/tenant"
)

// The tests of this file try the claim promises at their edges (the
// boundary matrix of docs/contributing.md): each limit at the limit and
// one past it, two values that differ in one dimension alone, the
// caller's transaction committed and rolled back, and a caller cancelled
// at each stage.

// TestEdgesNamespacesKeepEveryCallApart has one holder name take one key
// in two namespaces, both at fence 1: Renew, Release, Guard and Get in
// one namespace see and change its claim alone.
func TestEdgesNamespacesKeepEveryCallApart(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		other := claim.NewNamespace(b.db, "other")
		mine, err := b.claims.Acquire(ctx, b.db, "k", "h", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := other.Acquire(ctx, b.db, "k", "h", 2*time.Minute)
		if err != nil || theirs.Fence != mine.Fence {
			t.Fatalf("the same key and holder in another namespace: %+v, %v; want fence %d", theirs, err, mine.Fence)
		}
		get := func(s *claim.Store) *claim.Claim {
			t.Helper()
			c, err := s.Get(ctx, b.db, "k")
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		// Renew in the other namespace extends its claim alone.
		if r, err := other.Renew(ctx, b.db, "k", "h", theirs.Fence, time.Hour); err != nil || !r.ExpiresAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("renew in the other namespace: %+v, %v", r, err)
		}
		if c := get(b.claims); !c.ExpiresAt.Equal(mine.ExpiresAt) {
			t.Fatalf("the default namespace's claim after the other's renewal expires at %v, want %v", c.ExpiresAt, mine.ExpiresAt)
		}
		// Release in the default namespace frees its key alone.
		if err := b.claims.Release(ctx, b.db, "k", "h", mine.Fence); err != nil {
			t.Fatal(err)
		}
		if c := get(other); !c.Live || !c.ExpiresAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("the other namespace's claim after the default's release: %+v, want live until +1h", c)
		}
		if c := get(b.claims); c.Live {
			t.Fatalf("the released claim: %+v, want not live", c)
		}
		// Guard: the other's claim is live, the default's released.
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error { return other.Guard(ctx, tx, "k", "h", theirs.Fence) }); err != nil {
			t.Fatalf("guard in the other namespace: %v", err)
		}
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error { return b.claims.Guard(ctx, tx, "k", "h", mine.Fence) }); !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("guard of the released claim: %v, want ErrNotHeld", err)
		}
		// Renew of the released claim, in its namespace, finds nothing.
		if _, err := b.claims.Renew(ctx, b.db, "k", "h", mine.Fence, time.Hour); !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("renew of the released claim: %v, want ErrNotHeld", err)
		}
		// A new tenure in the default namespace: fence 2 there, 1 in other.
		if c, err := b.claims.Acquire(ctx, b.db, "k", "g", time.Minute); err != nil || c.Fence != 2 {
			t.Fatalf("a new tenure in the default namespace: %+v, %v; want fence 2", c, err)
		}
		if c := get(other); c.Fence != 1 || c.Holder != "h" {
			t.Fatalf("the other namespace's claim: %+v, want h's at fence 1", c)
		}
		// One namespace, two keys: a release of one leaves the other.
		k2, err := b.claims.Acquire(ctx, b.db, "k2", "g", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.claims.Release(ctx, b.db, "k", "g", 2); err != nil {
			t.Fatal(err)
		}
		if c, err := b.claims.Get(ctx, b.db, "k2"); err != nil || !c.Live || c.Fence != k2.Fence {
			t.Fatalf("k2 after k's release: %+v, %v; want live", c, err)
		}
	})
}

// TestEdgesInputBounds tries each documented limit at the limit and one
// past it: a key of MaxKeyBytes, a holder of MaxHolderBytes, a ttl of
// MinTTL (live for exactly that millisecond) and MaxTTL, for Acquire and
// Renew; one past each is an InputError that writes nothing.
func TestEdgesInputBounds(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		key, holder := strings.Repeat("k", claim.MaxKeyBytes), strings.Repeat("h", claim.MaxHolderBytes)
		c, err := b.claims.Acquire(ctx, b.db, key, holder, claim.MinTTL)
		if err != nil || !c.ExpiresAt.Equal(t0.Add(time.Millisecond)) {
			t.Fatalf("a key of MaxKeyBytes, a holder of MaxHolderBytes, a ttl of MinTTL: %+v, %v", c, err)
		}
		if g, err := b.claims.Get(ctx, b.db, key); err != nil || !g.Live {
			t.Fatalf("at the instant of acquiring with MinTTL: %+v, %v; want live", g, err)
		}
		if r, err := b.claims.Renew(ctx, b.db, key, holder, c.Fence, claim.MaxTTL); err != nil || !r.ExpiresAt.Equal(t0.Add(claim.MaxTTL)) {
			t.Fatalf("renew to MaxTTL: %+v, %v", r, err)
		}
		if r, err := b.claims.Renew(ctx, b.db, key, holder, c.Fence, claim.MinTTL); err != nil || !r.ExpiresAt.Equal(t0.Add(time.Millisecond)) {
			t.Fatalf("renew to MinTTL: %+v, %v", r, err)
		}
		b.clock.Advance(time.Millisecond)
		if g, err := b.claims.Get(ctx, b.db, key); err != nil || g.Live {
			t.Fatalf("MinTTL later: %+v, %v; want lapsed", g, err)
		}
		m, err := b.claims.Acquire(ctx, b.db, "max", "a", claim.MaxTTL)
		if err != nil || !m.ExpiresAt.Equal(b.clock.Now().Add(claim.MaxTTL)) {
			t.Fatalf("a ttl of MaxTTL: %+v, %v", m, err)
		}

		var before int
		if err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_claims`).Scan(&before); err != nil {
			t.Fatal(err)
		}
		refused := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%s: %v, want an InputError", what, err)
			}
		}
		_, err = b.claims.Acquire(ctx, b.db, key+"k", "a", time.Second)
		refused("a key of MaxKeyBytes + 1", err)
		_, err = b.claims.Acquire(ctx, b.db, "k", holder+"h", time.Second)
		refused("a holder of MaxHolderBytes + 1", err)
		_, err = b.claims.Acquire(ctx, b.db, "k", "a", claim.MinTTL-time.Nanosecond)
		refused("a ttl below MinTTL", err)
		_, err = b.claims.Acquire(ctx, b.db, "k", "a", claim.MaxTTL+time.Millisecond)
		refused("a ttl of MaxTTL + 1ms", err)
		_, err = b.claims.Renew(ctx, b.db, "max", "a", m.Fence, claim.MaxTTL+time.Millisecond)
		refused("renew to MaxTTL + 1ms", err)
		_, err = b.claims.Renew(ctx, b.db, "max", "a", m.Fence, 0)
		refused("renew to 0", err)
		var after int
		if err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_claims`).Scan(&after); err != nil || after != before {
			t.Fatalf("%d claims after refusals, %v; want %d", after, err, before)
		}
		if g, err := b.claims.Get(ctx, b.db, "max"); err != nil || !g.ExpiresAt.Equal(m.ExpiresAt) || g.Count != 1 {
			t.Fatalf("the claim refused renewals: %+v, %v; want it unchanged", g, err)
		}
	})
}

// TestEdgesCallsInTheCallersTransaction runs Acquire, Renew and Release
// in the caller's transaction, committed and rolled back: a later reader
// on the pool sees the committed call and never the rolled-back one.
func TestEdgesCallsInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		boom := errors.New("caller failed")
		// On SQLite a call outside the caller's transaction would wait for
		// the write lock that transaction holds: bound it.
		bounded, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var a *claim.Claim
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			var err error
			a, err = b.claims.Acquire(bounded, tx, "k", "a", time.Minute)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if c, err := b.claims.Get(ctx, b.db, "k"); err != nil || !c.Live || c.Fence != a.Fence {
			t.Fatalf("after the committed acquire: %+v, %v", c, err)
		}
		// Renew rolled back: the expiry is as it was.
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := b.claims.Renew(bounded, tx, "k", "a", a.Fence, time.Hour); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if c, err := b.claims.Get(ctx, b.db, "k"); err != nil || !c.ExpiresAt.Equal(a.ExpiresAt) {
			t.Fatalf("after a rolled-back renewal: %+v, %v; want the expiry %v", c, err, a.ExpiresAt)
		}
		// Release rolled back: the claim is still held.
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			if err := b.claims.Release(bounded, tx, "k", "a", a.Fence); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if _, err := b.claims.Acquire(ctx, b.db, "k", "b", time.Minute); !errors.Is(err, racefree.ErrHeld) {
			t.Fatalf("after a rolled-back release: %v, want ErrHeld", err)
		}
		// Renew and Release committed.
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := b.claims.Renew(bounded, tx, "k", "a", a.Fence, time.Hour)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if c, err := b.claims.Get(ctx, b.db, "k"); err != nil || !c.ExpiresAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("after a committed renewal: %+v, %v; want +1h", c, err)
		}
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error { return b.claims.Release(bounded, tx, "k", "a", a.Fence) }); err != nil {
			t.Fatal(err)
		}
		if c, err := b.claims.Acquire(ctx, b.db, "k", "b", time.Minute); err != nil || c.Fence != a.Fence+1 {
			t.Fatalf("after a committed release: %+v, %v; want b at fence %d", c, err, a.Fence+1)
		}
	})
}

// TestEdgesCancelledCaller cancels Acquire, Renew and Release before they
// are sent (the context's error, nothing written), and, on PostgreSQL, a
// takeover on the pool while it waits for the lock of a guarded
// transaction: the caller gets the context's error with
// racefree.ErrUnavailable, an unknown outcome: the takeover may have
// been committed once the lock was free (its COMMIT left with it), and
// the same holder's retry settles it without a second tenure. With the
// combiner on, a done context is refused before it could join a batch.
func TestEdgesCancelledCaller(t *testing.T) {
	t.Parallel()
	eachWith(t, racefree.CombineOff, func(t *testing.T, b bundle) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		gone, stop := context.WithCancel(ctx)
		stop()
		if _, err := b.claims.Acquire(gone, b.db, "k", "a", time.Second); !errors.Is(err, context.Canceled) {
			t.Fatalf("acquire with a cancelled context: %v, want context.Canceled", err)
		}
		if _, err := b.claims.Get(ctx, b.db, "k"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("after a cancelled acquire: %v, want ErrNotFound", err)
		}
		a, err := b.claims.Acquire(ctx, b.db, "k", "a", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.claims.Renew(gone, b.db, "k", "a", a.Fence, time.Hour); !errors.Is(err, context.Canceled) {
			t.Fatalf("renew with a cancelled context: %v, want context.Canceled", err)
		}
		if err := b.claims.Release(gone, b.db, "k", "a", a.Fence); !errors.Is(err, context.Canceled) {
			t.Fatalf("release with a cancelled context: %v, want context.Canceled", err)
		}
		if c, err := b.claims.Get(ctx, b.db, "k"); err != nil || !c.Live || !c.ExpiresAt.Equal(a.ExpiresAt) || c.Count != 1 {
			t.Fatalf("after a cancelled renewal and release: %+v, %v; want a's claim as it was", c, err)
		}
		// The combiner is off here: with it, a takeover waits for the
		// lock inside its batch, which its caller's cancellation does not
		// end (wire.DB.Combine), and the test would wait for itself.
		if b.db.Engine() != racefree.Postgres {
			return
		}
		guarded, err := b.db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = guarded.Rollback() }()
		if err := b.claims.Guard(ctx, guarded, "k", "a", a.Fence); err != nil {
			t.Fatal(err)
		}
		pid := testdb.BackendPID(t, guarded)
		b.clock.Set(a.ExpiresAt) // lapsed: b's takeover waits for the guard
		waitCtx, stopWait := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := b.claims.Acquire(waitCtx, b.db, "k", "b", time.Minute)
			done <- err
		}()
		if !testdb.BlockedBy(t, b.db, pid, nil) {
			t.Fatal("the takeover did not wait for the guarded transaction")
		}
		stopWait()
		if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, racefree.ErrUnavailable) {
			t.Fatalf("a takeover cancelled on the guard's lock: %v, want context.Canceled and ErrUnavailable (an unknown outcome)", err)
		}
		if err := guarded.Commit(); err != nil {
			t.Fatal(err)
		}
		testdb.Unblocked(t, b.db, pid, 10*time.Second)
		c, err := b.claims.Acquire(ctx, b.db, "k", "b", time.Minute)
		if err != nil || c.Fence != a.Fence+1 || c.Holder != "b" {
			t.Fatalf("b's retry: %+v, %v; want b's tenure at fence %d (the cancelled one's, or a first)", c, err, a.Fence+1)
		}
	})
}

// TestEdgesEveryAttemptCounts tries the occurrence figures at their edges:
// a loser's attempt moves Count and LastSeen to its own millisecond, a
// live holder's re-acquire counts too, and a new tenure at the exact
// millisecond of the expiry keeps FirstSeen; attempts on the same key in
// another namespace or tenant, or on another key, count there alone; a
// losing attempt in the caller's transaction counts when it commits and
// not when it rolls back.
func TestEdgesEveryAttemptCounts(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		figures := func(what string, s *claim.Store, ctx context.Context, count int64, first, last time.Time) {
			t.Helper()
			c, err := s.Get(ctx, b.db, "k")
			if err != nil || c.Count != count || !c.FirstSeen.Equal(first) || !c.LastSeen.Equal(last) {
				t.Fatalf("%s: %+v, %v; want count %d, first seen %v, last seen %v", what, c, err, count, first, last)
			}
		}
		a, err := b.claims.Acquire(ctx, b.db, "k", "a", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Second)
		if _, err := b.claims.Acquire(ctx, b.db, "k", "b", time.Second); !errors.Is(err, racefree.ErrHeld) {
			t.Fatalf("b: %v, want ErrHeld", err)
		}
		figures("after a lost attempt", b.claims, ctx, 2, t0, t0.Add(time.Second))
		b.clock.Advance(time.Second)
		if _, err := b.claims.Acquire(ctx, b.db, "k", "a", 8*time.Second); err != nil {
			t.Fatal(err)
		}
		figures("after the holder's re-acquire", b.claims, ctx, 3, t0, t0.Add(2*time.Second))

		// The same key in another namespace and tenant, and another key.
		other := claim.NewNamespace(b.db, "other")
		acme, err := tenant.With(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		for _, call := range []struct {
			s   *claim.Store
			ctx context.Context
			key string
		}{{other, ctx, "k"}, {b.claims, acme, "k"}, {b.claims, ctx, "k2"}} {
			for _, h := range []string{"x", "y"} { // a win, then a loss
				if _, err := call.s.Acquire(call.ctx, b.db, call.key, h, time.Minute); err != nil && !errors.Is(err, racefree.ErrHeld) {
					t.Fatal(err)
				}
			}
		}
		figures("after attempts elsewhere", b.claims, ctx, 3, t0, t0.Add(2*time.Second))
		figures("the other namespace's", other, ctx, 2, t0.Add(2*time.Second), t0.Add(2*time.Second))
		figures("the other tenant's", b.claims, acme, 2, t0.Add(2*time.Second), t0.Add(2*time.Second))

		// A lost attempt in the caller's transaction, rolled back, then
		// committed.
		b.clock.Advance(time.Second)
		boom := errors.New("caller failed")
		for _, commit := range []bool{false, true} {
			err := b.db.InTx(ctx, func(tx *sql.Tx) error {
				if _, err := b.claims.Acquire(ctx, tx, "k", "b", time.Second); !errors.Is(err, racefree.ErrHeld) {
					return fmt.Errorf("b in the caller's transaction: %v, want ErrHeld", err)
				}
				if commit {
					return nil
				}
				return boom
			})
			if commit && err != nil || !commit && !errors.Is(err, boom) {
				t.Fatal(err)
			}
		}
		figures("after a lost attempt rolled back and one committed", b.claims, ctx, 4, t0, t0.Add(3*time.Second))

		// A new tenure at the exact millisecond of the expiry.
		b.clock.Set(a.ExpiresAt)
		c, err := b.claims.Acquire(ctx, b.db, "k", "b", time.Second)
		if err != nil || c.Fence != a.Fence+1 {
			t.Fatalf("at the expiry: %+v, %v; want b at fence %d", c, err, a.Fence+1)
		}
		figures("after a new tenure", b.claims, ctx, 5, t0, a.ExpiresAt)
	})
}

// TestEdgesRowsWithoutALease tries a row written before migration 002
// (NULL fence and expiry) at its edges: the same key in another namespace
// is a claim of its own; an acquire of the row in the caller's
// transaction rolled back leaves the row as it was, committed takes it;
// and after a reap raised the namespace's floor, the row's first tenure
// starts above it (a fence the namespace never issued), as a key with no
// row would.
func TestEdgesRowsWithoutALease(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		if _, err := b.db.ExecContext(ctx, `INSERT INTO racefree_claims (tenant, ns, key, holder, count, first_seen, last_seen) VALUES ('default', '', 'old', 'legacy', 5, 1, 2)`); err != nil {
			t.Fatal(err)
		}
		before, err := b.claims.Get(ctx, b.db, "old")
		if err != nil {
			t.Fatal(err)
		}
		// One key, two namespaces: the other's is a fresh claim.
		if c, err := claim.NewNamespace(b.db, "other").Acquire(ctx, b.db, "old", "new", time.Minute); err != nil || c.Fence != 1 || c.Count != 1 {
			t.Fatalf("the legacy row's key in another namespace: %+v, %v; want a first claim", c, err)
		}
		// Rolled back in the caller's transaction: the row as it was.
		boom := errors.New("caller failed")
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			if c, err := b.claims.Acquire(ctx, tx, "old", "new", time.Minute); err != nil || c.Fence != 1 || c.Count != 6 {
				return fmt.Errorf("acquire of the legacy row in the caller's transaction: %+v, %v", c, err)
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if after, err := b.claims.Get(ctx, b.db, "old"); err != nil || *after != *before {
			t.Fatalf("after a rolled-back acquire: %+v, %v; want %+v", after, err, before)
		}
		// A reap raises the namespace's floor to 3.
		for i := range 3 {
			c, err := b.claims.Acquire(ctx, b.db, "r", fmt.Sprint("h", i), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.claims.Release(ctx, b.db, "r", c.Holder, c.Fence); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := b.claims.Reap(ctx, 0, 0); err != nil || n != 1 {
			t.Fatalf("reap: %d, %v; want 1 (the legacy row kept)", n, err)
		}
		// Committed in the caller's transaction: one above the floor.
		var c *claim.Claim
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			var err error
			c, err = b.claims.Acquire(ctx, tx, "old", "new", time.Minute)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if c.Fence != 4 || c.Count != 6 {
			t.Fatalf("the legacy row after a reap raised the floor to 3: %+v; want fence 4, count 6", c)
		}
		if g, err := b.claims.Get(ctx, b.db, "old"); err != nil || !g.Live || g.Fence != 4 || g.Holder != "new" {
			t.Fatalf("a later reader: %+v, %v; want new's claim at fence 4", g, err)
		}
	})
}

// TestEdgesAFenceRolledBackIsIssuedAgain: a new tenure acquired in the
// caller's transaction and rolled back issued no fence; the next tenure
// gets the fence the rolled-back one had, one above the last committed.
func TestEdgesAFenceRolledBackIsIssuedAgain(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		a, err := b.claims.Acquire(ctx, b.db, "k", "a", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b.clock.Set(a.ExpiresAt)
		boom := errors.New("caller failed")
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			if c, err := b.claims.Acquire(ctx, tx, "k", "b", time.Minute); err != nil || c.Fence != a.Fence+1 {
				return fmt.Errorf("b in the caller's transaction: %+v, %v; want fence %d", c, err, a.Fence+1)
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Fatal(err)
		}
		c, err := b.claims.Acquire(ctx, b.db, "k", "c", time.Minute)
		if err != nil || c.Fence != a.Fence+1 {
			t.Fatalf("after a rolled-back tenure: %+v, %v; want c at fence %d", c, err, a.Fence+1)
		}
		if _, err := b.claims.Renew(ctx, b.db, "k", "a", a.Fence, time.Minute); !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("a's renewal: %v, want ErrStaleFence", err)
		}
	})
}

// TestEdgesReapBatchInput: ReapBatch, which primitives call with their own
// transaction and batch, refuses a batch of 0 or below and a negative
// grace (InputErrors; it has no default of its own, unlike Reap) and
// deletes nothing then; a batch of 1 deletes one lapsed claim, and a grace
// of 0 reaps a claim at the millisecond it lapsed.
func TestEdgesReapBatchInput(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		for _, k := range []string{"a", "b"} {
			if _, err := b.claims.Acquire(ctx, b.db, k, "h", time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		b.clock.Advance(time.Minute) // both lapse now
		batch := func(grace time.Duration, n int) ([]string, error) {
			var keys []string
			err := tenant.InTx(ctx, b.db, tenant.Default, func(ctx context.Context, tx *sql.Tx) error {
				var err error
				keys, err = b.claims.ReapBatch(ctx, tx, grace, n)
				return err
			})
			return keys, err
		}
		for _, c := range []struct {
			grace time.Duration
			n     int
		}{{0, 0}, {0, -1}, {-time.Millisecond, 10}} {
			if keys, err := batch(c.grace, c.n); !errors.Is(err, racefree.ErrInvalidInput) || len(keys) != 0 {
				t.Fatalf("ReapBatch(grace %v, batch %d) = %v, %v; want an InputError", c.grace, c.n, keys, err)
			}
		}
		if keys, err := batch(0, 1); err != nil || len(keys) != 1 {
			t.Fatalf("ReapBatch(0, 1) = %v, %v; want one key", keys, err)
		}
		if keys, err := batch(0, 1); err != nil || len(keys) != 1 {
			t.Fatalf("the second ReapBatch(0, 1) = %v, %v; want the other key", keys, err)
		}
		if keys, err := batch(0, 1); err != nil || len(keys) != 0 {
			t.Fatalf("the third ReapBatch(0, 1) = %v, %v; want none left", keys, err)
		}
	})
}

// TestEdgesNotHeldSaysWhy: at the claim's current fence, a refusal that is
// neither stale nor ahead says which of the two it is: another holder's
// live claim is "held by" that holder (Renew, Release and Guard), the
// caller's own lapsed claim "lapsed at" (Renew and Guard; Release of a
// lapsed tenure succeeds); neither says the fence is ahead.
func TestEdgesNotHeldSaysWhy(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		c, err := b.claims.Acquire(ctx, b.db, "k", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		says := func(op string, err error, want string, not ...string) {
			t.Helper()
			if !errors.Is(err, racefree.ErrNotHeld) || errors.Is(err, racefree.ErrStaleFence) {
				t.Fatalf("%s at the current fence %d: %v; want ErrNotHeld, not stale", op, c.Fence, err)
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", op, err, want)
			}
			for _, n := range not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("%s: %q says %q", op, err, n)
				}
			}
		}
		guard := func(holder string) error {
			return b.db.InTx(ctx, func(tx *sql.Tx) error { return b.claims.Guard(ctx, tx, "k", holder, c.Fence) })
		}
		held := `held by "a" at fence 1`
		_, err = b.claims.Renew(ctx, b.db, "k", "b", c.Fence, time.Minute)
		says("b's renew of a's claim", err, held, "ahead", "lapsed")
		says("b's release of a's claim", b.claims.Release(ctx, b.db, "k", "b", c.Fence), held, "ahead", "lapsed")
		says("b's guard of a's claim", guard("b"), held, "ahead", "lapsed")

		b.clock.Advance(time.Minute) // a's claim lapses, nobody took it
		_, err = b.claims.Renew(ctx, b.db, "k", "a", c.Fence, time.Minute)
		says("a's renew of its lapsed claim", err, "lapsed at", "ahead", "held by")
		says("a's guard of its lapsed claim", guard("a"), "lapsed at", "ahead", "held by")
	})
}

// TestEdgesLostTellsEachRetryClassApart tries claim.Lost, the classifier
// Keep renews by, on each class of error a renewal returns: the refusals
// that mean the claim is gone for good (a stale fence, not held, held by
// another, a renewal that can never succeed) are lost; a failure that may
// pass (the database unavailable or busy, a renewal past its deadline, a
// transport error) is not, and Keep retries it until the TTL runs out.
// Then on both engines: a claim whose fence went stale cancels the kept
// context with the *StaleFenceError, and a ttl no renewal can use
// (below MinTTL) with the InputError, at the first renewal, not at the
// lapse.
func TestEdgesLostTellsEachRetryClassApart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		lost bool
	}{
		{"a stale fence", &claim.StaleFenceError{Key: "k", Fence: 1, Current: 2}, true},
		{"not held", fmt.Errorf("claim %q: %w: lapsed", "k", racefree.ErrNotHeld), true},
		{"held by another", &claim.HeldError{Claim: claim.Claim{Key: "k", Holder: "other", Fence: 2}}, true},
		{"invalid input", racefree.Invalid("ttl", "out of range"), true},
		{"the database unavailable", fmt.Errorf("claim renew: %w", racefree.ErrUnavailable), false},
		{"a transient conflict", fmt.Errorf("claim renew: %w", racefree.ErrRetryable), false},
		{"the renewal's deadline", fmt.Errorf("claim renew: %w", context.DeadlineExceeded), false},
		{"a transport error", errors.New("read tcp: connection reset by peer"), false},
	} {
		if got := claim.Lost(c.err); got != c.lost {
			t.Errorf("Lost(%s: %v) = %v, want %v", c.name, c.err, got, c.lost)
		}
	}

	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		c, err := b.claims.Acquire(ctx, b.db, "kept", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// The claim released and taken by another holder: a's fence is stale.
		if err := b.claims.Release(ctx, b.db, "kept", "a", c.Fence); err != nil {
			t.Fatal(err)
		}
		if _, err := b.claims.Acquire(ctx, b.db, "kept", "b", time.Minute); err != nil {
			t.Fatal(err)
		}
		kept, stop := b.claims.Keep(ctx, c, 300*time.Millisecond)
		defer stop()
		<-kept.Done()
		if cause := context.Cause(kept); !errors.Is(cause, racefree.ErrStaleFence) {
			t.Fatalf("kept past a new tenure: cause %v, want the *StaleFenceError", cause)
		}

		// A ttl below MinTTL: the first renewal is an InputError, which no
		// retry can cure.
		kept2, stop2 := b.claims.Keep(ctx, c, claim.MinTTL-time.Nanosecond)
		defer stop2()
		<-kept2.Done()
		if cause := context.Cause(kept2); !errors.Is(cause, racefree.ErrInvalidInput) {
			t.Fatalf("kept with a ttl below MinTTL: cause %v, want the InputError", cause)
		}
	})
}

// TestEdgesABatchOfCallsKeepsNamespacesApart holds one key under one
// holder name at one fence in two namespaces, and sends renewals, then
// releases, of the key (and of seven others) in one namespace, in one batch of
// the combiner each (their Many forms: on PostgreSQL one statement over
// arrays): the other namespace's claim keeps its expiry and stays live.
func TestEdgesABatchOfCallsKeepsNamespacesApart(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1, Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		a, b := claim.NewNamespace(db, "a"), claim.NewNamespace(db, "b")
		// Eight keys: SQLite runs Many forms from eight operations on.
		keys := []string{"k", "k2", "k3", "k4", "k5", "k6", "k7", "k8"}
		mine := map[string]*claim.Claim{}
		for _, k := range keys {
			c, err := a.Acquire(ctx, db, k, "h", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			mine[k] = c
		}
		other, err := b.Acquire(ctx, db, "k", "h", time.Minute)
		if err != nil || other.Fence != mine["k"].Fence {
			t.Fatalf("the same key, holder and fence in namespace b: %+v, %v", other, err)
		}
		unchanged := func(what string) {
			t.Helper()
			g, err := b.Get(ctx, db, "k")
			if err != nil || !g.Live || g.Holder != "h" || g.Fence != other.Fence || !g.ExpiresAt.Equal(other.ExpiresAt) {
				t.Fatalf("namespace b's claim after %s in namespace a: %+v, %v; want it as it was, %+v", what, g, err, other)
			}
		}
		clock.Advance(10 * time.Second)
		gated(t, db, a, len(keys), func(i int) {
			k := keys[i]
			if c, err := a.Renew(ctx, db, k, "h", mine[k].Fence, time.Hour); err != nil || !c.ExpiresAt.Equal(clock.Now().Add(time.Hour)) {
				t.Errorf("renew %s in namespace a: %+v, %v", k, c, err)
			}
		})
		unchanged("a batch of renewals")
		gated(t, db, a, len(keys), func(i int) {
			k := keys[i]
			if err := a.Release(ctx, db, k, "h", mine[k].Fence); err != nil {
				t.Errorf("release %s in namespace a: %v", k, err)
			}
		})
		unchanged("a batch of releases")
	})
}

// TestEdgesABatchReleasingLapsedTenuresChangesNothing releases eight
// tenures an hour after they lapsed untaken, in one batch of the
// combiner (their Many form: on PostgreSQL one statement over arrays),
// as a retried release would: each release succeeds and changes nothing,
// each claim's expiry stays the instant it lapsed, as alone, so that a
// reap with a grace of half an hour takes all eight.
func TestEdgesABatchReleasingLapsedTenuresChangesNothing(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1, Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		claims := claim.New(db)
		var tenures []*claim.Claim
		for i := range 8 { // SQLite runs Many forms from eight operations on
			c, err := claims.Acquire(ctx, db, fmt.Sprintf("k%d", i), "a", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			tenures = append(tenures, c)
		}
		clock.Advance(time.Hour)
		gated(t, db, claims, len(tenures), func(i int) {
			c := tenures[i]
			if err := claims.Release(ctx, db, c.Key, "a", c.Fence); err != nil {
				t.Errorf("release of %s an hour after it lapsed: %v", c.Key, err)
			}
		})
		for _, c := range tenures {
			g, err := claims.Get(ctx, db, c.Key)
			if err != nil || g.Live || !g.ExpiresAt.Equal(t0.Add(time.Second)) {
				t.Fatalf("%s after its release: %+v, %v; want lapsed at %v, as before", c.Key, g, err, t0.Add(time.Second))
			}
		}
		if n, err := claims.Reap(ctx, 30*time.Minute, 0); err != nil || n != int64(len(tenures)) {
			t.Fatalf("reap with a grace of 30 minutes: %d, %v; want the %d released claims", n, err, len(tenures))
		}
	})
}
