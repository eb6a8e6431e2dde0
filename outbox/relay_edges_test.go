package outbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
)

// enqueueTogether enqueues one message per topic in one transaction and
// returns their ids: one wake-up for the relays (on PostgreSQL one
// NOTIFY, to relays that Listen).
func enqueueTogether(t *testing.T, o *outbox.Outbox, db *racefree.DB, topics ...string) []int64 {
	t.Helper()
	ctx := context.Background()
	var out []int64
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		for _, topic := range topics {
			out = append(out, enqueue(t, ctx, o, tx, outbox.Message{Topic: topic}))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEdgesARelayLeasesOnlyWhatItCanRun: a relay claims no more messages
// than it has free handler slots, so no message waits leased (its lease
// running out) for a slot: with Concurrency 2 and one slot busy, of two
// messages that come together one is claimed and the other stays ready.
func TestEdgesARelayLeasesOnlyWhatItCanRun(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{NotifyInterval: -1})
		listen := db.Engine() == racefree.Postgres
		running := make(chan int64, 10)
		release := make(chan struct{})
		r, err := o.NewRelay(func(_ context.Context, d *outbox.Delivery) error {
			running <- d.ID
			<-release
			return nil
		}, &outbox.RelayOptions{Concurrency: 2, PollInterval: time.Hour, Listen: listen, FollowUp: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(runRelay(t, r))
		if listen {
			<-outbox.Listening(r)
		}
		defer close(release)
		first := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		deliveredWithin(t, running, first, 20*time.Second, "the first message")
		two := enqueueTogether(t, o, db, "t", "t")
		deliveredWithin(t, running, two[0], 20*time.Second, "the first of two, into the free slot")
		if r := get(t, ctx, o, two[1]); r.State != outbox.Ready {
			t.Fatalf("the second of two, with no slot free: %s by %q; want it ready, not leased to wait", r.State, r.LeasedBy)
		}
	})
}

// TestEdgesARelayDrainsWhatOneWakeUpBrings: a relay that polls once an
// hour, with one slot and batches of one, delivers every message of one
// wake-up, claiming again after each full batch instead of waiting for
// its next poll.
func TestEdgesARelayDrainsWhatOneWakeUpBrings(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		o := newOutbox(t, db, &outbox.Options{NotifyInterval: -1})
		got := idleRelay(t, o, outbox.RelayOptions{Concurrency: 1, Batch: 1, Listen: db.Engine() == racefree.Postgres, FollowUp: -1})
		for _, id := range enqueueTogether(t, o, db, "t", "t", "t") {
			deliveredWithin(t, got, id, 20*time.Second, "a message of one wake-up")
		}
	})
}
