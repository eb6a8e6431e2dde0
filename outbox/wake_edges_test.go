package outbox_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

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

// notifications LISTENs on outbox.Channel on a connection of its own to
// db's database. The func it returns sends a marker NOTIFY and counts the
// notifications for tenant received before it: PostgreSQL delivers them
// in commit order, so every NOTIFY committed before the marker's is
// counted (other tests' tenants, which share the database, are not).
func notifications(t *testing.T, db *racefree.DB) func(tenant string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := db.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw := func(f func(ctx context.Context, pc *stdlib.Conn) error) {
		t.Helper()
		if err := conn.Raw(func(dc any) error { return f(ctx, dc.(*stdlib.Conn)) }); err != nil {
			t.Fatal(err)
		}
	}
	raw(func(ctx context.Context, pc *stdlib.Conn) error {
		_, err := pc.Conn().Exec(ctx, "LISTEN "+outbox.Channel)
		return err
	})
	t.Cleanup(func() {
		// The connection listens: never hand it back to the pool.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
	})
	return func(tenant string) int {
		t.Helper()
		marker := fmt.Sprintf("marker-%d", time.Now().UnixNano())
		if _, err := db.ExecContext(ctx, "SELECT pg_notify($1, $2)", outbox.Channel, marker); err != nil {
			t.Fatal(err)
		}
		n := 0
		raw(func(ctx context.Context, pc *stdlib.Conn) error {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			for {
				got, err := pc.Conn().WaitForNotification(ctx)
				switch {
				case err != nil:
					return err
				case got.Payload == marker:
					return nil
				case got.Payload == tenant:
					n++
				}
			}
		})
		return n
	}
}

// TestEdgesNotifyIntervalSpacesAndDefaults: Options.NotifyInterval holds
// for as long as it says (an hour: one NOTIFY for a tenant's enqueues
// 50ms apart), defaults to DefaultNotifyInterval when 0 (enqueues further
// apart than it both notify), and a negative one notifies every enqueue.
func TestEdgesNotifyIntervalSpacesAndDefaults(t *testing.T) {
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	count := notifications(t, db)
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		interval time.Duration
		apart    time.Duration
		want     int
	}{
		{"an hour", time.Hour, 50 * time.Millisecond, 1},
		{"the default", 0, 2 * outbox.DefaultNotifyInterval, 2},
		{"negative", -1, 0, 2},
	} {
		o := newOutbox(t, db, &outbox.Options{NotifyInterval: c.interval})
		id := fmt.Sprintf("notify-%d", time.Now().UnixNano())
		tctx, err := tenant.With(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		first := time.Now()
		enqueue(t, tctx, o, db, outbox.Message{Topic: "t"})
		// The promise is about real time: let the gap pass.
		for time.Since(first) < c.apart {
			time.Sleep(time.Millisecond)
		}
		enqueue(t, tctx, o, db, outbox.Message{Topic: "t"})
		if got := count(id); got != c.want {
			t.Errorf("NotifyInterval %s: %d NOTIFYs for two enqueues %s apart, want %d", c.name, got, c.apart, c.want)
		}
	}
}
