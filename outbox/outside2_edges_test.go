package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
)

// The tests of this file hold the relay side of the outbox at edges
// written from outside, from its code alone (a second round): what the
// relay counts (claimed, dead) and how it treats a panic and a Wake of
// every tenant, in-process wake-ups shared in turn, a RetryAfter that is
// not positive, a Complete explained inside the caller's transaction, a
// tenure's calls that name another tenant's message, a tenure whose
// failure ended its lease, the claim's order, a permanent death's date,
// and the HTTP handler's redirects, URLs, timeout, Retry-After date and
// the StatusError of another type.

// TestOutside2RelayCountsWhatItLeasedAndWhatDied holds RelayStats to what
// happened: a relay of 16 slots that leased one message counts one
// Claimed, not the batch its claim asked for, and a transient failure of
// that message's last (and only) attempt, which killed it, counts Dead,
// not Retried.
func TestOutside2RelayCountsWhatItLeasedAndWhatDied(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", MaxAttempts: 1})
		r, err := o.NewRelay(func(context.Context, *outbox.Delivery) error {
			return errors.New("the receiver timed out") // transient
		}, &outbox.RelayOptions{Concurrency: 16, PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		waitFor(t, "the failure's verdict", func() bool { st := r.Stats(); return st.Dead+st.Retried+st.Stale+st.Errors > 0 })
		stop()
		if st := r.Stats(); st.Claimed != 1 || st.Dead != 1 || st.Retried != 0 || st.Errors != 0 {
			t.Fatalf("stats %+v, want 1 claimed and 1 dead (a transient failure of the last attempt), none retried", st)
		}
		if m := get(t, ctx, o, id); m.State != outbox.Dead {
			t.Fatalf("message %d is %s, want dead", id, m.State)
		}
	})
}

// TestOutside2APanickingHandlerIsATransientFailure holds a handler's
// panic to a transient failure: the message is not delivered but due
// again after the backoff, its error naming the panic, counted Retried.
func TestOutside2APanickingHandlerIsATransientFailure(t *testing.T) {
	t.Parallel()
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{Backoff: fixedBackoff})
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		r, err := o.NewRelay(func(context.Context, *outbox.Delivery) error {
			panic("the handler's bug")
		}, &outbox.RelayOptions{PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		waitFor(t, "the panic's verdict", func() bool { st := r.Stats(); return st.Delivered+st.Retried+st.Dead+st.Errors > 0 })
		stop()
		if st := r.Stats(); st.Retried != 1 || st.Delivered != 0 {
			t.Fatalf("stats %+v, want the panic counted Retried, nothing delivered", st)
		}
		m := get(t, ctx, o, id)
		if m.State != outbox.Ready || !m.AvailableAt.Equal(t0.Add(time.Second)) || !strings.Contains(m.LastError, "the handler's bug") {
			t.Fatalf("message %d is %s due %s (%q), want ready after the backoff of 1 s, its error naming the panic", id, m.State, m.AvailableAt, m.LastError)
		}
	})
}

// TestOutside2WakeOfEveryTenantNamesNoOtherTenant holds Relay.Wake("") to
// a visit of every tenant racefree has seen, and nothing else: the relay
// claims for no tenant named "" and reports no error.
func TestOutside2WakeOfEveryTenantNamesNoOtherTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		o := newOutbox(t, db, &outbox.Options{NoNotify: true})
		r, err := o.NewRelay(func(context.Context, *outbox.Delivery) error { return nil }, &outbox.RelayOptions{PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		waitFor(t, "the first poll", func() bool { return r.Stats().Polls >= 1 })
		r.Wake("")
		// The round a Wake of every tenant starts counts its poll after its
		// claims: by then a claim for a tenant "" was tried.
		waitFor(t, "the poll Wake(\"\") asked for", func() bool { return r.Stats().Polls >= 2 })
		if st := r.Stats(); st.Errors != 0 {
			t.Fatalf("stats %+v after Wake(\"\"), want no error", st)
		}
	})
}

// TestOutside2WakeUpsGoToEachRelayInTurn holds the in-process wake-ups of
// one *racefree.DB to each of its relays in turn: two relays that poll once
// an hour, two messages enqueued one after the other, each delivered by
// another relay.
func TestOutside2WakeUpsGoToEachRelayInTurn(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{NoNotify: true})
		a := idleRelay(t, o, outbox.RelayOptions{Worker: "a"})
		b := idleRelay(t, o, outbox.RelayOptions{Worker: "b"})
		by := func(id int64) string {
			t.Helper()
			select {
			case got := <-a:
				if got != id {
					t.Fatalf("relay a delivered %d, want %d", got, id)
				}
				return "a"
			case got := <-b:
				if got != id {
					t.Fatalf("relay b delivered %d, want %d", got, id)
				}
				return "b"
			}
		}
		first := by(enqueue(t, ctx, o, db, outbox.Message{Topic: "t"}))
		second := by(enqueue(t, ctx, o, db, outbox.Message{Topic: "t"}))
		if first == second {
			t.Fatalf("both wake-ups went to relay %s, want one to each relay in turn", first)
		}
	})
}

// TestOutside2ARetryAfterThatIsNotPositiveIsTheBackoff holds a verdict's
// RetryAfter to a delay only when positive: RetryAfter(0) and a negative
// RetryAfter leave the message to the backoff, never due at once.
func TestOutside2ARetryAfterThatIsNotPositiveIsTheBackoff(t *testing.T) {
	t.Parallel()
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{Backoff: fixedBackoff})
		for _, d := range []time.Duration{0, -time.Millisecond, -time.Hour} {
			id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
			ds := claim(t, ctx, o, "w", 1, time.Minute)
			if len(ds) != 1 || ds[0].ID != id {
				t.Fatalf("claimed %v, want %d", ids(ds), id)
			}
			out, err := o.Fail(ctx, ds[0], outbox.RetryAfter(d, errors.New("later")))
			if err != nil {
				t.Fatal(err)
			}
			want := clock.Now().Add(time.Second) // fixedBackoff(1)
			if m := get(t, ctx, o, id); out.Dead || !out.RetryAt.Equal(want) || m.State != outbox.Ready || !m.AvailableAt.Equal(want) {
				t.Fatalf("RetryAfter(%s): outcome %+v, message %s due %s; want ready at %s, after the backoff", d, out, m.State, m.AvailableAt, want)
			}
			clock.Advance(time.Minute)
			if err := o.Complete(ctx, db, claim(t, ctx, o, "w", 1, time.Minute)[0]); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestOutside2CompleteInTheCallersTransactionExplainsFromIt holds Complete's
// explanation of a completion that changed nothing to the caller's
// transaction: completed once in an open transaction, a second Complete of
// the same tenure in it is told that its own tenure delivered the message
// (ErrDelivered), as the transaction sees it, not that it is leased.
func TestOutside2CompleteInTheCallersTransactionExplainsFromIt(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		d := claim(t, ctx, o, "w", 1, time.Minute)[0]
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if err := o.Complete(ctx, tx, d); err != nil {
				return err
			}
			return o.Complete(ctx, tx, d)
		})
		if !errors.Is(err, outbox.ErrDelivered) || !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("a second Complete in the transaction that completed: %v, want ErrDelivered", err)
		}
		if m := get(t, ctx, o, id); m.State != outbox.Leased {
			t.Fatalf("message %d is %s after the transaction rolled back, want leased", id, m.State)
		}
	})
}

// TestOutside2ATenantsLeaseCallsNeverReachAnotherTenantsMessage holds
// Heartbeat, Fail and Complete to the tenant of the delivery they are
// given: tenant b naming tenant a's leased message (its id and fence) in a
// delivery of its own extends no lease (the delivery is lost), fails
// nothing and completes nothing (ErrNotHeld: no such message of b's), and
// learns nothing of a's message: neither that it is delivered nor its
// fence.
func TestOutside2ATenantsLeaseCallsNeverReachAnotherTenantsMessage(t *testing.T) {
	t.Parallel()
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		actx, err := tenant.With(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		bctx, err := tenant.With(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		o := newOutbox(t, db, nil)
		id := enqueue(t, actx, o, db, outbox.Message{Topic: "t"})
		enqueue(t, bctx, o, db, outbox.Message{Topic: "t"}) // b has messages of its own
		da := claim(t, actx, o, "wa", 1, time.Minute)[0]
		clock.Advance(time.Second)
		forged := &outbox.Delivery{ID: id, Tenant: "b", Topic: "t", Attempt: 1, MaxAttempts: 3, Fence: da.Fence, Worker: "wb"}
		unchanged := func(what string) {
			t.Helper()
			m := get(t, actx, o, id)
			if m.State != outbox.Leased || m.Fence != da.Fence || m.Attempts != 1 || !m.AvailableAt.Equal(t0.Add(time.Minute)) || len(m.History) != 0 {
				t.Fatalf("after %s: a's message is %s at fence %d, %d attempts, due %s, %d history entries; want leased to a as claimed", what, m.State, m.Fence, m.Attempts, m.AvailableAt, len(m.History))
			}
		}
		lost, err := o.Heartbeat(bctx, []*outbox.Delivery{forged}, time.Hour)
		if err != nil || len(lost) != 1 {
			t.Fatalf("b's heartbeat of a's message: lost %d, %v; want it lost", len(lost), err)
		}
		unchanged("b's heartbeat")
		if _, err := o.Fail(bctx, forged, errors.New("b's failure")); !errors.Is(err, racefree.ErrNotHeld) || errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("b's Fail of a's message: %v, want ErrNotHeld (no such message)", err)
		}
		unchanged("b's Fail")
		if err := o.Complete(bctx, db, forged); !errors.Is(err, racefree.ErrNotHeld) || errors.Is(err, outbox.ErrDelivered) {
			t.Fatalf("b's Complete of a's message: %v, want ErrNotHeld (no such message)", err)
		}
		unchanged("b's Complete")

		// Delivered by a: b, at a's fence or an older one, learns nothing.
		if err := o.Complete(actx, db, da); err != nil {
			t.Fatal(err)
		}
		if err := o.Complete(bctx, db, forged); !errors.Is(err, racefree.ErrNotHeld) || errors.Is(err, outbox.ErrDelivered) {
			t.Fatalf("b's Complete of a's delivered message: %v, want ErrNotHeld (no such message), not ErrDelivered", err)
		}
		older := *forged
		older.Fence = da.Fence - 1
		if err := o.Complete(bctx, db, &older); !errors.Is(err, racefree.ErrNotHeld) || errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("b's Complete of a's message at an older fence: %v, want ErrNotHeld (no such message), not a stale fence", err)
		}
	})
}

// TestOutside2ATenureThatFailedHoldsNothing holds a tenure whose failure
// ended its lease to nothing: a Heartbeat by it is lost and leaves the
// retry where the failure put it, and a Complete by it is ErrNotHeld and
// leaves the message ready; the same after a permanent failure, which
// leaves the message dead, never turned into a delivery.
func TestOutside2ATenureThatFailedHoldsNothing(t *testing.T) {
	t.Parallel()
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{Backoff: func(int) time.Duration { return time.Hour }})
		for _, c := range []struct {
			name  string
			cause error
			state outbox.State
		}{
			{"retried", errors.New("later"), outbox.Ready},
			{"dead", outbox.Permanent(errors.New("never")), outbox.Dead},
		} {
			id := enqueue(t, ctx, o, db, outbox.Message{Topic: c.name})
			d := claim(t, ctx, o, "w", 1, time.Minute)[0]
			if _, err := o.Fail(ctx, d, c.cause); err != nil {
				t.Fatal(err)
			}
			before := get(t, ctx, o, id)
			if before.State != c.state {
				t.Fatalf("%s: message %d is %s after its failure", c.name, id, before.State)
			}
			lost, err := o.Heartbeat(ctx, []*outbox.Delivery{d}, time.Minute)
			if err != nil || len(lost) != 1 {
				t.Fatalf("%s: a heartbeat of the tenure that failed: lost %d, %v; want it lost", c.name, len(lost), err)
			}
			if err := o.Complete(ctx, db, d); !errors.Is(err, racefree.ErrNotHeld) || errors.Is(err, outbox.ErrDelivered) {
				t.Fatalf("%s: a Complete of the tenure that failed: %v, want ErrNotHeld", c.name, err)
			}
			if m := get(t, ctx, o, id); m.State != c.state || !m.AvailableAt.Equal(before.AvailableAt) {
				t.Fatalf("%s: message %d is %s due %s after the heartbeat and the Complete, want %s due %s", c.name, id, m.State, m.AvailableAt, c.state, before.AvailableAt)
			}
		}
	})
}

// TestOutside2AClaimTakesTheOldestDueFirst holds a claim of n to the n
// messages due longest, not the n oldest ids: a message enqueued first but
// due 10 s later waits for one enqueued after it and due at once.
func TestOutside2AClaimTakesTheOldestDueFirst(t *testing.T) {
	t.Parallel()
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		later := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", NotBefore: t0.Add(10 * time.Second)})
		now := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		clock.Advance(20 * time.Second) // both due
		if ds := claim(t, ctx, o, "w", 1, time.Minute); len(ds) != 1 || ds[0].ID != now {
			t.Fatalf("a claim of one took %v, want %d, due 10 s before %d", ids(ds), now, later)
		}
		if ds := claim(t, ctx, o, "w", 1, time.Minute); len(ds) != 1 || ds[0].ID != later {
			t.Fatalf("the next claim took %v, want %d", ids(ds), later)
		}
	})
}

// TestOutside2APermanentFailureDiesNow holds a message killed by a
// permanent failure, attempts left, to dead since that failure: its
// AvailableAt (dead: since when) is the failure's instant, not the backoff
// it would have waited.
func TestOutside2APermanentFailureDiesNow(t *testing.T) {
	t.Parallel()
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{Backoff: func(int) time.Duration { return time.Hour }})
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", MaxAttempts: 5})
		d := claim(t, ctx, o, "w", 1, time.Minute)[0]
		clock.Advance(time.Second)
		out, err := o.Fail(ctx, d, outbox.Permanent(errors.New("rejected")))
		if err != nil || !out.Dead {
			t.Fatalf("a permanent failure: %+v, %v; want dead", out, err)
		}
		if m := get(t, ctx, o, id); m.State != outbox.Dead || !m.AvailableAt.Equal(clock.Now()) {
			t.Fatalf("message %d is %s since %s, want dead since %s", id, m.State, m.AvailableAt, clock.Now())
		}
	})
}

// TestOutside2HTTPStopsAfterTenRequests holds HTTPHandler's redirects
// that repeat the POST to Go's default policy, which it promises to keep:
// stop after 10 consecutive requests. A chain of 9 redirects ending in a
// 200 is a delivery (10 requests); one of 10 is a failure after 10
// requests, never an eleventh sent.
func TestOutside2HTTPStopsAfterTenRequests(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		// /left/N redirects N more times, then answers 200.
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/left/"))
		if err != nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if n > 0 {
			http.Redirect(w, r, fmt.Sprintf("/left/%d", n-1), http.StatusTemporaryRedirect)
		}
	}))
	defer srv.Close()
	d := &outbox.Delivery{ID: 1, Tenant: "acme", Topic: "t", Payload: []byte("x"), Attempt: 1, MaxAttempts: 3, Fence: 1}
	for _, c := range []struct {
		redirects int
		delivered bool
		requests  int64
	}{{9, true, 10}, {10, false, 10}} {
		requests.Store(0)
		h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: fmt.Sprintf("%s/left/%d", srv.URL, c.redirects)})
		if err != nil {
			t.Fatal(err)
		}
		err = h(context.Background(), d)
		if (err == nil) != c.delivered || requests.Load() != c.requests {
			t.Errorf("a chain of %d redirects: %v after %d requests; want delivered %v after %d", c.redirects, err, requests.Load(), c.delivered, c.requests)
		}
	}
}

// TestOutside2HTTPOptionsRefusedAtTheirEdges holds HTTPHandler's options
// to what it documents: a URL must be absolute http(s) with a host
// (http:///hook is refused, and URLFor's such URL is a permanent failure,
// never sent), and a negative Timeout is an InputError, not the default.
func TestOutside2HTTPOptionsRefusedAtTheirEdges(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"http:///hook", "https://", "https:///hook?x=1"} {
		_, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: u})
		refused(t, "HTTPHandler with the URL "+u, err)
	}
	_, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: "http://127.0.0.1:1/hook", Timeout: -time.Nanosecond})
	refused(t, "HTTPHandler with a Timeout of -1ns", err)

	h, err := outbox.HTTPHandler(outbox.HTTPOptions{URLFor: func(*outbox.Delivery) (string, error) { return "http:///hook", nil }})
	if err != nil {
		t.Fatal(err)
	}
	err = h(context.Background(), &outbox.Delivery{ID: 1, Tenant: "acme", Topic: "t", Attempt: 1, MaxAttempts: 3, Fence: 1})
	if err == nil || !outbox.Classify(err).Permanent || !errors.Is(err, racefree.ErrInvalidInput) {
		t.Fatalf("URLFor's URL without a host: %v, want a permanent failure naming the bad URL", err)
	}
}

// TestOutside2RetryAfterDatePastMaxDelay holds a Retry-After HTTP date
// past MaxDelay to MaxDelay, as a number of seconds past it is: an
// answer asking for two years reads as MaxDelay in the *HTTPError and its
// verdict.
func TestOutside2RetryAfterDatePastMaxDelay(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", time.Now().Add(2*366*24*time.Hour).UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	err = h(context.Background(), &outbox.Delivery{ID: 1, Tenant: "acme", Topic: "t", Attempt: 1, MaxAttempts: 3, Fence: 1})
	var he *outbox.HTTPError
	if !errors.As(err, &he) || he.RetryAfter != outbox.MaxDelay || outbox.Classify(err).RetryAfter != outbox.MaxDelay {
		t.Fatalf("a Retry-After date two years ahead: %v, want a retry after MaxDelay (%s)", err, outbox.MaxDelay)
	}
}

// statusError is an error of a client library's own that carries an HTTP
// status (a StatusError that is no *HTTPError).
type statusError struct{ code int }

func (e *statusError) Error() string   { return "status " + strconv.Itoa(e.code) }
func (e *statusError) HTTPStatus() int { return e.code }

// TestOutside2ClassifyReadsEveryStatusError holds Classify to the status
// of any StatusError, not of *HTTPError alone: a 404 of another type,
// wrapped, is permanent; its 408, 429 and 503 transient, with no delay
// (only an *HTTPError carries a Retry-After).
func TestOutside2ClassifyReadsEveryStatusError(t *testing.T) {
	t.Parallel()
	for code, permanent := range map[int]bool{400: true, 404: true, 408: false, 429: false, 499: true, 500: false, 503: false} {
		err := fmt.Errorf("the client: %w", &statusError{code})
		if v := outbox.Classify(err); v.Permanent != permanent || v.RetryAfter != 0 {
			t.Errorf("Classify of a StatusError %d: %+v, want permanent %v and no delay", code, v, permanent)
		}
	}
}
