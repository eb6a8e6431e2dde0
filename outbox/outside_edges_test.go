package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
)

// The tests of this file hold the relay, its HTTP handler and its wake-ups
// at edges written from outside, from the code alone: a Retry-After past
// what a Duration holds, a message's own header beside racefree's, a
// redirect that would drop the payload, a handler cancelled mid-request, a
// failure refused for a message no longer leased, a stopped relay's
// release of a tenure another relay took over, a wake-up for a tenant not
// served, and NOTIFYs spaced by their interval.

// TestEdgesRetryAfterPastMaxDelay holds a Retry-After in seconds at and
// past MaxDelay: exactly MaxDelay's seconds is MaxDelay, more is MaxDelay,
// and so is a number of seconds whose nanoseconds no Duration holds (it
// must not wrap around to a delay of a fraction of a second, or below 0).
func TestEdgesRetryAfterPastMaxDelay(t *testing.T) {
	t.Parallel()
	maxSeconds := int64(outbox.MaxDelay / time.Second)
	for v, want := range map[string]time.Duration{
		"31622399":    outbox.MaxDelay - time.Second,
		"31622400":    outbox.MaxDelay,
		"31622401":    outbox.MaxDelay,
		"9223372037":  outbox.MaxDelay, // times 1e9 is past 2^63: a negative Duration
		"18446744074": outbox.MaxDelay, // times 1e9 is 2^64 and 0.29 s: a Duration of 0.29 s
	} {
		if maxSeconds != 31622400 {
			t.Fatalf("MaxDelay is %d s; the cases assume 31622400", maxSeconds)
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", v)
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		err = h(context.Background(), &outbox.Delivery{ID: 1, Tenant: "acme", Topic: "t", Attempt: 1, MaxAttempts: 3, Fence: 1})
		srv.Close()
		var he *outbox.HTTPError
		if !errors.As(err, &he) || he.RetryAfter != want || outbox.Classify(err).RetryAfter != want {
			t.Errorf("Retry-After: %s: %v, want a retry after %s", v, err, want)
		}
	}
}

// TestEdgesHTTPIdempotencyKeyIsTheMessageID holds the Idempotency-Key of
// a delivery to the message's id, whatever Idempotency-Key header the
// message itself was enqueued with: two messages never share one.
func TestEdgesHTTPIdempotencyKeyIsTheMessageID(t *testing.T) {
	t.Parallel()
	got := make(chan []string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Values("Idempotency-Key")
	}))
	defer srv.Close()
	h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	d := &outbox.Delivery{ID: 42, Tenant: "acme", Topic: "t", Attempt: 1, MaxAttempts: 3, Fence: 1,
		Headers: map[string]string{"Idempotency-Key": "the-senders-own"}}
	if err := h(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if keys := <-got; len(keys) != 1 || keys[0] != "42" {
		t.Fatalf("Idempotency-Key %q, want the message id 42 alone", keys)
	}
}

// TestEdgesHTTPRequestEndsWithItsHandler holds HTTPHandler's request to
// its handler's context: when that ends (a lease lost, the relay stopped),
// the request in flight is abandoned at once, not left to run until the
// receiver answers or Timeout ends it.
func TestEdgesHTTPRequestEndsWithItsHandler(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: srv.URL, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- h(ctx, &outbox.Delivery{ID: 1, Tenant: "acme", Topic: "t", Attempt: 1, MaxAttempts: 3, Fence: 1})
	}()
	<-arrived
	cancel(outbox.ErrLeaseLost)
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case err := <-done:
		if err == nil || outbox.Classify(err).Permanent {
			t.Fatalf("a request cancelled with its handler: %v, want a transient error", err)
		}
	case <-timer.C:
		t.Fatal("the request ran on after its handler's context ended")
	}
}

// TestEdgesRelayFailureOfAMessageNoLongerLeasedIsStale holds the relay's
// count of a failure refused because the message is no longer leased (here
// the handler completed it itself, then failed): it is Stale, like a
// failure of a tenure taken over, never a database error.
func TestEdgesRelayFailureOfAMessageNoLongerLeasedIsStale(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
			if err := o.Complete(ctx, db, d); err != nil {
				return outbox.Permanent(err)
			}
			return errors.New("failed after completing")
		}, &outbox.RelayOptions{PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		waitFor(t, "the failure's verdict", func() bool { st := r.Stats(); return st.Stale+st.Errors+st.Retried+st.Dead > 0 })
		stop()
		if st := r.Stats(); st.Stale != 1 || st.Errors != 0 || st.Retried != 0 || st.Dead != 0 {
			t.Fatalf("stats %+v, want the failure counted Stale alone", st)
		}
		if m := get(t, ctx, o, id); m.State != outbox.Delivered {
			t.Fatalf("message %d is %s, want delivered", id, m.State)
		}
	})
}

// TestEdgesStoppedRelayReleasesOnlyItsOwnTenure holds a stopped relay's
// release to its own tenure: a relay whose lease lapsed and was taken over
// by another worker, stopped while its handler still runs, leaves the new
// tenure leased, and the other worker completes the message.
func TestEdgesStoppedRelayReleasesOnlyItsOwnTenure(t *testing.T) {
	t.Parallel()
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		started := make(chan *outbox.Delivery, 1)
		// A lease of an hour: its heartbeat, every 20 minutes, never runs
		// in this test; one poll, at the start.
		r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
			started <- d
			<-ctx.Done()
			return context.Cause(ctx)
		}, &outbox.RelayOptions{Worker: "a", Lease: time.Hour, PollInterval: time.Hour, ShutdownGrace: -1})
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
		stop() // a's handler is cancelled with ErrRelayStopped, and a releases its tenure
		if m := get(t, ctx, o, id); m.State != outbox.Leased || m.Fence != ds[0].Fence {
			t.Fatalf("after a stopped: message %d is %s at fence %d, want leased to b at fence %d", id, m.State, m.Fence, ds[0].Fence)
		}
		if err := o.Complete(ctx, db, ds[0]); err != nil {
			t.Fatalf("b completes: %v", err)
		}
	})
}

// TestEdgesHTTPRedirectThatDropsThePayloadIsNoDelivery holds a delivery
// to the answer to its POST: a 301, 302 or 303 redirect, which would turn
// the POST into a GET without the payload, is not followed and is the
// delivery's answer (a transient *HTTPError with that status), though the
// page it points to answers a GET 200; a 307 or 308 is followed, the POST
// repeated with its payload, and its 2xx is a delivery. A client of the
// caller's own keeps its CheckRedirect for the redirects followed.
func TestEdgesHTTPRedirectThatDropsThePayloadIsNoDelivery(t *testing.T) {
	t.Parallel()
	type request struct{ method, path, body string }
	got := make(chan request, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- request{r.Method, r.URL.Path, string(b)}
		if code, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/redirect/")); err == nil {
			http.Redirect(w, r, "/target", code)
		}
	}))
	defer srv.Close()
	d := &outbox.Delivery{ID: 7, Tenant: "acme", Topic: "t", Payload: []byte(`{"n":1}`), Attempt: 1, MaxAttempts: 3, Fence: 1}
	for _, code := range []int{301, 302, 303, 307, 308} {
		h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: fmt.Sprintf("%s/redirect/%d", srv.URL, code)})
		if err != nil {
			t.Fatal(err)
		}
		err = h(context.Background(), d)
		first := <-got
		if first.method != http.MethodPost || first.body != `{"n":1}` {
			t.Fatalf("%d: the first request %+v, want the POST of the payload", code, first)
		}
		if code == 307 || code == 308 {
			if second := <-got; err != nil || second != (request{http.MethodPost, "/target", `{"n":1}`}) {
				t.Errorf("%d: %v, then %+v; want the POST of the payload repeated to /target, a delivery", code, err, second)
			}
			continue
		}
		var he *outbox.HTTPError
		if !errors.As(err, &he) || he.Status != code || outbox.Classify(err).Permanent {
			t.Errorf("%d: %v, want a transient HTTPError %d: the GET it redirects to would carry no payload", code, err, code)
		}
		select {
		case r := <-got:
			t.Errorf("%d: a second request %+v, want none", code, r)
		default:
		}
	}

	// The caller's CheckRedirect still judges a redirect that keeps the POST.
	refused := errors.New("no redirects here")
	h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: srv.URL + "/redirect/307", Client: &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return refused },
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h(context.Background(), d); !errors.Is(err, refused) {
		t.Errorf("a 307 through a client that refuses redirects: %v, want its refusal", err)
	}
	<-got
}

// TestEdgesWakeUpOfATenantNotServedClaimsNothing holds RelayOptions.Tenants
// in a relay's wake-ups: woken for a tenant it does not serve (Relay.Wake
// here; a NOTIFY on PostgreSQL names every tenant's enqueues, while an
// Enqueue of its process wakes only a relay that serves it), it claims
// nothing of that tenant; its own tenant's message, enqueued next, it
// delivers at once. Tenants are chosen so that the one not served sorts
// first: a claim for it would come before the served tenant's delivery.
func TestEdgesWakeUpOfATenantNotServedClaimsNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		acme, err := tenant.With(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		globex, err := tenant.With(ctx, "globex")
		if err != nil {
			t.Fatal(err)
		}
		o := newOutbox(t, db, &outbox.Options{NoNotify: true})
		got := make(chan int64, 10)
		r, err := o.NewRelay(func(_ context.Context, d *outbox.Delivery) error {
			got <- d.ID
			return nil
		}, &outbox.RelayOptions{Tenants: []string{"globex"}, PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(runRelay(t, r))
		waitFor(t, "the relay's first poll", func() bool { return r.Stats().Polls > 0 })
		other := enqueue(t, acme, o, db, outbox.Message{Topic: "t"})
		r.Wake("acme")
		mine := enqueue(t, globex, o, db, outbox.Message{Topic: "t"})
		deliveredWithin(t, got, mine, 10*time.Second, "globex's message")
		if m := get(t, acme, o, other); m.State != outbox.Ready || m.Attempts != 0 {
			t.Fatalf("acme's message, a tenant the relay does not serve, is %s after %d attempts, want ready and untouched", m.State, m.Attempts)
		}
	})
}

// TestEdgesNotifyIntervalDoesNotSlide holds Options.NotifyInterval to one
// NOTIFY per interval from the last one sent, not from the last enqueue: a
// tenant enqueueing every 100 ms for 2.5 s with an interval of 1 s
// notifies at its first enqueue and again once each second has passed
// (3 times, 2 when a pause stretched a gap), never only once, as it would
// if every enqueue that skipped its NOTIFY started the interval again.
// The promise is about real time: the test spaces the enqueues by the
// clock.
func TestEdgesNotifyIntervalDoesNotSlide(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	count := notifications(t, db)
	id := fmt.Sprintf("slide-%d", time.Now().UnixNano())
	tctx, err := tenant.With(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	o := newOutbox(t, db, &outbox.Options{NotifyInterval: time.Second})
	first := time.Now()
	for i := 0; time.Since(first) < 2500*time.Millisecond; i++ {
		for time.Since(first) < time.Duration(i)*100*time.Millisecond {
			time.Sleep(time.Millisecond)
		}
		enqueue(t, tctx, o, db, outbox.Message{Topic: "t"})
	}
	if got := count(id); got < 2 || got > 3 {
		t.Fatalf("%d NOTIFYs for enqueues every 100 ms over 2.5 s with an interval of 1 s, want 3 (2 at least)", got)
	}
}
