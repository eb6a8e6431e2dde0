package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
)

// TestAStaleHolderCannotComplete is River#1302's race: a worker whose
// lease lapsed while another claim took the message over must not
// complete (or fail, or renew) it.
func TestAStaleHolderCannotComplete(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		a := claim(t, ctx, o, "A", 1, time.Second)[0]
		clock.Advance(999 * time.Millisecond)
		if ds := claim(t, ctx, o, "B", 1, time.Second); len(ds) != 0 {
			t.Fatalf("claimed a live lease")
		}
		clock.Advance(time.Millisecond) // A's lease lapses at this exact millisecond
		b := claim(t, ctx, o, "B", 1, time.Second)
		if len(b) != 1 || b[0].ID != id || b[0].Fence != 2 || b[0].Attempt != 2 {
			t.Fatalf("takeover: %+v", b)
		}
		var stale *outbox.StaleFenceError
		if err := o.Complete(ctx, db, a); !errors.As(err, &stale) || !errors.Is(err, racefree.ErrStaleFence) || stale.Fence != 1 || stale.Current != 2 {
			t.Fatalf("the stale holder's Complete: %v, want a StaleFenceError 1 < 2", err)
		}
		if _, err := o.Fail(ctx, a, errors.New("late")); !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("the stale holder's Fail: %v, want ErrStaleFence", err)
		}
		if lost, err := o.Heartbeat(ctx, []*outbox.Delivery{a}, time.Second); err != nil || len(lost) != 1 {
			t.Fatalf("the stale holder's heartbeat: lost %d, %v; want it lost", len(lost), err)
		}
		r := get(t, ctx, o, id)
		if r.State != outbox.Leased || r.LeasedBy != "B" || r.Fence != 2 || r.LastError != "" {
			t.Fatalf("the stale holder changed the message: %+v", r)
		}
		if len(r.History) != 1 || r.History[0].Outcome != "lapsed" || r.History[0].Worker != "A" || r.History[0].Fence != 1 || r.History[0].Attempt != 1 {
			t.Fatalf("history: %+v, want A's lapsed lease", r.History)
		}
		if err := o.Complete(ctx, db, b[0]); err != nil {
			t.Fatalf("the current holder's Complete: %v", err)
		}
		if r := get(t, ctx, o, id); r.State != outbox.Delivered {
			t.Fatalf("state %s, want delivered", r.State)
		}
	})
}

// TestALapsedLeaseNobodyTookOverStillCompletes: the message was delivered;
// delivering it again would only repeat it. The heartbeat does not revive
// the lapsed lease, though: its holder learns it lost it.
func TestALapsedLeaseNobodyTookOverStillCompletes(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		a := claim(t, ctx, o, "A", 1, time.Second)[0]
		clock.Advance(500 * time.Millisecond)
		if lost, err := o.Heartbeat(ctx, []*outbox.Delivery{a}, time.Second); err != nil || len(lost) != 0 {
			t.Fatalf("a live heartbeat: lost %d, %v", len(lost), err)
		}
		if want := t0.Add(1500 * time.Millisecond); !a.LeaseExpiresAt.Equal(want) {
			t.Fatalf("the heartbeat moved the lease to %s, want %s", a.LeaseExpiresAt, want)
		}
		clock.Advance(time.Second) // lapsed, at the exact millisecond
		if lost, err := o.Heartbeat(ctx, []*outbox.Delivery{a}, time.Second); err != nil || len(lost) != 1 {
			t.Fatalf("a heartbeat after the lease lapsed: lost %d, %v; want it lost", len(lost), err)
		}
		if err := o.Complete(ctx, db, a); err != nil {
			t.Fatalf("completing a lapsed lease nobody took over: %v", err)
		}
		if r := get(t, ctx, o, id); r.State != outbox.Delivered {
			t.Fatalf("state %s", r.State)
		}
	})
}

// TestCompleteInTheCallersTransaction: a handler whose effect lives in the
// same database applies it and completes the message in one transaction,
// so a rollback undoes both.
func TestCompleteInTheCallersTransaction(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		d := claim(t, ctx, o, "A", 1, time.Minute)[0]
		_ = db.InTx(ctx, func(tx *sql.Tx) error {
			if err := o.Complete(ctx, tx, d); err != nil {
				t.Fatal(err)
			}
			return errors.New("roll back")
		})
		if r := get(t, ctx, o, id); r.State != outbox.Leased {
			t.Fatalf("a rolled-back completion left %s", r.State)
		}
		err := db.InTx(ctx, func(tx *sql.Tx) error { return o.Complete(ctx, tx, d) })
		if err != nil {
			t.Fatal(err)
		}
		if r := get(t, ctx, o, id); r.State != outbox.Delivered {
			t.Fatalf("state %s", r.State)
		}
	})
}

// TestEdgesOneClaimRecordsEveryLapseItTakesOver: a claim that takes over
// several lapsed leases at once (of two workers, with other attempts)
// records each lapse in its message's history, not only the first.
func TestEdgesOneClaimRecordsEveryLapseItTakesOver(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		var msgs []int64
		for range 3 {
			msgs = append(msgs, enqueue(t, ctx, o, db, outbox.Message{Topic: "t"}))
		}
		a := claim(t, ctx, o, "A", 2, time.Second)
		c := claim(t, ctx, o, "C", 1, 2*time.Second)
		if len(a) != 2 || len(c) != 1 {
			t.Fatalf("claimed %v and %v", ids(a), ids(c))
		}
		clock.Advance(2 * time.Second) // both leases lapse
		if b := claim(t, ctx, o, "B", 10, time.Second); len(b) != 3 {
			t.Fatalf("the takeover claimed %v, want all three", ids(b))
		}
		for _, id := range msgs {
			h := get(t, ctx, o, id).History
			if len(h) != 1 || h[0].Outcome != "lapsed" || h[0].Fence != 1 || h[0].Attempt != 1 || (h[0].Worker != "A" && h[0].Worker != "C") {
				t.Errorf("message %d's history: %+v, want its one lapsed lease", id, h)
			}
		}
	})
}
