package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
)

// The tests of this file hold the outbox at edges written from outside,
// from its code alone (a fourth round): the age Stats gives when pending
// messages differ in age, and a RetryAfter longer than the backoff's cap.

// TestOutside5OldestPendingIsTheOldestMessage holds Stats' OldestPending
// to the oldest pending message when several of different ages are
// pending, never the newest: two messages enqueued a minute apart, read a
// minute after the second, are two minutes old; the oldest leased still
// counts (leased is pending); once it is delivered the other one's minute
// is left.
func TestOutside5OldestPendingIsTheOldestMessage(t *testing.T) {
	t.Parallel()
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
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
		oldest := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		clock.Advance(time.Minute)
		enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		clock.Advance(time.Minute)
		if s := stats(); s != (outbox.Stats{Ready: 2, Due: 2, OldestPending: 2 * time.Minute}) {
			t.Errorf("two messages, two minutes and one minute old: %+v, want OldestPending 2m", s)
		}
		ds := claim(t, ctx, o, "w", 1, time.Hour)
		if len(ds) != 1 || ds[0].ID != oldest {
			t.Fatalf("claimed %v, want [%d] (the oldest due first)", ids(ds), oldest)
		}
		if s := stats(); s != (outbox.Stats{Ready: 1, Due: 1, Leased: 1, OldestPending: 2 * time.Minute}) {
			t.Errorf("the oldest leased, the other ready: %+v, want OldestPending 2m", s)
		}
		if err := o.Complete(ctx, db, ds[0]); err != nil {
			t.Fatal(err)
		}
		if s := stats(); s != (outbox.Stats{Ready: 1, Due: 1, Delivered: 1, OldestPending: time.Minute}) {
			t.Errorf("the oldest delivered: %+v, want OldestPending 1m", s)
		}
	})
}

// TestOutside5ARetryAfterLongerThanTheBackoffCapIsKept holds Fail to the
// delay a RetryAfter asks for when it is longer than the backoff's cap
// (BackoffMax, an hour), which bounds the backoff alone: a receiver that
// asks for two hours is due again in two hours, not one; only MaxDelay
// bounds a RetryAfter (MaxDelay + 1h is due in MaxDelay), exactly at its
// millisecond.
func TestOutside5ARetryAfterLongerThanTheBackoffCapIsKept(t *testing.T) {
	t.Parallel()
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{Backoff: func(int) time.Duration { return time.Second }})
		for _, c := range []struct{ asked, want time.Duration }{
			{2 * time.Hour, 2 * time.Hour},
			{outbox.BackoffMax + time.Millisecond, outbox.BackoffMax + time.Millisecond},
			{outbox.MaxDelay, outbox.MaxDelay},
			{outbox.MaxDelay + time.Hour, outbox.MaxDelay},
		} {
			now := clock.Now()
			id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", MaxAttempts: 5})
			ds := claim(t, ctx, o, "w", 1, time.Minute)
			if len(ds) != 1 || ds[0].ID != id {
				t.Fatalf("claimed %v, want [%d]", ids(ds), id)
			}
			out, err := o.Fail(ctx, ds[0], outbox.RetryAfter(c.asked, errors.New("busy")))
			if err != nil || out.Dead {
				t.Fatalf("a RetryAfter of %s: %+v, %v; want a retry", c.asked, out, err)
			}
			if want := now.Add(c.want); !out.RetryAt.Equal(want) {
				t.Errorf("a RetryAfter of %s is due at %s, want %s", c.asked, out.RetryAt, want)
			}
			if m := get(t, ctx, o, id); m.State != outbox.Ready || !m.AvailableAt.Equal(now.Add(c.want)) {
				t.Errorf("a RetryAfter of %s: message %s due at %s, want ready at %s", c.asked, m.State, m.AvailableAt, now.Add(c.want))
			}
			clock.Advance(c.want - time.Millisecond)
			if ds := claim(t, ctx, o, "w", 1, time.Minute); len(ds) != 0 {
				t.Fatalf("a RetryAfter of %s: claimed %v a millisecond before it is due", c.asked, ids(ds))
			}
			clock.Advance(time.Millisecond)
			ds = claim(t, ctx, o, "w", 1, time.Minute)
			if len(ds) != 1 || ds[0].ID != id || ds[0].Attempt != 2 {
				t.Fatalf("a RetryAfter of %s: at its millisecond claimed %+v, want message %d at attempt 2", c.asked, ds, id)
			}
			if err := o.Complete(ctx, db, ds[0]); err != nil {
				t.Fatal(err)
			}
		}
	})
}
