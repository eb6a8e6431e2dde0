package reliability

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestDuplicateWaitsForTheSynchronousStandby: the inbox answers
// "duplicate" only about an event that is on the synchronous standby
// (invariant 15), on a primary with a synchronous standby
// (testdb.NewCluster, synchronous_standby_names = '*'), for a delivery
// received alone (with a processing function, in a transaction of its
// own) and for one in a batch of the combiner. A first delivery's COMMIT
// waits for the standby, which is gone; the wait ends without it (the
// backend terminated, as a fast shutdown of an old primary terminates
// every backend), and the event is committed on the primary alone.
//
// The redelivery must not be told "duplicate" then: a sender stops
// sending an event it is told was processed, and a failover at that
// moment loses it. Its transaction locks the recorded event
// (inbox/sql/postgres/durable.sql), so its COMMIT waits for the standby
// past the event's: it is seen waiting (SyncRep) instead of answering.
// Once the standby is back it answers duplicate, and after a failover to
// that standby both events are there. Without the lock (mutants 932,
// 933, 934) the redelivery answers duplicate at once.
func TestDuplicateWaitsForTheSynchronousStandby(t *testing.T) {
	c := testdb.NewCluster(t)
	p := c.Primary.DB(t)
	testdb.ExecAll(t, p, `ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`)
	waitRow(t, p, `SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'`)
	paths := []struct {
		name string
		in   *inbox.Inbox
		fn   func(*sql.Tx) error
	}{
		{"alone", newInbox(t, c.Primary.Open(t, nil)), func(*sql.Tx) error { return nil }},
		{"combined", newInbox(t, c.Primary.Open(t, &racefree.Config{Combine: racefree.CombineOn})), nil},
	}
	// Record the tenant, so that no registration writes in the transactions
	// below.
	for _, path := range paths {
		if _, err := path.in.Receive(context.Background(), "s", "warm-"+path.name, nil, path.fn); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitStreaming(t)
	c.Standby.Stop(t)

	receive := func(path int) <-chan result {
		return deliver(paths[path].in, "evt-"+paths[path].name, paths[path].fn)
	}
	for i := range paths {
		first := receive(i)
		// End the first delivery's wait for the standby until its event is
		// committed on the primary alone.
		waitRow(t, p, `SELECT count(pg_terminate_backend(pid)) >= 0
			AND EXISTS (SELECT 1 FROM racefree_inbox WHERE event_id = 'evt-`+paths[i].name+`')
			FROM pg_stat_activity WHERE wait_event = 'SyncRep'`)
		if r := <-first; r.err == nil {
			t.Fatalf("%s: the first delivery, whose commit's wait was ended: %+v, want an error", paths[i].name, r.res)
		}
	}

	var retries []<-chan result
	for i := range paths {
		retry := receive(i)
		retries = append(retries, retry)
		// The redelivery must wait for the standby, not answer.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			select {
			case r := <-retry:
				t.Fatalf("%s: the redelivery answered %+v, %v while no standby has the event: a failover now loses what it acknowledges", paths[i].name, r.res, r.err)
			default:
			}
			var waiting bool
			if err := p.QueryRow(`SELECT count(*) = $1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'`, i+1).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: waited a minute for the redelivery to answer or wait for the standby", paths[i].name)
			}
		}
	}

	c.Standby.Start(t)
	for i, retry := range retries {
		if r := <-retry; r.err != nil || !r.res.Duplicate {
			t.Errorf("%s: the redelivery once the standby is back: %+v, %v, want duplicate", paths[i].name, r.res, r.err)
		}
	}
	c.Primary.Kill(t)
	c.Promote(t)
	var n int
	if err := c.Primary.DB(t).QueryRow(`SELECT count(*) FROM racefree_inbox WHERE event_id LIKE 'evt-%'`).Scan(&n); err != nil || n != len(paths) {
		t.Errorf("after the failover: %d events, %v, want the %d acknowledged as duplicates", n, err, len(paths))
	}
}

func newInbox(t testing.TB, db *racefree.DB) *inbox.Inbox {
	t.Helper()
	in, err := inbox.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestDuplicatesInABatchWaitForTheSynchronousStandby: deliveries that a
// batch of the combiner answers "duplicate" together (two or more: one
// statement over arrays, inbox/sql/postgres/durable_many.sql) are
// answered only once the synchronous standby has their events (invariant
// 15), as a delivery alone is (TestDuplicateWaitsForTheSynchronousStandby).
// Three events are committed on the primary alone (their commits' waits
// for the gone standby ended by terminated backends). A delivery of a
// fourth holds a batch in flight (its commit waits for the standby) while
// the redeliveries of the three queue behind it; its wait is ended too,
// and the three run as one batch. That batch must wait for the standby,
// not answer: once the standby is back all three are duplicates, the
// batch was one of three, and after a failover to that standby the
// events are there. Without the lock in durable_many (mutant 981) the
// batch answers duplicate at once.
func TestDuplicatesInABatchWaitForTheSynchronousStandby(t *testing.T) {
	c, p := syncCluster(t)
	db := c.Primary.Open(t, &racefree.Config{Combine: racefree.CombineOn})
	in := newInbox(t, db)
	// Record the tenant and the source's counter, so that no registration
	// writes in the batches below.
	if _, err := in.Receive(context.Background(), "s", "warm", nil, nil); err != nil {
		t.Fatal(err)
	}
	c.WaitStreaming(t)
	c.Standby.Stop(t)

	receive := func(id string) <-chan result { return deliver(in, id, nil) }
	events := []string{"evt-1", "evt-2", "evt-3"}
	var firsts []<-chan result
	for _, id := range events {
		firsts = append(firsts, receive(id))
	}
	// End the first deliveries' waits for the standby until their events
	// are committed on the primary alone.
	waitRow(t, p, `SELECT count(pg_terminate_backend(pid)) >= 0
		AND (SELECT count(*) FROM racefree_inbox WHERE event_id LIKE 'evt-%') = 3
		FROM pg_stat_activity WHERE wait_event = 'SyncRep'`)
	for _, first := range firsts {
		<-first // an error, or new: the commit's wait was ended
	}

	gate := receive("gate")
	waitsForTheStandby(t, p, "the gate", gate, 1)
	testdb.WaitCombiner(t, db, "the gate's batch", func(s racefree.CombineStats) bool { return s.Running == 1 })
	var retries []<-chan result
	for i, id := range events {
		retries = append(retries, receive(id))
		testdb.WaitCombiner(t, db, "the queue", func(s racefree.CombineStats) bool { return s.Queued == i+1 })
	}
	before := db.CombineStats()
	// End the gate's wait: the three run as one batch.
	waitRow(t, p, `SELECT count(pg_terminate_backend(pid)) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'`)
	<-gate
	for i, retry := range retries {
		waitsForTheStandby(t, p, "the batch of redeliveries ("+events[i]+")", retry, 1)
	}

	c.Standby.Start(t)
	for i, retry := range retries {
		if r := <-retry; r.err != nil || !r.res.Duplicate {
			t.Errorf("%s: the redelivery once the standby is back: %+v, %v, want duplicate", events[i], r.res, r.err)
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

// result is the outcome of one delivery.
type result struct {
	res inbox.Result
	err error
}

// deliver receives event id from source "s" on in, with fn, in the
// background, within a minute.
func deliver(in *inbox.Inbox, id string, fn func(*sql.Tx) error) <-chan result {
	out := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := in.Receive(ctx, "s", id, nil, fn)
		out <- result{res, err}
	}()
	return out
}
