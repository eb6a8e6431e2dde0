package dedup_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dedup"
)

// TestObserveAndRecordRollBackWithTheCallersTransaction: given the
// caller's transaction, the count, the election, the event row and the
// recorded result commit or roll back with it.
func TestObserveAndRecordRollBackWithTheCallersTransaction(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		ev := dedup.Event{Source: "s", Level: "error", Message: "m", Fingerprint: "fp"}
		boom := errors.New("caller failed")
		// On SQLite a statement outside the caller's transaction waits for
		// the write lock that transaction holds: end it within seconds,
		// not after every busy timeout of every retry.
		bounded, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			o, err := log.Observe(bounded, tx, ev, time.Minute)
			if err != nil || !o.Process {
				t.Fatalf("observe in tx: %+v, %v", o, err)
			}
			if err := log.Record(bounded, tx, "fp", o.Fence, dedup.Result{Classification: "c"}); err != nil {
				t.Fatalf("record in tx: %v", err)
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if _, err := log.Get(ctx, db, "fp"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("event after rollback: %v, want ErrNotFound", err)
		}
		// Committed with the caller's transaction: counted once, recorded.
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			o, err := log.Observe(ctx, tx, ev, time.Minute)
			if err != nil {
				return err
			}
			if o.Count != 1 || !o.Process || o.Fence != 1 {
				t.Errorf("after a rolled-back observation: %+v; want count 1, fence 1, process", o)
			}
			return log.Record(ctx, tx, "fp", o.Fence, dedup.Result{Classification: "c"})
		})
		if err != nil {
			t.Fatal(err)
		}
		r, err := log.Get(ctx, db, "fp")
		if err != nil || r.Classification != "c" {
			t.Fatalf("after commit: %+v, %v", r, err)
		}
	})
}

// TestReapForgetsLapsedFingerprints: Reap deletes the claims and events
// of fingerprints whose window lapsed at least grace ago, keeps the
// others, and a fingerprint seen again starts a new event with a fence
// above the reaped one.
func TestReapForgetsLapsedFingerprints(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		old := dedup.Event{Source: "s", Level: "error", Message: "old", Fingerprint: "old"}
		if _, err := log.Observe(ctx, db, old, time.Minute); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute) // window 2 of "old": fence 2
		o, err := log.Observe(ctx, db, old, time.Minute)
		if err != nil || o.Fence != 2 {
			t.Fatalf("%+v, %v", o, err)
		}
		if err := log.Record(ctx, db, "old", o.Fence, dedup.Result{Classification: "c", ExternalID: "T-1"}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute + time.Hour)
		if _, err := log.Observe(ctx, db, dedup.Event{Source: "s", Level: "error", Message: "young", Fingerprint: "young"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if n, err := log.Reap(ctx, time.Hour, 1); err != nil || n != 1 {
			t.Fatalf("reap: %d, %v; want 1", n, err)
		}
		if _, err := log.Get(ctx, db, "old"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("reaped event: %v, want ErrNotFound", err)
		}
		if _, err := log.Get(ctx, db, "young"); err != nil {
			t.Fatalf("young event: %v, want kept", err)
		}
		if err := log.Record(ctx, db, "old", o.Fence, dedup.Result{Classification: "late"}); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("record of a reaped fingerprint: %v, want ErrNotFound", err)
		}
		again, err := log.Observe(ctx, db, old, time.Minute)
		if err != nil || !again.Process || again.Count != 1 || again.Fence <= o.Fence {
			t.Fatalf("observed again after reap: %+v, %v; want a new window with fence above %d", again, err, o.Fence)
		}
		if err := log.Record(ctx, db, "old", o.Fence, dedup.Result{Classification: "late"}); !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("the reaped window's winner records: %v, want ErrStaleFence", err)
		}
		r, err := log.Get(ctx, db, "old")
		if err != nil || r.Classification != "" || r.ResultFence != 0 {
			t.Fatalf("new event row: %+v, %v; want no result", r, err)
		}
	})
}

// TestRecordInputAndFencesAhead: NUL bytes and fences below 1 are bad
// input and change nothing; a fence ahead of the current one is
// ErrNotHeld, not stale.
func TestRecordInputAndFencesAhead(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		for _, ev := range []dedup.Event{
			{Source: "s\x00", Level: "l", Message: "m"},
			{Source: "s", Level: "l\x00", Message: "m"},
			{Source: "s", Level: "l", Message: "m\x00"},
			{Source: "s", Level: "l", Message: "m", Fingerprint: "f\x00p"},
		} {
			var ie *racefree.InputError
			if _, err := log.Observe(ctx, db, ev, 0); !errors.As(err, &ie) {
				t.Errorf("Observe(%q): %v, want an InputError", ev, err)
			}
		}
		o, err := log.Observe(ctx, db, dedup.Event{Source: "s", Level: "l", Message: "m", Fingerprint: "fp"}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			fp    string
			fence int64
			r     dedup.Result
		}{
			{"fp\x00", o.Fence, dedup.Result{}}, {"fp", 0, dedup.Result{}}, {"fp", -1, dedup.Result{}},
			{"fp", o.Fence, dedup.Result{Classification: "c\x00"}}, {"fp", o.Fence, dedup.Result{ExternalID: "\xff"}},
		} {
			var ie *racefree.InputError
			if err := log.Record(ctx, db, tc.fp, tc.fence, tc.r); !errors.As(err, &ie) {
				t.Errorf("Record(%q, %d, %+v): %v, want an InputError", tc.fp, tc.fence, tc.r, err)
			}
		}
		err = log.Record(ctx, db, "fp", o.Fence+5, dedup.Result{Classification: "ahead"})
		if !errors.Is(err, racefree.ErrNotHeld) || errors.Is(err, racefree.ErrStaleFence) || !strings.Contains(err.Error(), "ahead") {
			t.Fatalf("record with a fence ahead: %v, want ErrNotHeld saying ahead", err)
		}
		r, err := log.Get(ctx, db, "fp")
		if err != nil || r.Classification != "" || r.ResultFence != 0 {
			t.Fatalf("after refused records: %+v, %v; want no result", r, err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_dedup_events`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d event rows, %v; want 1", n, err)
		}
	})
}
