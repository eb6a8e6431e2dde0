package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
)

// TestEdgesNotifyIntervalIsPerTenant: Options.NotifyInterval spaces the
// NOTIFYs of one tenant, not of the process: right after tenant acme's
// enqueue notified, an enqueue of tenant globex from the same process
// notifies too, and a relay of another process that LISTENs, polls once
// an hour and makes no follow-up claim delivers each at once.
func TestEdgesNotifyIntervalIsPerTenant(t *testing.T) {
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	producer := testdb.Open(t, d, nil)
	consumer := testdb.Open(t, d, nil)
	o := newOutbox(t, producer, &outbox.Options{NotifyInterval: time.Hour})
	got := idleRelay(t, newOutbox(t, consumer, nil), outbox.RelayOptions{Listen: true, FollowUp: -1})
	// Tenants of this test alone: NOTIFY reaches every session LISTENing
	// on the channel in the database, other tests' relays included.
	suffix := fmt.Sprintf("-%d", time.Now().UnixNano())
	for _, id := range []string{"acme" + suffix, "globex" + suffix} {
		tctx, err := tenant.With(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var msg int64
		err = producer.InTx(ctx, func(tx *sql.Tx) error {
			msg = enqueue(t, tctx, o, tx, outbox.Message{Topic: "t"})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		deliveredWithin(t, got, msg, 20*time.Second, "the first enqueue of tenant "+id+" within the interval")
	}
}

// TestEdgesDeadLetterRepairsWakeTheRelays: a relay that polls once an
// hour delivers at once what a repair of the dead letters makes
// deliverable: the message Redrive brings back, and the next message of
// an ordered key once Discard removes the dead one that blocked it.
func TestEdgesDeadLetterRepairsWakeTheRelays(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{NoNotify: true})
		kill := func(m outbox.Message) int64 {
			t.Helper()
			id := enqueue(t, ctx, o, db, m)
			ds := claim(t, ctx, o, "w", 1, time.Minute)
			if len(ds) != 1 || ds[0].ID != id {
				t.Fatalf("claimed %v, want [%d]", ids(ds), id)
			}
			if out, err := o.Fail(ctx, ds[0], outbox.Permanent(nil)); err != nil || !out.Dead {
				t.Fatalf("Fail: %+v, %v", out, err)
			}
			return id
		}
		lone := kill(outbox.Message{Topic: "t"})
		first := kill(outbox.Message{Topic: "t", Key: "k", Ordered: true})
		next := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", Key: "k", Ordered: true})

		// The relay's first poll finds nothing it may deliver.
		got := idleRelay(t, o, outbox.RelayOptions{})

		if got, err := o.Redrive(ctx, db, outbox.Filter{IDs: []int64{lone}}); err != nil || len(got) != 1 {
			t.Fatalf("Redrive: %v, %v", got, err)
		}
		deliveredWithin(t, got, lone, 20*time.Second, "a redriven message")
		if got, err := o.Discard(ctx, db, outbox.Filter{IDs: []int64{first}}); err != nil || len(got) != 1 {
			t.Fatalf("Discard: %v, %v", got, err)
		}
		deliveredWithin(t, got, next, 20*time.Second, "the ordered message a discarded one blocked")
	})
}
