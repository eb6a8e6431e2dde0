package outbox_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
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
		enqueue(t, tctx, o, db, outbox.Message{Topic: "t"})
		// The promise is about real time: let the gap pass, counted from
		// the first Enqueue's return (its NOTIFY was decided before it;
		// counted from its start, a slow Enqueue would eat the gap).
		first := time.Now()
		for time.Since(first) < c.apart {
			time.Sleep(time.Millisecond)
		}
		enqueue(t, tctx, o, db, outbox.Message{Topic: "t"})
		if got := count(id); got != c.want {
			t.Errorf("NotifyInterval %s: %d NOTIFYs for two enqueues %s apart, want %d", c.name, got, c.apart, c.want)
		}
	}
}

// TestEdgesALostListenerIsReplacedAfterAPauseAndWakesEveryTenant: when
// the connection a relay LISTENs on ends (here its server process is
// terminated), the relay LISTENs again, not at once but after its retry
// pause (100 ms after a connection that listened: a server that drops
// every connection is not called in a loop), and then visits every
// tenant for the notifications it may have missed: a message of another
// pool, enqueued without a NOTIFY before the loss, is delivered, though
// the relay polls once an hour. The loss is reported with the server's
// reason.
func TestEdgesALostListenerIsReplacedAfterAPauseAndWakesEveryTenant(t *testing.T) {
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	app := fmt.Sprintf("rf-listener-%d", time.Now().UnixNano())
	u, err := url.Parse(d)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	consumer := testdb.Open(t, u.String(), nil)
	producer := testdb.Open(t, d, nil)
	logs := &errorsLogged{prefix: "outbox listen:"}
	got := idleRelay(t, newOutbox(t, consumer, nil), outbox.RelayOptions{Listen: true, FollowUp: -1, Logger: slog.New(logs)})

	// The relay's listening session: the one of its pool whose last
	// statement is the LISTEN, and when it ran (the server's clock).
	listener := func() (pid int64, since time.Time, ok bool) {
		err := producer.QueryRowContext(ctx, `SELECT pid, query_start FROM pg_stat_activity
			WHERE application_name = $1 AND query = 'LISTEN ' || $2`, app, outbox.Channel).Scan(&pid, &since)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, time.Time{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return pid, since, true
	}
	var old int64
	waitFor(t, "the relay's listening session", func() bool {
		var ok bool
		old, _, ok = listener()
		return ok
	})

	// A tenant of this test alone: NOTIFY reaches every session LISTENing
	// on the channel in the database, and other tests' enqueues of a
	// tenant of the same name would wake the relay.
	tctx, err := tenant.With(ctx, "lost"+app[len("rf-listener"):])
	if err != nil {
		t.Fatal(err)
	}
	id := enqueue(t, tctx, newOutbox(t, producer, &outbox.Options{NoNotify: true}), producer, outbox.Message{Topic: "t"})
	// When the statement that terminates it began: the session may be
	// gone, and the relay counting its pause, before the statement's own
	// clock_timestamp() is read.
	var lost time.Time
	if err := producer.QueryRowContext(ctx, `SELECT statement_timestamp() FROM pg_terminate_backend($1) AS ok WHERE ok`, old).Scan(&lost); err != nil {
		t.Fatalf("terminate the listening session %d: %v", old, err)
	}
	var again time.Time
	waitFor(t, "a new listening session", func() bool {
		pid, since, ok := listener()
		again = since
		return ok && pid != old
	})
	if pause := again.Sub(lost); pause < 100*time.Millisecond {
		t.Errorf("listened again %s after the loss, want a pause of at least 100ms", pause)
	}
	deliveredWithin(t, got, id, 20*time.Second, "a message enqueued without NOTIFY before the listener was lost")
	// The loss is reported with the server's reason, not as a connection
	// merely discarded.
	said := logs.said()
	if !slices.ContainsFunc(said, func(s string) bool { return strings.Contains(s, "57P01") }) {
		t.Errorf("the relay reported %q; want the loss's reason (SQLSTATE 57P01, terminated by the administrator)", said)
	}
}

// TestEdgesARefusedListenerIsRetriedWithADoublingPause: while the server
// refuses the relay's connections (its role may not log in), the relay
// tries to LISTEN again after a pause that starts at 100 ms and doubles
// (not in a loop), and it listens once the server lets it in.
func TestEdgesARefusedListenerIsRetriedWithADoublingPause(t *testing.T) {
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	newOutbox(t, owner, nil) // migrated, by the owner
	app := testdb.App(t, owner, d)
	role := testdb.Strings(t, app, `SELECT current_user::text`)[0]
	o := newOutbox(t, app, nil)
	testdb.ExecAll(t, owner, `ALTER ROLE `+role+` NOLOGIN`)
	if _, err := owner.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, role); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the role's sessions to end", func() bool {
		return testdb.Strings(t, owner, `SELECT pid::text FROM pg_stat_activity WHERE usename = $1`, role) == nil
	})

	logs := &errorsLogged{prefix: "outbox listen:"}
	r, err := o.NewRelay(func(context.Context, *outbox.Delivery) error { return nil },
		&outbox.RelayOptions{PollInterval: time.Hour, Listen: true, FollowUp: -1, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(runRelay(t, r))
	waitFor(t, "three refused attempts to listen", func() bool { return len(logs.seen()) >= 3 })
	seen := logs.seen()
	for i, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond} {
		if gap := seen[i+1].Sub(seen[i]); gap < want {
			t.Errorf("attempt %d came %s after attempt %d, want a pause of at least %s", i+2, gap, i+1, want)
		}
	}
	testdb.ExecAll(t, owner, `ALTER ROLE `+role+` LOGIN`)
	select {
	case <-outbox.Listening(r):
	case <-time.After(time.Minute):
		t.Fatal("the relay did not listen within a minute of the server letting it in")
	}
}

// TestEdgesAWakeUpGoesToARelayThatServesIt: an in-process wake-up goes,
// in turn, only to the relays that serve the message's topic
// (RelayOptions.Topics) and tenant (RelayOptions.Tenants): among three
// relays that poll once an hour, one of another topic and one of another
// tenant, three messages enqueued one after the other are each delivered
// at once by the one relay that serves them, never left to its poll.
func TestEdgesAWakeUpGoesToARelayThatServesIt(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		o := newOutbox(t, db, &outbox.Options{NoNotify: true})
		acme, err := tenant.With(context.Background(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		idleRelay(t, o, outbox.RelayOptions{Worker: "other-topic", Topics: []string{"a"}})
		idleRelay(t, o, outbox.RelayOptions{Worker: "other-tenant", Topics: []string{"b"}, Tenants: []string{"globex"}})
		got := idleRelay(t, o, outbox.RelayOptions{Worker: "serves", Topics: []string{"b"}, Tenants: []string{"acme"}})
		for i := range 3 {
			id := enqueue(t, acme, o, db, outbox.Message{Topic: "b"})
			deliveredWithin(t, got, id, 20*time.Second, fmt.Sprintf("message %d of topic b for acme", i+1))
		}
	})
}

// TestEdgesAnEnqueueRetriedAfterADeadlockStillNotifies: an Enqueue whose
// transaction PostgreSQL aborts after the statement that NOTIFYs was
// chosen (a deadlock, SQLSTATE 40P01, which InTx runs again) still
// NOTIFYs when its retry commits: the choice is made once per Enqueue, so
// the aborted attempt, whose NOTIFY was never sent, does not count as the
// tenant's NOTIFY of the interval (an hour here) and leave the message to
// the relays' polls. The deadlock: the test's transaction holds a SHARE
// lock on the outbox table, which the application role's ordered Enqueue
// waits for after taking its key's advisory lock; the test's transaction
// then waits for that advisory lock. The Enqueue's session detects the
// cycle (its deadlock_timeout, 5 s, is the shorter: the test's session
// must wait within it, and its own is a minute) and is the one aborted.
func TestEdgesAnEnqueueRetriedAfterADeadlockStillNotifies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	count := notifications(t, owner)
	appDSN := testdb.AppDSN(t, owner, d)
	u, err := url.Parse(appDSN)
	if err != nil {
		t.Fatal(err)
	}
	testdb.ExecAll(t, owner.SQL(), `ALTER ROLE `+u.User.Username()+` SET deadlock_timeout = '5s'`)
	app, err := dsn.Open(ctx, appDSN, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	o := newOutbox(t, app, &outbox.Options{NotifyInterval: time.Hour})
	id := fmt.Sprintf("retried-%d", time.Now().UnixNano())
	tctx, err := tenant.With(ctx, id)
	if err != nil {
		t.Fatal(err)
	}

	blocker, err := owner.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback() }()
	if _, err := blocker.Exec(`SET LOCAL deadlock_timeout = '1min'`); err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(`LOCK TABLE racefree_outbox IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	enqueued := make(chan error, 1)
	go func() {
		_, err := o.Enqueue(tctx, app, outbox.Message{Topic: "t", Key: "k", Ordered: true})
		enqueued <- err
	}()
	waitFor(t, "the Enqueue to wait for the table's lock", func() bool {
		var n int
		err := owner.SQL().QueryRow(`SELECT count(*) FROM pg_locks WHERE relation = 'racefree_outbox'::regclass AND NOT granted`).Scan(&n)
		return err == nil && n > 0
	})
	// Blocks until the Enqueue's attempt is aborted and lets go of the key.
	if _, err := blocker.Exec(`SELECT pg_advisory_xact_lock(1919287315, hashtext($1 || chr(31) || 't' || chr(31) || 'k'))`, id); err != nil {
		t.Fatal(err)
	}
	if err := blocker.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-enqueued; err != nil {
		t.Fatalf("the Enqueue retried after a deadlock: %v", err)
	}
	if got := count(id); got != 1 {
		t.Fatalf("%d NOTIFYs for an Enqueue retried after a deadlock, want 1", got)
	}
}
