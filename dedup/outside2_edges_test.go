package dedup_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// The tests of this file try, at their edges, what a second reading of
// dedup from outside found no test of: Reap's count over several
// tenants, a result whose classification is empty and whose external id
// is bad, the reason Record gives inside the caller's transaction, and
// LastSeen.

// TestOutside2EdgesReapCountsEveryTenant forgets the lapsed fingerprints
// of three tenants, each with a count of its own: Reap returns their sum,
// not the count of one tenant, and none of them is left.
func TestOutside2EdgesReapCountsEveryTenant(t *testing.T) {
	t.Parallel()
	testdb.EachRole(t, t0, func(t *testing.T, db, _ *racefree.DB, clock *racefree.ManualClock) {
		log := dedup.New(db)
		tenants := []context.Context{context.Background(), with(t, "acme"), with(t, "globex")}
		for i, ctx := range tenants {
			for j := range 2*i + 1 {
				ev := dedup.Event{Source: "s", Level: "error", Message: "m", Fingerprint: "fp-" + string(rune('a'+j))}
				if _, err := log.Observe(ctx, db, ev, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
		}
		clock.Advance(time.Minute)
		if n, err := log.Reap(context.Background(), 0, 2); err != nil || n != 1+3+5 {
			t.Fatalf("Reap of 1 + 3 + 5 lapsed fingerprints in three tenants: %d, %v; want 9", n, err)
		}
		for _, ctx := range tenants {
			if r, err := log.Get(ctx, db, "fp-a"); !errors.Is(err, racefree.ErrNotFound) {
				t.Fatalf("fp-a after the reap: %+v, %v; want ErrNotFound in every tenant", r, err)
			}
		}
	})
}

// TestOutside2EdgesResultWithAnEmptyClassification records results whose
// classification is empty and whose external id is one byte too long,
// not UTF-8 or holds a NUL byte: each is an InputError and writes
// nothing; an empty classification beside a good external id records.
func TestOutside2EdgesResultWithAnEmptyClassification(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		o, err := log.Observe(ctx, db, dedup.Event{Source: "s", Level: "error", Message: "m", Fingerprint: "fp"}, time.Minute)
		if err != nil || !o.Process {
			t.Fatalf("%+v, %v", o, err)
		}
		for _, ext := range []string{strings.Repeat("x", dedup.MaxResultBytes+1), "T-\xff", "T-\x001"} {
			if err := log.Record(ctx, db, "fp", o.Fence, dedup.Result{ExternalID: ext}); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("Record of an empty classification and the external id %q: %v, want ErrInvalidInput", ext, err)
			}
			if r, err := log.Get(ctx, db, "fp"); err != nil || r.ExternalID != "" || r.ResultFence != 0 {
				t.Fatalf("after the refused record of %q: %+v, %v; want no result", ext, r, err)
			}
		}
		if err := log.Record(ctx, db, "fp", o.Fence, dedup.Result{ExternalID: "T-1"}); err != nil {
			t.Fatal(err)
		}
		if r, err := log.Get(ctx, db, "fp"); err != nil || r.Classification != "" || r.ExternalID != "T-1" || r.ResultFence != o.Fence {
			t.Fatalf("after the record of T-1 alone: %+v, %v", r, err)
		}
	})
}

// TestOutside2EdgesRecordInTheCallersTransactionTellsItsOwnFence: in the
// caller's transaction, a fingerprint committed at fence 1 is won again
// at fence 2; a Record there at fence 1 is stale against fence 2, the
// transaction's, and one at fence 3 is ahead of it, as the transaction
// sees the claim, not as the pool does.
func TestOutside2EdgesRecordInTheCallersTransactionTellsItsOwnFence(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		ev := dedup.Event{Source: "s", Level: "error", Message: "m", Fingerprint: "fp"}
		if o, err := log.Observe(ctx, db, ev, time.Minute); err != nil || o.Fence != 1 {
			t.Fatalf("%+v, %v", o, err)
		}
		clock.Advance(time.Minute)
		// On SQLite a call outside the transaction would wait for the write
		// lock it holds: bound it.
		bounded, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := db.InTx(ctx, func(tx *sql.Tx) error {
			o, err := log.Observe(bounded, tx, ev, time.Minute)
			if err != nil || !o.Process || o.Fence != 2 {
				t.Fatalf("the second window, in the transaction: %+v, %v", o, err)
			}
			err = log.Record(bounded, tx, "fp", 1, dedup.Result{Classification: "late"})
			var stale *claim.StaleFenceError
			if !errors.As(err, &stale) || stale.Fence != 1 || stale.Current != 2 {
				t.Fatalf("Record at fence 1 in the transaction: %v, want stale against fence 2", err)
			}
			if err := log.Record(bounded, tx, "fp", 3, dedup.Result{Classification: "ahead"}); !errors.Is(err, racefree.ErrNotHeld) || !strings.Contains(err.Error(), "current fence 2") {
				t.Fatalf("Record at fence 3 in the transaction: %v, want ErrNotHeld, ahead of fence 2", err)
			}
			return log.Record(bounded, tx, "fp", 2, dedup.Result{Classification: "won"})
		}); err != nil {
			t.Fatal(err)
		}
		if r, err := log.Get(ctx, db, "fp"); err != nil || r.Classification != "won" || r.ResultFence != 2 {
			t.Fatalf("after the commit: %+v, %v", r, err)
		}
	})
}

// TestOutside2EdgesLastSeenMovesWithEachOccurrence observes one
// fingerprint three times a second apart within one window: FirstSeen
// stays the first occurrence's time, LastSeen is each occurrence's own.
func TestOutside2EdgesLastSeenMovesWithEachOccurrence(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		ev := dedup.Event{Source: "s", Level: "error", Message: "m", Fingerprint: "fp"}
		for i := range 3 {
			now := clock.Now()
			o, err := log.Observe(ctx, db, ev, time.Minute)
			if err != nil || o.Count != int64(i+1) || !o.FirstSeen.Equal(t0) || !o.LastSeen.Equal(now) {
				t.Fatalf("occurrence %d at %s: %+v, %v; want first seen %s, last seen %s", i+1, now, o, err, t0, now)
			}
			clock.Advance(time.Second)
		}
	})
}
