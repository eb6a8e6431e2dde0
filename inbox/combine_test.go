package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestABatchOfDeliveriesNumbersEachCallersEvent queues deliveries without
// a processing function behind a batch held in flight, so that they form
// known batches, and checks what each caller gets: the events of one
// source share a batch and are numbered on from the source's counter in
// the batch's order (the order of the event IDs), the events of another
// source are counted apart (one with no payload, which stays none), a
// redelivery of a committed event is a duplicate, and a second delivery
// of an event queued in the same batch's wait runs after it, as its
// duplicate: on PostgreSQL in a batch of its own (a batch holds each key
// once), on SQLite in the same batch, right after it; the duplicates move
// no counter, so the next event is numbered on without a gap. No batch
// fails, so every caller's outcome is the batch's, not one it got alone.
// On PostgreSQL the batch of six runs as one statement over arrays per
// form (receive_many, number_many); on SQLite the batch of seven as its
// statements one after the other.
func TestABatchOfDeliveriesNumbersEachCallersEvent(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		in, err := inbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		// receive delivers body, or no payload at all when body is empty.
		receive := func(source, id, body string) inbox.Result {
			t.Helper()
			var payload []byte
			if body != "" {
				payload = []byte(body)
			}
			res, err := in.Receive(ctx, source, id, payload, nil)
			if err != nil {
				t.Fatalf("receive %s/%s: %v", source, id, err)
			}
			return res
		}
		// Alone (the first call registers the tenant): s's d0 and t's t0
		// are number 1 of their source.
		for _, d := range [][2]string{{"s", "d0"}, {"t", "t0"}} {
			if res := receive(d[0], d[1], d[0]+"/"+d[1]); res.Duplicate || res.Seq != 1 {
				t.Fatalf("%s/%s: %+v, want new with seq 1", d[0], d[1], res)
			}
		}

		// The deliveries below queue behind the gate's batch.
		before := db.CombineStats()
		open := gate(t, db, in)

		// The second delivery of e1 comes with another body, as from a
		// sender that stamps each attempt: it is the same event.
		deliveries := [][3]string{
			{"s", "e3", "s/e3"}, {"s", "e1", "s/e1"}, {"s", "d0", "s/d0 again"}, {"t", "x1", ""},
			{"s", "e2", "s/e2"}, {"s", "e1", "s/e1 again"}, {"s", "e0", "s/e0"},
		}
		results := make([]inbox.Result, len(deliveries))
		var wg sync.WaitGroup
		for i, d := range deliveries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = receive(d[0], d[1], d[2])
			}()
			testdb.WaitCombiner(t, db, "the queue", func(s racefree.CombineStats) bool { return s.Queued == i+1 })
		}
		open()
		wg.Wait()

		// One batch of six in the order of their keys (d0, e0, e1, e2, e3
		// of s, then x1 of t), then the second e1 alone; on SQLite one
		// batch of seven, the second e1 right after the first.
		want := []inbox.Result{{Seq: 5}, {Seq: 3}, {Duplicate: true}, {Seq: 2}, {Seq: 4}, {Duplicate: true}, {Seq: 2}}
		for i, d := range deliveries {
			if results[i] != want[i] {
				t.Errorf("delivery %d, %s/%s: %+v, want %+v", i, d[0], d[1], results[i], want[i])
			}
		}
		s := db.CombineStats()
		batches, largest, shape := int64(4), 6, "the gate's two batches of one, one of six and one of one"
		if db.Engine() == racefree.SQLite {
			batches, largest, shape = 3, 7, "the gate's two batches of one and one of seven"
		}
		if s.Failed != before.Failed || s.Batches != before.Batches+batches || s.Ops != before.Ops+9 || s.MaxBatch != largest {
			t.Errorf("combiner %+v after %+v: want %s, none failed", s, before, shape)
		}
		for source, want := range map[string][]string{
			"s": {"1 d0 s/d0", "2 e0 s/e0", "3 e1 s/e1", "4 e2 s/e2", "5 e3 s/e3"},
			"t": {"1 t0 t/t0", "2 x1 NULL"},
		} {
			events, err := in.List(ctx, source, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range events {
				payload := string(e.Payload)
				if e.Payload == nil {
					payload = "NULL"
				}
				got = append(got, fmt.Sprintf("%d %s %s", e.Seq, e.ID, payload))
			}
			if !equal(got, want) {
				t.Errorf("List(%s): %q, want %q", source, got, want)
			}
		}
		// The batch's duplicate (d0 again) moved no counter: the next event
		// of s is number 6, with no gap after the batch's five.
		if res := receive("s", "e4", "s/e4"); res.Duplicate || res.Seq != 6 {
			t.Errorf("s/e4 after the batch: %+v, want new with seq 6 (a gap: the batch advanced the counter by a duplicate)", res)
		}
	})
}

// TestCombinedDeliveriesOfOneSource races 16 workers delivering the
// events of one source, most without a processing function (through the
// combiner, in batches of many events of the source), some with one
// (alone, sharing the source's counter), each event twice and some events
// committed before: every event is recorded once, by exactly one
// delivery, which gets the event's arrival number; the others are
// duplicates. The numbers are 1..N with no gap, and a reader paging with
// "after" meanwhile never skips one.
func TestCombinedDeliveriesOfOneSource(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		const committed, events, workers = 5, 60, 16
		for i := range committed {
			if res, err := b.in.Receive(ctx, "s", fmt.Sprintf("pre-%d", i), nil, nil); err != nil || res.Seq != int64(i+1) {
				t.Fatalf("pre-%d: %+v, %v; want seq %d", i, res, err, i+1)
			}
		}
		type delivery struct {
			id string
			fn bool // with a processing function
		}
		var all []delivery
		for round := range 2 {
			for i := range events {
				all = append(all, delivery{id: fmt.Sprintf("evt-%02d", (i*7+round*13)%events), fn: (i+round)%5 == 0})
			}
			for i := range committed {
				all = append(all, delivery{id: fmt.Sprintf("pre-%d", i)})
			}
		}
		type outcome struct {
			id  string
			res inbox.Result
		}
		work := make(chan delivery)
		out := make(chan outcome, len(all))
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for d := range work {
					var fn func(*sql.Tx) error
					if d.fn {
						fn = b.effect(ctx, d.id)
					}
					res, err := b.in.Receive(ctx, "s", d.id, []byte(d.id), fn)
					if err != nil {
						t.Errorf("receive %s: %v", d.id, err)
						continue
					}
					out <- outcome{d.id, res}
				}
			}()
		}
		done := make(chan struct{})
		go func() {
			for _, d := range all {
				work <- d
			}
			close(work)
			wg.Wait()
			close(done)
		}()
		listed := readInOrder(t, b.in, "s", done)
		close(out)
		if t.Failed() {
			return
		}
		if got, want := len(listed), committed+events; got != want {
			t.Fatalf("the reader saw %d events, want %d", got, want)
		}
		recorded := map[string]int64{}
		for o := range out {
			if o.res.Duplicate {
				continue
			}
			if s, twice := recorded[o.id]; twice {
				t.Errorf("%s recorded twice, with seq %d and %d", o.id, s, o.res.Seq)
			}
			recorded[o.id] = o.res.Seq
			if o.res.Seq != listed[o.id] {
				t.Errorf("%s: its delivery got seq %d, List has %d", o.id, o.res.Seq, listed[o.id])
			}
		}
		if got, want := len(recorded), events; got != want {
			t.Errorf("%d events recorded by this run's deliveries, want %d", got, want)
		}
		for id, n := range b.effects(t) {
			if n != 1 {
				t.Errorf("%s processed %d times, want once", id, n)
			}
		}
		if got, want := b.rows(t), committed+events; got != want {
			t.Errorf("%d inbox rows, want %d", got, want)
		}
		if s := db.CombineStats(); s.Ops == 0 || s.Failed != 0 {
			t.Errorf("combiner %+v: want deliveries through it, and no batch failed (each would have run alone)", s)
		}
	})
}

// TestACombinedDeliveryOnAPoolOfOneConnection delivers events through the
// combiner on a pool of one connection, where a batch's transaction holds
// the only connection: a batch that needed a second one (to prepare a
// statement for the pool) would wait for itself for ever.
func TestACombinedDeliveryOnAPoolOfOneConnection(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, MaxOpenConns: 1}, func(t *testing.T, db *racefree.DB) {
		in, err := inbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			for i := range 3 {
				res, err := in.Receive(context.Background(), "src", fmt.Sprint("e", i), nil, nil)
				if err == nil && res.Seq != int64(i+1) {
					err = fmt.Errorf("delivery %d numbered %d", i, res.Seq)
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("three deliveries through the combiner did not finish in 30 s on a pool of one connection: the batch waits for a connection its own transaction holds")
		}
		if s := db.CombineStats(); s.Batches == 0 {
			t.Fatal("no delivery went through the combiner")
		}
	})
}

// gate holds the combiner of db (Config.CombineBatches 1) busy with a
// batch in flight, so that the deliveries started next queue behind it
// (testdb.WaitCombiner tells when they are queued): it records the event
// g0 of the source "gate" alone, then begins a transaction that holds
// that source's counter row (on SQLite, the write lock) and starts the
// delivery of g1, whose batch waits for it. open ends the transaction and
// waits for g1, which must be the gate's second event; the queued
// deliveries then run.
func gate(t *testing.T, db *racefree.DB, in *inbox.Inbox) (open func()) {
	t.Helper()
	ctx := context.Background()
	if res, err := in.Receive(ctx, "gate", "g0", []byte("gate/g0"), nil); err != nil || res.Duplicate || res.Seq != 1 {
		t.Fatalf("gate/g0: %+v, %v; want new with seq 1", res, err)
	}
	lock, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback() })
	if _, err := lock.ExecContext(ctx, `UPDATE racefree_inbox_sources SET last_seq = last_seq WHERE source = 'gate'`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		res, err := in.Receive(ctx, "gate", "g1", []byte("gate/g1"), nil)
		if err == nil && (res.Duplicate || res.Seq != 2) {
			err = fmt.Errorf("gate/g1: %+v, want new with seq 2", res)
		}
		done <- err
	}()
	testdb.WaitCombiner(t, db, "the gate's batch", func(s racefree.CombineStats) bool { return s.Running == 1 })
	return func() {
		t.Helper()
		if err := lock.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
