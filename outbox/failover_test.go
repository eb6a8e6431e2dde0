package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
)

// TestLeaseFencesJumpPastAFailoverThatLostCommits runs a real primary and
// an asynchronous streaming standby, leases a message on the primary while
// the standby does not receive it, kills the primary and promotes the
// standby: the leases those lost commits acknowledged (fences 3 and 4) are
// gone, and the promoted node's row holds fence 2. The new primary's claim
// leases the message with a fence above every one acknowledged before
// (the timeline's floor, (timeline - 1) * 2^40 + 1), so the worker of a
// lost lease cannot complete the new tenure (*StaleFenceError); the lapse
// it takes over is recorded with the fence that lapsed (2, not the new
// fence minus one), and the history keeps its older entries when the new
// tenure's failure is recorded (it is kept by rank, not cut by fence
// arithmetic, which the jump would empty). A message enqueued already
// leased (Ancillary) gets the floor as its first fence.
func TestLeaseFencesJumpPastAFailoverThatLostCommits(t *testing.T) {
	t.Parallel()
	c := testdb.NewCluster(t)
	ctx := context.Background()
	clock, cfg := manual()
	role := c.AppRole(t, c.Primary.Open(t, cfg))
	open := func() *outbox.Outbox {
		t.Helper()
		db, err := dsn.Open(ctx, c.Primary.URLAs(role), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return newOutbox(t, db, &outbox.Options{History: 3})
	}
	o := open()
	id := enqueue(t, ctx, o, o.DB(), outbox.Message{Topic: "t"})
	lease := func(worker string, want int64) *outbox.Delivery {
		t.Helper()
		ds := claim(t, ctx, o, worker, 1, time.Second)
		if len(ds) != 1 || ds[0].Fence != want {
			t.Fatalf("claim by %s: %+v, want fence %d", worker, ds, want)
		}
		clock.Advance(2 * time.Second) // the lease lapses
		return ds[0]
	}
	lease("w1", 1) // fences 1 and 2 on timeline 1, as without a floor, replicated
	lease("w2", 2)
	before := c.Primary.Timeline(t)
	var lost []*outbox.Delivery
	c.FailOverLosing(t, func() {
		lost = append(lost, lease("w3", 3), lease("w4", 4))
	})
	after := c.Primary.Timeline(t)
	if after <= before {
		t.Fatalf("timeline %d after the promotion, want above %d", after, before)
	}

	o = open()
	ds := claim(t, ctx, o, "w5", 1, time.Minute)
	floor := (after-1)<<40 + 1
	if len(ds) != 1 || ds[0].Fence < floor {
		t.Fatalf("claim on the new primary: %+v, want one delivery at fence %d or above (acknowledged before: 1 to 4)", ds, floor)
	}
	for _, d := range lost {
		var stale *outbox.StaleFenceError
		if err := o.Complete(ctx, o.DB(), d); !errors.As(err, &stale) {
			t.Errorf("complete by %s (fence %d, lost in the failover) on the new primary: %v, want a *StaleFenceError", d.Worker, d.Fence, err)
		}
	}
	r := get(t, ctx, o, id)
	if len(r.History) != 2 || r.History[0].Fence != 1 || r.History[1].Fence != 2 || r.History[1].Outcome != "lapsed" {
		t.Errorf("history on the new primary: %+v, want the lapses of fences 1 and 2", r.History)
	}
	// A failure of the new tenure is recorded with its own fence, and the
	// history, kept by rank, still holds the three latest entries.
	if _, err := o.Fail(ctx, ds[0], errors.New("boom")); err != nil {
		t.Fatalf("fail the new tenure: %v", err)
	}
	if r := get(t, ctx, o, id); len(r.History) != 3 || r.History[0].Fence != 1 || r.History[1].Fence != 2 || r.History[2].Fence != ds[0].Fence {
		t.Errorf("history after a failure on the new primary: %+v, want fences 1, 2 and %d", r.History, ds[0].Fence)
	}

	var fence int64
	warn, err := o.Ancillary(ctx, outbox.Message{Topic: "t"}, func(context.Context, *sql.Tx) error { return nil },
		func(_ context.Context, d *outbox.Delivery) error { fence = d.Fence; return nil })
	if err != nil || warn != nil {
		t.Fatalf("ancillary: %v, %v", warn, err)
	}
	if fence != floor {
		t.Errorf("an ancillary message's fence on timeline %d = %d, want the timeline's floor %d", after, fence, floor)
	}
}

// TestAnAncillaryMessageStartsAtFenceOne pins the fence Ancillary hands
// its handler: the one the database issued (1, on SQLite and on a
// PostgreSQL that never failed over), which its completion is conditioned
// on.
func TestAnAncillaryMessageStartsAtFenceOne(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		var fence int64
		warn, err := o.Ancillary(ctx, outbox.Message{Topic: "t"}, func(context.Context, *sql.Tx) error { return nil },
			func(_ context.Context, d *outbox.Delivery) error { fence = d.Fence; return nil })
		if err != nil || warn != nil || fence != 1 {
			t.Fatalf("ancillary: fence %d, %v, %v; want fence 1", fence, warn, err)
		}
	})
}
