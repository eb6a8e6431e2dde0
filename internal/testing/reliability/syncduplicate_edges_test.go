package reliability

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestEdgesADuplicateCancelledWhileItWaitsForTheStandby cancels the
// redeliveries of TestDuplicateWaitsForTheSynchronousStandby while their
// commits wait for the synchronous standby, which is gone and does not
// have the events (committed on the primary alone): a caller cancelled
// there must not be told "duplicate" (a sender stops sending an event it
// is told was processed, and a failover at that moment loses it).
// Received alone, the delivery gets the context's error at once; in a
// batch of the combiner, whose batch is in flight, it gets the batch's
// outcome, which waits for the standby. Once the standby is back a
// redelivery of each is a duplicate, and after a failover to that standby
// both events are there.
func TestEdgesADuplicateCancelledWhileItWaitsForTheStandby(t *testing.T) {
	c, p := syncCluster(t)
	paths := []struct {
		name string
		in   *inbox.Inbox
		fn   func(*sql.Tx) error
	}{
		{"combined", newInbox(t, c.Primary.Open(t, &racefree.Config{Combine: racefree.CombineOn})), nil},
		{"alone", newInbox(t, c.Primary.Open(t, nil)), func(*sql.Tx) error { return nil }},
	}
	for _, path := range paths {
		if _, err := path.in.Receive(context.Background(), "s", "warm-"+path.name, nil, path.fn); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitStreaming(t)
	c.Standby.Stop(t)
	for _, path := range paths {
		first := deliver(path.in, "evt-"+path.name, path.fn)
		waitRow(t, p, `SELECT count(pg_terminate_backend(pid)) >= 0
			AND EXISTS (SELECT 1 FROM racefree_inbox WHERE event_id = 'evt-`+path.name+`')
			FROM pg_stat_activity WHERE wait_event = 'SyncRep'`)
		if r := <-first; r.err == nil {
			t.Fatalf("%s: the first delivery, whose commit's wait was ended: %+v, want an error", path.name, r.res)
		}
	}

	answers := make([]chan result, len(paths))
	for i, path := range paths {
		ctx, cancel := context.WithCancel(context.Background())
		answers[i] = make(chan result, 1)
		go func() {
			res, err := path.in.Receive(ctx, "s", "evt-"+path.name, nil, path.fn)
			answers[i] <- result{res, err}
		}()
		// A backend whose caller went away keeps waiting: the waits add up.
		waitsForTheStandby(t, p, path.name+": the redelivery", answers[i], i+1)
		cancel()
	}
	// Alone: the context's error, at once.
	select {
	case r := <-answers[1]:
		if r.err == nil || r.res.Duplicate || !errors.Is(r.err, context.Canceled) {
			t.Errorf("alone: the redelivery cancelled while it waits for the standby: %+v, %v; want the context's error, never duplicate", r.res, r.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("alone: the redelivery cancelled while it waits for the standby has not answered in a minute")
	}
	// Combined: the batch's outcome, which waits for the standby.
	select {
	case r := <-answers[0]:
		if r.err == nil || r.res.Duplicate {
			t.Errorf("combined: the redelivery cancelled while its batch waits for the standby: %+v, %v; want no duplicate while no standby has the event", r.res, r.err)
		}
	default:
	}

	c.Standby.Start(t)
	if r := <-answers[0]; r.err == nil && !r.res.Duplicate {
		t.Errorf("combined: the cancelled redelivery once the standby is back: %+v, want duplicate or an error", r.res)
	}
	for _, path := range paths {
		if r := <-deliver(path.in, "evt-"+path.name, path.fn); r.err != nil || !r.res.Duplicate {
			t.Errorf("%s: a redelivery once the standby is back: %+v, %v, want duplicate", path.name, r.res, r.err)
		}
	}
	c.Primary.Kill(t)
	c.Promote(t)
	var n int
	if err := c.Primary.DB(t).QueryRow(`SELECT count(*) FROM racefree_inbox WHERE event_id LIKE 'evt-%'`).Scan(&n); err != nil || n != len(paths) {
		t.Errorf("after the failover: %d events, %v, want the %d acknowledged as duplicates", n, err, len(paths))
	}
}

// TestEdgesTwoDuplicatesInABatchCancelledWhileTheyWait is
// TestDuplicatesInABatchWaitForTheSynchronousStandby at its bound: a batch
// of exactly two redeliveries (the fewest that run as one statement over
// arrays, durable_many.sql), one of whose callers is cancelled while the
// batch waits for the synchronous standby. Neither is told "duplicate"
// while no standby has the events: the cancelled caller gets the batch's
// outcome, as every caller whose batch is in flight does. Once the
// standby is back both are duplicates, the batch was one of two, and
// after a failover to that standby the events are there.
func TestEdgesTwoDuplicatesInABatchCancelledWhileTheyWait(t *testing.T) {
	c, p := syncCluster(t)
	db := c.Primary.Open(t, &racefree.Config{Combine: racefree.CombineOn})
	in := newInbox(t, db)
	if _, err := in.Receive(context.Background(), "s", "warm", nil, nil); err != nil {
		t.Fatal(err)
	}
	c.WaitStreaming(t)
	c.Standby.Stop(t)

	events := []string{"evt-1", "evt-2"}
	var firsts []<-chan result
	for _, id := range events {
		firsts = append(firsts, deliver(in, id, nil))
	}
	waitRow(t, p, `SELECT count(pg_terminate_backend(pid)) >= 0
		AND (SELECT count(*) FROM racefree_inbox WHERE event_id LIKE 'evt-%') = 2
		FROM pg_stat_activity WHERE wait_event = 'SyncRep'`)
	for _, first := range firsts {
		<-first // an error, or new: the commit's wait was ended
	}

	gate := deliver(in, "gate", nil)
	waitsForTheStandby(t, p, "the gate", gate, 1)
	testdb.WaitCombiner(t, db, "the gate's batch", func(s racefree.CombineStats) bool { return s.Running == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	retries := make([]chan result, len(events))
	for i, id := range events {
		retries[i] = make(chan result, 1)
		go func() {
			rctx := context.Background()
			if i == 0 {
				rctx = ctx
			}
			res, err := in.Receive(rctx, "s", id, nil, nil)
			retries[i] <- result{res, err}
		}()
		testdb.WaitCombiner(t, db, "the queue", func(s racefree.CombineStats) bool { return s.Queued == i+1 })
	}
	before := db.CombineStats()
	waitRow(t, p, `SELECT count(pg_terminate_backend(pid)) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'`)
	<-gate
	for i, retry := range retries {
		waitsForTheStandby(t, p, "the batch of two redeliveries ("+events[i]+")", retry, 1)
	}
	testdb.WaitCombiner(t, db, "the batch of two", func(s racefree.CombineStats) bool { return s.Running == 2 })
	cancel()
	for i, retry := range retries {
		select {
		case r := <-retry:
			t.Fatalf("%s: answered %+v, %v once cancelled, while its batch waits for the standby: want the batch's outcome", events[i], r.res, r.err)
		default:
		}
	}

	c.Standby.Start(t)
	for i, retry := range retries {
		if r := <-retry; r.err != nil || !r.res.Duplicate {
			t.Errorf("%s: the redelivery once the standby is back: %+v, %v, want duplicate (the batch's outcome, cancelled or not)", events[i], r.res, r.err)
		}
	}
	if s := db.CombineStats(); s.Batches-before.Batches != 1 || s.Ops-before.Ops != int64(len(events)) {
		t.Errorf("the redeliveries ran in %d batches of %d operations in all, want one of %d", s.Batches-before.Batches, s.Ops-before.Ops, len(events))
	}
	c.Primary.Kill(t)
	c.Promote(t)
	var n int
	if err := c.Primary.DB(t).QueryRow(`SELECT count(*) FROM racefree_inbox WHERE event_id LIKE 'evt-%'`).Scan(&n); err != nil || n != len(events) {
		t.Errorf("after the failover: %d events, %v, want the %d acknowledged as duplicates", n, err, len(events))
	}
}
