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
	h, got := recorder()
	r, err := newOutbox(t, consumer, nil).NewRelay(h, &outbox.RelayOptions{PollInterval: time.Hour, Listen: true, FollowUp: -1})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRelay(t, r)
	defer stop()
	<-outbox.Listening(r)
	waitFor(t, "the relay's first poll", func() bool { return r.Stats().Polls > 0 })
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
