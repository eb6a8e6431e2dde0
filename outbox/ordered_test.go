package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
)

// TestPerKeyOrdering: only the oldest undelivered message of an ordered
// key is claimable; a retrying or dead head blocks its key (not other
// keys, nor unordered messages) until it is delivered, redriven or
// discarded.
func TestPerKeyOrdering(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{OrderedTopics: []string{"orders"}, Backoff: fixedBackoff})
		m1 := enqueue(t, ctx, o, db, outbox.Message{Topic: "orders", Key: "k1"})
		m2 := enqueue(t, ctx, o, db, outbox.Message{Topic: "orders", Key: "k1"})
		m3 := enqueue(t, ctx, o, db, outbox.Message{Topic: "orders", Key: "k1"})
		n1 := enqueue(t, ctx, o, db, outbox.Message{Topic: "orders", Key: "k2"})
		u1 := enqueue(t, ctx, o, db, outbox.Message{Topic: "events", Key: "k1"})
		u2 := enqueue(t, ctx, o, db, outbox.Message{Topic: "events", Key: "k1"})
		x1 := enqueue(t, ctx, o, db, outbox.Message{Topic: "events", Key: "k3", Ordered: true})
		x2 := enqueue(t, ctx, o, db, outbox.Message{Topic: "events", Key: "k3", Ordered: true})
		expect := func(step string, want ...int64) []*outbox.Delivery {
			t.Helper()
			ds := claim(t, ctx, o, "w", 100, time.Hour)
			if fmt.Sprint(ids(ds)) != fmt.Sprint(want) {
				t.Fatalf("%s: claimed %v, want %v", step, ids(ds), want)
			}
			return ds
		}
		complete := func(ds ...*outbox.Delivery) {
			t.Helper()
			for _, d := range ds {
				if err := o.Complete(ctx, db, d); err != nil {
					t.Fatal(err)
				}
			}
		}
		first := expect("heads of each ordered key, every unordered message", m1, n1, u1, u2, x1)
		complete(first[1:]...)
		if _, err := o.Fail(ctx, first[0], errors.New("transient")); err != nil {
			t.Fatal(err)
		}
		complete(expect("k1's head is retrying: k1 is blocked", x2)...)
		clock.Advance(time.Second)
		ds := expect("k1's head is due again", m1)
		complete(ds...)
		ds = expect("k1 moves on", m2)
		if out, err := o.Fail(ctx, ds[0], outbox.Permanent(errors.New("rejected"))); err != nil || !out.Dead {
			t.Fatalf("%+v, %v", out, err)
		}
		clock.Advance(time.Hour)
		expect("a dead head blocks its key")
		if got, err := o.Redrive(ctx, db, outbox.Filter{IDs: []int64{m2}}); err != nil || len(got) != 1 {
			t.Fatalf("redrive: %v, %v", got, err)
		}
		ds = expect("the redriven head", m2)
		if _, err := o.Fail(ctx, ds[0], outbox.Permanent(errors.New("rejected again"))); err != nil {
			t.Fatal(err)
		}
		expect("dead again: blocked again")
		if got, err := o.Discard(ctx, db, outbox.Filter{IDs: []int64{m2}}); err != nil || len(got) != 1 {
			t.Fatalf("discard: %v, %v", got, err)
		}
		complete(expect("the dead head discarded: the key moves on", m3)...)
		expect("all done")
	})
}

// TestOrderedEnqueuesFollowCommitOrder (PostgreSQL): an ordered enqueue
// waits for another open transaction enqueueing for the same key, so
// that its id, and its turn, come after that transaction's message. (On
// SQLite the enqueuing transaction holds the only write lock anyway.)
func TestOrderedEnqueuesFollowCommitOrder(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	o := newOutbox(t, db, &outbox.Options{OrderedTopics: []string{"orders"}})
	t1, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Rollback()
	first := enqueue(t, ctx, o, t1, outbox.Message{Topic: "orders", Key: "k", Payload: []byte("first")})
	enqueue(t, ctx, o, db, outbox.Message{Topic: "orders", Key: "other"}) // another key does not wait
	type result struct {
		id  int64
		err error
	}
	second := make(chan result, 1)
	go func() {
		id, err := o.Enqueue(ctx, db, outbox.Message{Topic: "orders", Key: "k", Payload: []byte("second")})
		second <- result{id, err}
	}()
	// Wait until the second enqueue waits for the first's lock, failing at
	// once if it finishes instead.
	for waiting := false; !waiting; {
		select {
		case r := <-second:
			t.Fatalf("the second enqueue of the key finished (%d, %v) while the first's transaction was open", r.id, r.err)
		default:
		}
		err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = 1919287315)`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-second
	if r.err != nil || r.id <= first {
		t.Fatalf("second enqueue: %d, %v; want an id above %d", r.id, r.err, first)
	}
	var got []string
	for len(got) < 2 {
		ds := claim(t, ctx, o, "w", 10, time.Minute)
		for _, d := range ds {
			if d.Key == "k" {
				got = append(got, string(d.Payload))
			}
			if err := o.Complete(ctx, db, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	if fmt.Sprint(got) != "[first second]" {
		t.Fatalf("delivered %v", got)
	}
}

// TestDeadLetters: list by filter and page, redrive and discard by id or
// filter; only dead messages are ever redriven or discarded.
func TestDeadLetters(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		kill := func(topic, key string) int64 {
			t.Helper()
			id := enqueue(t, ctx, o, db, outbox.Message{Topic: topic, Key: key})
			ds := claim(t, ctx, o, "w", 1, time.Hour)
			if len(ds) != 1 || ds[0].ID != id {
				t.Fatalf("claimed %v", ids(ds))
			}
			if _, err := o.Fail(ctx, ds[0], outbox.Permanent(fmt.Errorf("bad %s/%s", topic, key))); err != nil {
				t.Fatal(err)
			}
			return id
		}
		a1, a2, b1 := kill("a", "x"), kill("a", "y"), kill("b", "x")
		delivered := enqueue(t, ctx, o, db, outbox.Message{Topic: "a", Key: "x"})
		complete := claim(t, ctx, o, "w", 1, time.Hour)
		if err := o.Complete(ctx, db, complete[0]); err != nil {
			t.Fatal(err)
		}
		ready := enqueue(t, ctx, o, db, outbox.Message{Topic: "a", Key: "x", NotBefore: t0.Add(time.Hour)})
		list := func(f outbox.Filter, after int64, limit int) string {
			t.Helper()
			rs, err := o.Dead(ctx, db, f, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]int64, len(rs))
			for i, r := range rs {
				out[i] = r.ID
				if r.State != outbox.Dead || r.LastError == "" {
					t.Errorf("listed %+v", r)
				}
			}
			return fmt.Sprint(out)
		}
		for _, c := range []struct {
			f     outbox.Filter
			after int64
			limit int
			want  []int64
		}{
			{outbox.Filter{}, 0, 10, []int64{a1, a2, b1}},
			{outbox.Filter{}, 0, 2, []int64{a1, a2}},
			{outbox.Filter{}, a2, 2, []int64{b1}},
			{outbox.Filter{Topic: "a"}, 0, 10, []int64{a1, a2}},
			{outbox.Filter{Key: "x"}, 0, 10, []int64{a1, b1}},
			{outbox.Filter{Topic: "a", Key: "x"}, 0, 10, []int64{a1}},
			{outbox.Filter{IDs: []int64{b1, delivered, ready}}, 0, 10, []int64{b1}},
		} {
			if got := list(c.f, c.after, c.limit); got != fmt.Sprint(c.want) {
				t.Errorf("Dead(%+v, %d, %d) = %s, want %v", c.f, c.after, c.limit, got, c.want)
			}
		}
		// Only dead messages are redriven or discarded.
		for _, f := range []outbox.Filter{{IDs: []int64{delivered, ready}}, {Topic: "nope"}} {
			if got, err := o.Redrive(ctx, db, f); err != nil || len(got) != 0 {
				t.Fatalf("Redrive(%+v) = %v, %v; want nothing", f, got, err)
			}
			if got, err := o.Discard(ctx, db, f); err != nil || len(got) != 0 {
				t.Fatalf("Discard(%+v) = %v, %v; want nothing", f, got, err)
			}
		}
		if r := get(t, ctx, o, delivered); r.State != outbox.Delivered {
			t.Fatalf("the delivered message is %s", r.State)
		}
		if r := get(t, ctx, o, ready); r.State != outbox.Ready || !r.AvailableAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("the ready message is %s, due %s", r.State, r.AvailableAt)
		}
		clock.Advance(time.Minute)
		got, err := o.Redrive(ctx, db, outbox.Filter{Topic: "a", Key: "y"})
		if err != nil || fmt.Sprint(got) != fmt.Sprint([]int64{a2}) {
			t.Fatalf("redrive a/y: %v, %v", got, err)
		}
		r := get(t, ctx, o, a2)
		if r.State != outbox.Ready || r.Attempts != 0 || !r.AvailableAt.Equal(clock.Now()) || len(r.History) != 1 {
			t.Fatalf("redriven: %+v", r)
		}
		ds := claim(t, ctx, o, "w", 10, time.Hour)
		if len(ds) != 1 || ds[0].ID != a2 || ds[0].Attempt != 1 || ds[0].Fence != 2 {
			t.Fatalf("after the redrive: %+v", ds)
		}
		got, err = o.Discard(ctx, db, outbox.Filter{Key: "x"})
		if err != nil || fmt.Sprint(got) != fmt.Sprint([]int64{a1, b1}) {
			t.Fatalf("discard key x: %v, %v", got, err)
		}
		if _, err := o.Get(ctx, db, a1); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("a discarded message: %v", err)
		}
		s, err := o.Stats(ctx, db)
		if err != nil || s.Dead != 0 || s.Leased != 1 || s.Ready != 1 || s.Due != 0 || s.Delivered != 1 {
			t.Fatalf("stats %+v, %v", s, err)
		}
		if s.OldestPending != time.Minute { // the ready message, enqueued at t0

			t.Fatalf("oldest pending %s", s.OldestPending)
		}
	})
}

// TestReapDeletesOnlyLongDeliveredMessages: Reap deletes, in batches and
// for every tenant, the messages delivered at least Retention ago (at the
// exact millisecond) with their history, and never a pending or a dead
// one.
func TestReapDeletesOnlyLongDeliveredMessages(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		acme, _ := tenant.With(ctx, "acme")
		o := newOutbox(t, db, &outbox.Options{Retention: time.Hour, ReapBatch: 2, Backoff: fixedBackoff})
		deliver := func(ctx context.Context, failFirst bool) int64 {
			t.Helper()
			id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
			d := claim(t, ctx, o, "w", 1, time.Hour)[0]
			if failFirst {
				if _, err := o.Fail(ctx, d, errors.New("once")); err != nil {
					t.Fatal(err)
				}
				clock.Advance(time.Second)
				d = claim(t, ctx, o, "w", 1, time.Hour)[0]
				clock.Advance(-time.Second)
			}
			if err := o.Complete(ctx, db, d); err != nil {
				t.Fatal(err)
			}
			return id
		}
		var old []int64
		for i := range 5 {
			old = append(old, deliver(ctx, i == 0))
		}
		old = append(old, deliver(acme, false))
		dead := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", MaxAttempts: 1}) // dead as long as the old ones are delivered
		if d := claim(t, ctx, o, "w", 1, time.Hour); len(d) != 1 || d[0].ID != dead {
			t.Fatalf("claimed %v", ids(d))
		} else if _, err := o.Fail(ctx, d[0], errors.New("boom")); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		young := deliver(ctx, false)
		pending := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", NotBefore: t0.Add(48 * time.Hour)})
		clock.Set(t0.Add(time.Hour - time.Millisecond))
		if n, err := o.Reap(ctx); err != nil || n != 0 {
			t.Fatalf("reap a millisecond early: %d, %v", n, err)
		}
		clock.Set(t0.Add(time.Hour))
		if n, err := o.Reap(ctx); err != nil || n != int64(len(old)) {
			t.Fatalf("reaped %d, %v; want %d", n, err, len(old))
		}
		for i, id := range old {
			c := ctx
			if i == len(old)-1 {
				c = acme
			}
			if _, err := o.Get(c, db, id); !errors.Is(err, racefree.ErrNotFound) {
				t.Errorf("message %d delivered an hour ago: %v, want it reaped", id, err)
			}
		}
		var history int
		if err := tenant.InTx(ctx, db, tenant.Default, func(ctx context.Context, tx *sql.Tx) error {
			return tx.QueryRowContext(ctx, `SELECT count(*) FROM racefree_outbox_attempts WHERE message_id = $1`, old[0]).Scan(&history)
		}); err != nil || history != 0 {
			t.Fatalf("the reaped message's history: %d rows, %v", history, err)
		}
		for _, id := range []int64{young, pending, dead} {
			get(t, ctx, o, id)
		}
		if r := get(t, ctx, o, dead); r.State != outbox.Dead || len(r.History) != 1 {
			t.Fatalf("the dead message: %+v", r)
		}
	})
}

// TestIDsAreNeverReused: an id is the message's idempotency key, so a
// reaped message's id never comes back.
func TestIDsAreNeverReused(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{Retention: time.Millisecond})
		var last int64
		for range 3 {
			last = enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
			for _, d := range claim(t, ctx, o, "w", 10, time.Hour) {
				if err := o.Complete(ctx, db, d); err != nil {
					t.Fatal(err)
				}
			}
		}
		clock.Advance(time.Second)
		if n, err := o.Reap(ctx); err != nil || n != 3 {
			t.Fatalf("reaped %d, %v", n, err)
		}
		if id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"}); id <= last {
			t.Fatalf("after reaping %d, the next message got id %d", last, id)
		}
	})
}
