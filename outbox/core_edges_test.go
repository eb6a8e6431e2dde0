package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
)

// The tests of this file hold the outbox's own operations (Enqueue, Get,
// the dead letters, Stats and Reap) at edges written from outside, from
// the code alone: what an outbox's options fill in for a message, the
// headers' byte bound, the NOTIFY an enqueue sends or not, a delayed
// message's creation time, another tenant's id, the history of a discard,
// and the figures of Stats at their exact millisecond.

// TestCoreEdgesEnqueueFillsWhatTheMessageLeavesOut holds a message that
// names no attempt budget to the outbox's Options.MaxAttempts, a message
// of one of Options.OrderedTopics to ordered without Message.Ordered, a
// nil payload to an empty one, and an ordered message without a key, by
// its own flag or by its topic, to an InputError that stores nothing.
func TestCoreEdgesEnqueueFillsWhatTheMessageLeavesOut(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{MaxAttempts: 3, OrderedTopics: []string{"orders"}})
		ordered := get(t, ctx, o, enqueue(t, ctx, o, db, outbox.Message{Topic: "orders", Key: "k"}))
		if !ordered.Ordered || ordered.MaxAttempts != 3 || len(ordered.Payload) != 0 {
			t.Errorf("a message of an ordered topic: ordered %v, max attempts %d, payload %#v; want ordered, 3, empty",
				ordered.Ordered, ordered.MaxAttempts, ordered.Payload)
		}
		plain := get(t, ctx, o, enqueue(t, ctx, o, db, outbox.Message{Topic: "plain", Key: "k", Payload: []byte{}}))
		if plain.Ordered || plain.MaxAttempts != 3 {
			t.Errorf("a message of another topic: ordered %v, max attempts %d; want unordered, 3", plain.Ordered, plain.MaxAttempts)
		}
		own := get(t, ctx, o, enqueue(t, ctx, o, db, outbox.Message{Topic: "plain", MaxAttempts: 7}))
		if own.MaxAttempts != 7 {
			t.Errorf("a message of 7 attempts has %d", own.MaxAttempts)
		}
		for _, m := range []outbox.Message{{Topic: "plain", Ordered: true}, {Topic: "orders"}} {
			if _, err := o.Enqueue(ctx, db, m); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("ordered without a key (%+v): %v, want an InputError", m, err)
			}
		}
		if s, err := o.Stats(ctx, db); err != nil || s.Ready != 3 {
			t.Errorf("stats: %+v, %v; want the 3 messages enqueued, none refused", s, err)
		}
		// The ordered message holds its key: a second one waits for it.
		enqueue(t, ctx, o, db, outbox.Message{Topic: "orders", Key: "k"})
		ds := claim(t, ctx, o, "w", 10, time.Minute)
		for _, d := range ds {
			if d.Topic == "orders" && d.ID != ordered.ID {
				t.Errorf("the second message of an ordered topic's key was claimed beside the first: %v", ids(ds))
			}
		}
	})
}

// TestCoreEdgesHeadersBoundCountsNamesAndValues holds MaxHeaderBytes to
// names and values together: headers whose values alone fit but whose
// names take them past the bound are refused, and exactly the bound, names
// included, is stored.
func TestCoreEdgesHeadersBoundCountsNamesAndValues(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		name := "X-" + strings.Repeat("n", 198) // 200 bytes
		at := map[string]string{name: strings.Repeat("v", outbox.MaxHeaderBytes-len(name))}
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", Headers: at})
		if got := get(t, ctx, o, id).Headers[name]; len(got) != outbox.MaxHeaderBytes-len(name) {
			t.Errorf("a header of exactly MaxHeaderBytes, name and value: value of %d bytes stored", len(got))
		}
		past := map[string]string{name: strings.Repeat("v", outbox.MaxHeaderBytes-len(name)+1)}
		if _, err := o.Enqueue(ctx, db, outbox.Message{Topic: "t", Headers: past}); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("a header one byte past MaxHeaderBytes with its name (its value alone fits): %v, want an InputError", err)
		}
		if s, err := o.Stats(ctx, db); err != nil || s.Ready != 1 {
			t.Errorf("stats: %+v, %v; want the one message stored", s, err)
		}
	})
}

// TestCoreEdgesNotifyAtEnqueue holds, on PostgreSQL, an enqueue's NOTIFY
// to its tenant: an outbox sends one, with the tenant as its payload, when
// the enqueue commits; an outbox with Options.NoNotify sends none.
func TestCoreEdgesNotifyAtEnqueue(t *testing.T) {
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	count := notifications(t, db)
	for _, noNotify := range []bool{false, true} {
		o := newOutbox(t, db, &outbox.Options{NoNotify: noNotify, NotifyInterval: -1})
		id := fmt.Sprintf("notify-%v-%d", noNotify, time.Now().UnixNano())
		ctx, err := tenant.With(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		enqueue(t, ctx, o, db, outbox.Message{Topic: "topic-" + id})
		want := 1
		if noNotify {
			want = 0
		}
		if got := count(id); got != want {
			t.Errorf("NoNotify %v: %d NOTIFYs for the tenant, want %d", noNotify, got, want)
		}
	}
}

// TestCoreEdgesADelayedMessageIsCreatedWhenEnqueued holds a delayed
// message's CreatedAt to the enqueue's instant and its AvailableAt to its
// due time, and Stats' OldestPending to the time since the enqueue, in
// milliseconds read as such; with and without the NOTIFY, which on
// PostgreSQL is another statement.
func TestCoreEdgesADelayedMessageIsCreatedWhenEnqueued(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		for _, noNotify := range []bool{false, true} {
			ctx, err := tenant.With(context.Background(), fmt.Sprintf("delayed-%v", noNotify))
			if err != nil {
				t.Fatal(err)
			}
			o := newOutbox(t, db, &outbox.Options{NoNotify: noNotify})
			start := clock.Now()
			id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", NotBefore: start.Add(time.Hour)})
			r := get(t, ctx, o, id)
			if !r.CreatedAt.Equal(start) || !r.AvailableAt.Equal(start.Add(time.Hour)) {
				t.Errorf("NoNotify %v: created %v, available %v; want %v and an hour later", noNotify, r.CreatedAt, r.AvailableAt, start)
			}
			clock.Advance(90 * time.Second)
			s, err := o.Stats(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			if s.OldestPending != 90*time.Second || s.Ready != 1 || s.Due != 0 {
				t.Errorf("NoNotify %v: stats 90s after a delayed enqueue: %+v; want 1 ready, none due, pending for 90s", noNotify, s)
			}
		}
	})
}

// TestCoreEdgesGetIsTheTenantsOwn holds Get to the tenant ctx names:
// another tenant's message, by its id, is not found.
func TestCoreEdgesGetIsTheTenantsOwn(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		a, err := tenant.With(context.Background(), "tenant-a")
		if err != nil {
			t.Fatal(err)
		}
		b, err := tenant.With(context.Background(), "tenant-b")
		if err != nil {
			t.Fatal(err)
		}
		o := newOutbox(t, db, nil)
		id := enqueue(t, a, o, db, outbox.Message{Topic: "t", Payload: []byte("a's secret")})
		if r, err := o.Get(b, db, id); !errors.Is(err, racefree.ErrNotFound) {
			t.Errorf("tenant b read tenant a's message %d: %+v, %v; want ErrNotFound", id, r, err)
		}
		if r := get(t, a, o, id); string(r.Payload) != "a's secret" || r.Tenant != "tenant-a" {
			t.Errorf("tenant a's own message: %+v", r)
		}
	})
}

// dieNow claims message id (alone due) and fails it permanently.
func dieNow(t *testing.T, ctx context.Context, o *outbox.Outbox, id int64) {
	t.Helper()
	ds := claim(t, ctx, o, "w", 1, time.Minute)
	if len(ds) != 1 || ds[0].ID != id {
		t.Fatalf("claimed %v, want [%d]", ids(ds), id)
	}
	if out, err := o.Fail(ctx, ds[0], outbox.Permanent(errors.New("no"))); err != nil || !out.Dead {
		t.Fatalf("fail: %+v, %v", out, err)
	}
}

// history counts the rows of message id's history, whatever its tenant.
func history(t *testing.T, db *racefree.DB, id int64) (n int) {
	t.Helper()
	q := "SELECT count(*) FROM racefree_outbox_attempts WHERE message_id = ?"
	if db.Engine() == racefree.Postgres {
		q = strings.Replace(q, "?", "$1", 1)
	}
	if err := db.SQL().QueryRowContext(context.Background(), q, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCoreEdgesDiscardTakesTheHistoryOfTheDeadOnly holds Discard by topic
// to the dead messages' history: the discarded message's history goes
// with it, and a message of the same topic still retrying keeps its own.
func TestCoreEdgesDiscardTakesTheHistoryOfTheDeadOnly(t *testing.T) {
	_, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		dead := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		dieNow(t, ctx, o, dead)
		retrying := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		ds := claim(t, ctx, o, "w", 1, time.Minute)
		if len(ds) != 1 || ds[0].ID != retrying {
			t.Fatalf("claimed %v, want [%d]", ids(ds), retrying)
		}
		if out, err := o.Fail(ctx, ds[0], outbox.RetryAfter(time.Hour, errors.New("later"))); err != nil || out.Dead {
			t.Fatalf("fail: %+v, %v", out, err)
		}
		if history(t, db, dead) != 1 || history(t, db, retrying) != 1 {
			t.Fatalf("history before: %d and %d rows, want 1 each", history(t, db, dead), history(t, db, retrying))
		}
		got, err := o.Discard(ctx, db, outbox.Filter{Topic: "t"})
		if err != nil || fmt.Sprint(got) != fmt.Sprint([]int64{dead}) {
			t.Fatalf("discard: %v, %v; want [%d]", got, err, dead)
		}
		if n := history(t, db, dead); n != 0 {
			t.Errorf("the discarded message's history kept %d rows", n)
		}
		if r := get(t, ctx, o, retrying); len(r.History) != 1 || r.History[0].Outcome != "retry" || r.State != outbox.Ready {
			t.Errorf("the retrying message after the discard: state %s, history %+v", r.State, r.History)
		}
	})
}

// TestCoreEdgesStatsAtTheirEdges holds each figure of Stats: a message
// due at this very millisecond is due, one a millisecond later is not; a
// dead message is counted dead (not delivered) and is not pending; a
// delivered one is counted delivered; OldestPending is the age of the
// oldest ready or leased message alone, 0 when only dead and delivered
// ones are left.
func TestCoreEdgesStatsAtTheirEdges(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		stats := func() outbox.Stats {
			t.Helper()
			s, err := o.Stats(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			return *s
		}
		dead := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		dieNow(t, ctx, o, dead)
		clock.Advance(time.Minute)
		if s := stats(); s != (outbox.Stats{Dead: 1}) {
			t.Errorf("one dead message, a minute old: %+v", s)
		}
		done := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		ds := claim(t, ctx, o, "w", 1, time.Minute)
		if len(ds) != 1 || ds[0].ID != done {
			t.Fatalf("claimed %v, want [%d]", ids(ds), done)
		}
		if err := o.Complete(ctx, db, ds[0]); err != nil {
			t.Fatal(err)
		}
		if s := stats(); s != (outbox.Stats{Dead: 1, Delivered: 1}) {
			t.Errorf("one dead message and one delivered: %+v", s)
		}
		enqueue(t, ctx, o, db, outbox.Message{Topic: "t", NotBefore: clock.Now().Add(time.Second)})
		enqueue(t, ctx, o, db, outbox.Message{Topic: "t", NotBefore: clock.Now().Add(time.Second + time.Millisecond)})
		clock.Advance(time.Second)
		if s := stats(); s != (outbox.Stats{Ready: 2, Due: 1, Dead: 1, Delivered: 1, OldestPending: time.Second}) {
			t.Errorf("one message due at this millisecond, one a millisecond later: %+v", s)
		}
	})
}

// TestCoreEdgesReapCountsFromTheDelivery holds Reap to the time a message
// was delivered, not created: a message enqueued long ago (delayed, then
// delivered) is kept for Options.Retention after its delivery, and reaped
// at it.
func TestCoreEdgesReapCountsFromTheDelivery(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{Retention: time.Hour})
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", NotBefore: clock.Now().Add(48 * time.Hour)})
		clock.Advance(48 * time.Hour)
		ds := claim(t, ctx, o, "w", 1, time.Minute)
		if len(ds) != 1 || ds[0].ID != id {
			t.Fatalf("claimed %v, want [%d]", ids(ds), id)
		}
		if err := o.Complete(ctx, db, ds[0]); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour - time.Millisecond)
		if n, err := o.ReapTenant(ctx); err != nil || n != 0 {
			t.Errorf("reap a millisecond before the retention since the delivery: %d, %v; want 0", n, err)
		}
		clock.Advance(time.Millisecond)
		if n, err := o.ReapTenant(ctx); err != nil || n != 1 {
			t.Errorf("reap at the retention since the delivery: %d, %v; want 1", n, err)
		}
	})
}

// TestCoreEdgesDeadPagesOfOne pages the dead letters one at a time, each
// page resumed after the last id returned: each dead message is listed
// once, in order, and the listing ends, at most one page later.
func TestCoreEdgesDeadPagesOfOne(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		var want []int64
		for range 3 {
			id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
			dieNow(t, ctx, o, id)
			want = append(want, id)
		}
		var got []int64
		var after int64
		for page := 0; page <= len(want); page++ {
			rs, err := o.Dead(ctx, db, outbox.Filter{}, after, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) == 0 {
				break
			}
			if len(rs) != 1 {
				t.Fatalf("a page of 1 held %d messages", len(rs))
			}
			got = append(got, rs[0].ID)
			after = rs[0].ID
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("pages of one listed %v, want %v", got, want)
		}
	})
}
