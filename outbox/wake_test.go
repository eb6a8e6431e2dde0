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

// deliveredWithin waits for a delivery on got, failing after d.
func deliveredWithin(t *testing.T, got <-chan int64, want int64, d time.Duration, what string) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case id := <-got:
		if id != want {
			t.Fatalf("%s: delivered %d, want %d", what, id, want)
		}
	case <-timer.C:
		t.Fatalf("%s: not delivered within %s (the relay was not woken)", what, d)
	}
}

// idleRelay runs a relay of o with opts that polls once an hour (it stops
// when the test ends), waits for it to listen (with opts.Listen) and for
// its first poll, and returns the ids it delivers: from then on only
// wake-ups deliver.
func idleRelay(t *testing.T, o *outbox.Outbox, opts outbox.RelayOptions) <-chan int64 {
	t.Helper()
	got := make(chan int64, 100)
	opts.PollInterval = time.Hour
	r, err := o.NewRelay(func(_ context.Context, d *outbox.Delivery) error {
		got <- d.ID
		return nil
	}, &opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(runRelay(t, r))
	if opts.Listen {
		<-outbox.Listening(r)
	}
	waitFor(t, "the relay's first poll", func() bool { return r.Stats().Polls > 0 })
	return got
}

// TestRelaysAreWokenInProcess: a relay that polls once an hour delivers a
// message as soon as it commits, when it was enqueued through the same
// *racefree.DB: in the caller's transaction on SQLite (the relay's claim
// waits for the enqueuing transaction's write lock), outside a
// transaction on both engines.
func TestRelaysAreWokenInProcess(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{NoNotify: true})
		got := idleRelay(t, o, outbox.RelayOptions{})
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		deliveredWithin(t, got, id, 20*time.Second, "enqueued on the pool")
		if db.Engine() == racefree.SQLite {
			var id int64
			err := db.InTx(ctx, func(tx *sql.Tx) error {
				id = enqueue(t, ctx, o, tx, outbox.Message{Topic: "t"})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			deliveredWithin(t, got, id, 20*time.Second, "enqueued in a transaction")
		}
	})
}

// TestPostgresRelaysAreWokenByNotify: a relay of another process (another
// pool) that LISTENs and polls once an hour delivers a message as soon as
// the transaction that enqueued it commits; a message whose enqueue
// skipped its NOTIFY (Options.NotifyInterval) is found by the follow-up
// claim.
func TestPostgresRelaysAreWokenByNotify(t *testing.T) {
	ctx := context.Background()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	producer := testdb.Open(t, dsn, nil)
	consumer := testdb.Open(t, dsn, nil)
	o := newOutbox(t, producer, &outbox.Options{NotifyInterval: time.Hour})
	got := idleRelay(t, newOutbox(t, consumer, nil), outbox.RelayOptions{Listen: true, FollowUp: 500 * time.Millisecond})
	var id int64
	err := producer.InTx(ctx, func(tx *sql.Tx) error {
		id = enqueue(t, ctx, o, tx, outbox.Message{Topic: "t"})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	deliveredWithin(t, got, id, 20*time.Second, "enqueued in another process's transaction")
	// Two more at once: the first notifies, the second does not (one
	// NOTIFY an hour), and the follow-up claim finds it.
	var quiet int64
	for i := range 2 {
		err = producer.InTx(ctx, func(tx *sql.Tx) error {
			id := enqueue(t, ctx, o, tx, outbox.Message{Topic: "t"})
			if i == 1 {
				quiet = id
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int64]bool{}
	for len(seen) < 2 {
		select {
		case id := <-got:
			seen[id] = true
		case <-time.After(20 * time.Second):
			t.Fatalf("delivered %v; the message enqueued without a NOTIFY (%d) was not found by the follow-up", seen, quiet)
		}
	}
}
