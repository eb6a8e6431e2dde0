package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
)

// The tests of this file hold the outbox's relay at edges written from
// outside, from its code alone (a third round): a failure refused as
// stale, a wake-up of every tenant, the attempt a redriven message's
// history names, a delay of a fraction of a millisecond, a heartbeat of
// nothing, nested marks, the request's timeout, a stale heartbeat, a
// relay's topics at their limit, a stopped relay's release, the
// completions a claim carries, and an ordered key whose elder is leased.

// TestOutside4StaleFailureIsStaleNotAnError holds a relay whose handler
// failed after its lease lapsed and another worker took the message over
// to a failure counted Stale, once, with no database error reported and
// nothing written: the newer tenure still holds the message.
func TestOutside4StaleFailureIsStaleNotAnError(t *testing.T) {
	t.Parallel()
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		started := make(chan *outbox.Delivery, 1)
		release := make(chan struct{})
		// A lease of an hour: its heartbeat, every 20 minutes, never runs.
		r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
			started <- d
			<-release
			return errors.New("the receiver timed out")
		}, &outbox.RelayOptions{Worker: "a", Lease: time.Hour, PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		first := <-started
		clock.Advance(2 * time.Hour) // a's lease lapses; b takes the message over
		ds := claim(t, ctx, o, "b", 1, time.Hour)
		if len(ds) != 1 || ds[0].ID != id || ds[0].Fence <= first.Fence {
			t.Fatalf("b claimed %+v, want message %d at a fence past %d", ds, id, first.Fence)
		}
		close(release)
		waitFor(t, "the failure's verdict", func() bool { st := r.Stats(); return st.Stale+st.Errors+st.Retried+st.Dead > 0 })
		stop()
		if st := r.Stats(); st.Stale != 1 || st.Errors != 0 || st.Retried != 0 || st.Dead != 0 {
			t.Fatalf("stats %+v, want the failure counted Stale alone, no error", st)
		}
		if m := get(t, ctx, o, id); m.State != outbox.Leased || m.Fence != ds[0].Fence || m.LeasedBy != "b" {
			t.Fatalf("message %d is %s at fence %d by %q, want leased to b at fence %d", id, m.State, m.Fence, m.LeasedBy, ds[0].Fence)
		}
	})
}

// TestOutside4AWakeOfEveryTenantVisitsThemOnce holds Relay.Wake("") to one
// round of every tenant: the wake-ups of one tenant after it visit that
// tenant alone, and RelayStats.Polls counts no round for them.
func TestOutside4AWakeOfEveryTenantVisitsThemOnce(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{NoNotify: true})
		r, err := o.NewRelay(func(context.Context, *outbox.Delivery) error {
			return nil
		}, &outbox.RelayOptions{PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		waitFor(t, "the first poll", func() bool { return r.Stats().Polls >= 1 })
		r.Wake("")
		waitFor(t, "the round Wake(\"\") asked for", func() bool { return r.Stats().Polls >= 2 })
		for i := range 3 {
			enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
			r.Wake("default")
			waitFor(t, fmt.Sprintf("delivery %d", i+1), func() bool { return r.Stats().Delivered >= int64(i+1) })
		}
		stop()
		if st := r.Stats(); st.Polls != 2 || st.Delivered != 3 {
			t.Fatalf("stats %+v, want 2 polls (the first and Wake(\"\")'s) and 3 deliveries", st)
		}
	})
}

// TestOutside4HistoryNamesTheAttemptNotTheFence holds a failure's entry in
// the history to the attempt it ended: after a redrive the attempts start
// again at 1 while the fence goes on, and the first new failure is
// attempt 1 at fence 2.
func TestOutside4HistoryNamesTheAttemptNotTheFence(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", MaxAttempts: 1})
		for round := 1; round <= 2; round++ {
			ds := claim(t, ctx, o, "w", 1, time.Minute)
			if len(ds) != 1 || ds[0].Attempt != 1 {
				t.Fatalf("round %d claimed %+v, want message %d at attempt 1", round, ds, id)
			}
			out, err := o.Fail(ctx, ds[0], errors.New("refused"))
			if err != nil || !out.Dead {
				t.Fatalf("round %d: Fail: %+v, %v, want dead", round, out, err)
			}
			if round == 1 {
				if got, err := o.Redrive(ctx, db, outbox.Filter{IDs: []int64{id}}); err != nil || len(got) != 1 {
					t.Fatalf("redrive: %v, %v", got, err)
				}
			}
		}
		m := get(t, ctx, o, id)
		if len(m.History) != 2 {
			t.Fatalf("history %+v, want two failures", m.History)
		}
		for i, a := range m.History {
			if a.Attempt != 1 || a.Fence != int64(i+1) || a.Worker != "w" || a.Outcome != "dead" {
				t.Errorf("history entry %d is %+v, want attempt 1 at fence %d by w, dead", i, a, i+1)
			}
		}
	})
}

// TestOutside4ARetryDelayIsRoundedToTheMillisecond holds a RetryAfter of a
// fraction of a millisecond to the nearest millisecond, never cut short:
// 1.5 ms is due 2 ms after the failure, 1.4 ms 1 ms after it.
func TestOutside4ARetryDelayIsRoundedToTheMillisecond(t *testing.T) {
	t.Parallel()
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		for _, c := range []struct {
			delay, want time.Duration
		}{{1500 * time.Microsecond, 2 * time.Millisecond}, {1400 * time.Microsecond, time.Millisecond}} {
			id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
			ds := claim(t, ctx, o, "w", 1, time.Minute)
			if len(ds) != 1 || ds[0].ID != id {
				t.Fatalf("claimed %v, want %d", ids(ds), id)
			}
			out, err := o.Fail(ctx, ds[0], outbox.RetryAfter(c.delay, errors.New("busy")))
			if err != nil {
				t.Fatal(err)
			}
			if want := t0.Add(c.want); !out.RetryAt.Equal(want) {
				t.Errorf("a RetryAfter of %s is due at %s, want %s", c.delay, out.RetryAt, want)
			}
			if m := get(t, ctx, o, id); !m.AvailableAt.Equal(t0.Add(c.want)) {
				t.Errorf("a RetryAfter of %s: message due at %s, want %s", c.delay, m.AvailableAt, t0.Add(c.want))
			}
			// Not due a moment before, due at its millisecond.
			r, err := o.Claim(ctx, "w", 1, time.Minute)
			if err != nil || len(r) != 0 {
				t.Fatalf("claim before the retry is due: %v, %v", ids(r), err)
			}
			clock.Advance(c.want)
			r, err = o.Claim(ctx, "w", 1, time.Minute)
			if err != nil || len(r) != 1 {
				t.Fatalf("claim at the retry's millisecond: %v, %v", ids(r), err)
			}
			if err := o.Complete(ctx, db, r[0]); err != nil {
				t.Fatal(err)
			}
			clock.Set(t0)
		}
	})
}

// TestOutside4HeartbeatOfNothingChecksItsLease holds Heartbeat's lease to
// its bounds whether or not there is anything to extend: a heartbeat loop
// with an invalid lease learns it before it has a delivery in flight.
func TestOutside4HeartbeatOfNothingChecksItsLease(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		o := newOutbox(t, db, nil)
		for _, lease := range []time.Duration{0, outbox.MinLease - time.Millisecond, outbox.MaxLease + time.Millisecond} {
			if _, err := o.Heartbeat(context.Background(), nil, lease); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Heartbeat of no delivery with a lease of %s: %v, want an InputError", lease, err)
			}
		}
		if lost, err := o.Heartbeat(context.Background(), nil, outbox.MinLease); err != nil || len(lost) != 0 {
			t.Errorf("Heartbeat of no delivery with a lease of MinLease: %v, %v, want nothing", lost, err)
		}
	})
}

// TestOutside4RetryAfterWinsOverPermanent holds Classify to its rule "when
// in doubt, retry": an error marked both RetryAfter and Permanent, in
// either nesting, is retried after the RetryAfter's delay.
func TestOutside4RetryAfterWinsOverPermanent(t *testing.T) {
	base := errors.New("busy")
	for name, err := range map[string]error{
		"Permanent(RetryAfter(...))": outbox.Permanent(outbox.RetryAfter(7*time.Second, base)),
		"RetryAfter(Permanent(...))": outbox.RetryAfter(7*time.Second, outbox.Permanent(base)),
	} {
		if v := outbox.Classify(err); v.Permanent || v.RetryAfter != 7*time.Second {
			t.Errorf("%s: %+v, want a retry after 7s", name, v)
		}
	}
}

// deadlineTransport answers every request 204 and records its context's
// deadline.
type deadlineTransport struct {
	mu        sync.Mutex
	deadlines []time.Time
}

func (d *deadlineTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	dl, ok := r.Context().Deadline()
	if !ok {
		dl = time.Time{}
	}
	d.mu.Lock()
	d.deadlines = append(d.deadlines, dl)
	d.mu.Unlock()
	return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
}

// TestOutside4HTTPRequestIsBoundByTheTimeout holds each request to
// HTTPOptions.Timeout: its context's deadline is at most Timeout after
// the handler was called (and 30 s without it), not 30 s whatever it says.
func TestOutside4HTTPRequestIsBoundByTheTimeout(t *testing.T) {
	for _, timeout := range []time.Duration{time.Second, 0} {
		tr := &deadlineTransport{}
		h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: "http://receiver.invalid/in", Client: &http.Client{Transport: tr}, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		want := timeout
		if want == 0 {
			want = 30 * time.Second
		}
		before := time.Now()
		if err := h(context.Background(), &outbox.Delivery{ID: 1, Tenant: "default", Topic: "t", Attempt: 1, Fence: 1}); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		tr.mu.Lock()
		dls := tr.deadlines
		tr.mu.Unlock()
		if len(dls) != 1 {
			t.Fatalf("Timeout %s: %d requests, want 1", timeout, len(dls))
		}
		if dl := dls[0]; dl.IsZero() || dl.After(after.Add(want)) || dl.Before(before.Add(want)) {
			t.Errorf("Timeout %s: the request's deadline is %s after the call, want %s", timeout, dl.Sub(before), want)
		}
	}
}

// TestOutside4StaleHeartbeatMovesNoNewerLease holds a heartbeat of a
// tenure that lapsed and was taken over to nothing: it is told the lease
// is lost, and the newer tenure's lease keeps its expiry.
func TestOutside4StaleHeartbeatMovesNoNewerLease(t *testing.T) {
	t.Parallel()
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		old := claim(t, ctx, o, "a", 1, time.Minute)
		clock.Advance(2 * time.Minute)
		cur := claim(t, ctx, o, "b", 1, time.Minute)
		if len(old) != 1 || len(cur) != 1 || cur[0].Fence <= old[0].Fence {
			t.Fatalf("claims %+v then %+v, want message %d taken over", old, cur, id)
		}
		expiry := get(t, ctx, o, id).AvailableAt
		clock.Advance(10 * time.Second)
		lost, err := o.Heartbeat(ctx, old, time.Hour)
		if err != nil || len(lost) != 1 {
			t.Fatalf("the stale heartbeat: lost %v, %v, want its delivery lost", lost, err)
		}
		if m := get(t, ctx, o, id); m.State != outbox.Leased || m.Fence != cur[0].Fence || !m.AvailableAt.Equal(expiry) {
			t.Fatalf("message %d is %s at fence %d until %s, want leased at fence %d until %s", id, m.State, m.Fence, m.AvailableAt, cur[0].Fence, expiry)
		}
	})
}

// TestOutside4RelayTopicsAtTheirLimit holds NewRelay's Topics to the
// limit a message's topic has: MaxTopicBytes is accepted, one byte more
// is an InputError.
func TestOutside4RelayTopicsAtTheirLimit(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		o := newOutbox(t, db, nil)
		h := func(context.Context, *outbox.Delivery) error { return nil }
		topic := strings.Repeat("t", outbox.MaxTopicBytes)
		if _, err := o.NewRelay(h, &outbox.RelayOptions{Topics: []string{topic}}); err != nil {
			t.Errorf("a topic of MaxTopicBytes: %v", err)
		}
		if _, err := o.NewRelay(h, &outbox.RelayOptions{Topics: []string{"a", topic + "x"}}); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("a topic of MaxTopicBytes + 1: %v, want an InputError", err)
		}
	})
}

// TestOutside4StoppedRelayReleasesDueNowSayingWhy holds a stopped relay's
// release of a handler it cancelled to a message due again at the release's
// instant, its attempt not spent, whose last error says the relay stopped.
func TestOutside4StoppedRelayReleasesDueNowSayingWhy(t *testing.T) {
	t.Parallel()
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		started := make(chan struct{}, 1)
		r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}, &outbox.RelayOptions{Lease: time.Minute, PollInterval: time.Hour, ShutdownGrace: -1})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		<-started
		clock.Advance(time.Second)
		stop()
		m := get(t, ctx, o, id)
		if m.State != outbox.Ready || !m.AvailableAt.Equal(t0.Add(time.Second)) {
			t.Fatalf("message %d is %s due %s, want ready at once, %s", id, m.State, m.AvailableAt, t0.Add(time.Second))
		}
		if !strings.Contains(m.LastError, outbox.ErrRelayStopped.Error()) {
			t.Errorf("message %d's last error is %q, want it to say the relay stopped", id, m.LastError)
		}
		if ds := claim(t, ctx, o, "b", 1, time.Minute); len(ds) != 1 || ds[0].ID != id || ds[0].Attempt != 2 {
			t.Fatalf("claimed %+v after the stop, want message %d at once", ds, id)
		}
	})
}

// TestOutside4AClaimCarryingCompletionsWritesThemWhenNothingIsDue holds a
// relay's claim to the completions it carries: they land in its
// transaction even when no message is due.
func TestOutside4AClaimCarryingCompletionsWritesThemWhenNothingIsDue(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		ds := claim(t, ctx, o, "w", 1, time.Minute)
		if len(ds) != 1 {
			t.Fatalf("claimed %v, want %d", ids(ds), id)
		}
		tctx, err := tenant.With(ctx, "default")
		if err != nil {
			t.Fatal(err)
		}
		more, done, err := outbox.ClaimCompleting(tctx, o, "w", 4, time.Minute, ds)
		if err != nil || len(more) != 0 || len(done) != 1 || done[0] != id {
			t.Fatalf("a claim with nothing due carrying %d: claimed %v, completed %v, %v; want %d completed", id, ids(more), done, err, id)
		}
		if m := get(t, ctx, o, id); m.State != outbox.Delivered {
			t.Fatalf("message %d is %s, want delivered", id, m.State)
		}
	})
}

// TestOutside4AnOrderedMessageWaitsForItsLeasedElder holds an ordered
// message to the older message of its key while that one is leased (in a
// handler): a claim skips it, and takes it once the elder is delivered.
func TestOutside4AnOrderedMessageWaitsForItsLeasedElder(t *testing.T) {
	t.Parallel()
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		a := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", Key: "k", Ordered: true})
		b := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", Key: "k", Ordered: true})
		first := claim(t, ctx, o, "w", 1, time.Minute)
		if len(first) != 1 || first[0].ID != a {
			t.Fatalf("claimed %v, want the elder %d", ids(first), a)
		}
		if ds := claim(t, ctx, o, "w", 10, time.Minute); len(ds) != 0 {
			t.Fatalf("claimed %v while %d is leased, want nothing: %d waits for it", ids(ds), a, b)
		}
		if err := o.Complete(ctx, db, first[0]); err != nil {
			t.Fatal(err)
		}
		if ds := claim(t, ctx, o, "w", 10, time.Minute); len(ds) != 1 || ds[0].ID != b {
			t.Fatalf("claimed %v once %d was delivered, want %d", ids(ds), a, b)
		}
	})
}
