package outbox_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
)

// TestHTTPHandlerClassifiesAnswers: a 2xx is a delivery; 4xx other than
// 408 and 429 permanent; 408, 429, 5xx and network errors transient, with
// the answer's Retry-After (seconds or an HTTP date).
func TestHTTPHandlerClassifiesAnswers(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []*http.Request
		body []string
	)
	answer := map[string]func(w http.ResponseWriter){
		"/ok":      func(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) },
		"/created": func(w http.ResponseWriter) { w.WriteHeader(http.StatusCreated) },
		"/bad": func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, "no such user")
		},
		"/gone":    func(w http.ResponseWriter) { w.WriteHeader(http.StatusGone) },
		"/timeout": func(w http.ResponseWriter) { w.WriteHeader(http.StatusRequestTimeout) },
		"/slowdown": func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusTooManyRequests)
		},
		"/down": func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", time.Now().Add(90*time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
		},
		"/broken":   func(w http.ResponseWriter) { w.WriteHeader(http.StatusInternalServerError) },
		"/redirect": func(w http.ResponseWriter) { w.WriteHeader(http.StatusMultipleChoices) },
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r)
		body = append(body, string(b))
		mu.Unlock()
		answer[r.URL.Path](w)
	}))
	defer srv.Close()
	// Racefree- headers stored before Enqueue refused them are not sent.
	d := &outbox.Delivery{ID: 42, Tenant: "acme", Fence: 9, Topic: "users", Attempt: 3, Payload: []byte(`{"id":7}`), Headers: map[string]string{
		"Content-Type": "application/json", "X-Trace": "abc", "racefree-outbox-tenant": "globex", "Racefree-Signature": "forged"}}
	for _, c := range []struct {
		path       string
		ok, perm   bool
		retryAfter time.Duration
	}{
		{"/ok", true, false, 0},
		{"/created", true, false, 0},
		{"/bad", false, true, 0},
		{"/gone", false, true, 0},
		{"/timeout", false, false, 0},
		{"/slowdown", false, false, 5 * time.Second},
		{"/down", false, false, 90 * time.Second},
		{"/broken", false, false, 0},
		{"/redirect", false, false, 0},
	} {
		h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: srv.URL + c.path, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		err = h(context.Background(), d)
		if c.ok != (err == nil) {
			t.Fatalf("%s: %v", c.path, err)
		}
		if c.ok {
			continue
		}
		var he *outbox.HTTPError
		if !errors.As(err, &he) {
			t.Fatalf("%s: %T %v, want an *HTTPError", c.path, err, err)
		}
		v := outbox.Classify(err)
		if v.Permanent != c.perm {
			t.Errorf("%s: permanent %v, want %v", c.path, v.Permanent, c.perm)
		}
		if c.retryAfter > 0 && (v.RetryAfter < c.retryAfter-2*time.Second || v.RetryAfter > c.retryAfter) {
			t.Errorf("%s: retry after %s, want about %s", c.path, v.RetryAfter, c.retryAfter)
		}
		if c.retryAfter == 0 && v.RetryAfter != 0 {
			t.Errorf("%s: retry after %s, want none", c.path, v.RetryAfter)
		}
	}
	mu.Lock()
	r, b := seen[0], body[0]
	mu.Unlock()
	if r.Method != http.MethodPost || r.Header.Get("Idempotency-Key") != "42" || r.Header.Get("Content-Type") != "application/json" ||
		r.Header.Get("X-Trace") != "abc" || r.Header.Get("Racefree-Outbox-Topic") != "users" || r.Header.Get("Racefree-Outbox-Attempt") != "3" || b != `{"id":7}` ||
		r.Header.Get("Racefree-Outbox-Tenant") != "acme" || r.Header.Get("Racefree-Outbox-Fence") != "9" || len(r.Header.Values("Racefree-Outbox-Tenant")) != 1 ||
		r.Header.Get("Racefree-Signature") != "" {
		t.Fatalf("request: %s %v %q", r.Method, r.Header, b)
	}
	// A network error is transient.
	h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: "http://127.0.0.1:1/unreachable", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := h(context.Background(), d); err == nil || outbox.Classify(err).Permanent {
		t.Fatalf("unreachable: %v, want a transient error", err)
	}
	if _, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: "ftp://x"}); !errors.Is(err, racefree.ErrInvalidInput) {
		t.Fatalf("ftp URL: %v", err)
	}
}

// TestHTTPDeliveryIsExactlyOnceInEffect: a receiver that fails at first
// and records Idempotency-Key applies each message once, however often
// the relay sends it.
func TestHTTPDeliveryIsExactlyOnceInEffect(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		var (
			mu      sync.Mutex
			hits    = map[string]int{}
			applied = map[string]bool{}
		)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := r.Header.Get("Idempotency-Key")
			mu.Lock()
			defer mu.Unlock()
			hits[key]++
			if hits[key] == 1 {
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			applied[key] = true
			w.WriteHeader(http.StatusOK)
		}))
		defer srv.Close()
		h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		o := newOutbox(t, db, &outbox.Options{Backoff: func(int) time.Duration { return time.Millisecond }})
		r, err := o.NewRelay(h, &outbox.RelayOptions{PollInterval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		const n = 20
		for range n {
			enqueue(t, ctx, o, db, outbox.Message{Topic: "t", Payload: []byte("x")})
		}
		waitFor(t, "every message applied", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(applied) == n
		})
		stop()
		for k, c := range hits {
			if c != 2 {
				t.Errorf("message %s sent %d times, want 2 (one failure, one success)", k, c)
			}
		}
		if s := r.Stats(); s.Delivered != n || s.Retried != n || s.Dead != 0 {
			t.Fatalf("relay stats %+v", s)
		}
	})
}

// TestHTTPDeliveryNamesTheTenantAndTheFence: a relay serving two tenants
// sends each message with Racefree-Outbox-Tenant, the tenant that enqueued
// it, and Racefree-Outbox-Fence, the fence of the lease it runs under,
// which grows on a re-lease after a lapse and after a redrive (whose
// attempts start again at 1): a receiver that keeps the highest fence of
// each message refuses the relay whose lease lapsed.
func TestHTTPDeliveryNamesTheTenantAndTheFence(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		type seen struct {
			tenant string
			fence  int64
		}
		var (
			mu      sync.Mutex
			got     = map[string][]seen{} // by Idempotency-Key
			highest = map[string]int64{}
		)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := r.Header.Get("Idempotency-Key")
			fence, err := strconv.ParseInt(r.Header.Get("Racefree-Outbox-Fence"), 10, 64)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			got[key] = append(got[key], seen{r.Header.Get("Racefree-Outbox-Tenant"), fence})
			if fence < highest[key] {
				w.WriteHeader(http.StatusConflict) // a stale relay
				return
			}
			highest[key] = fence
			w.WriteHeader(http.StatusNoContent)
		}))
		defer srv.Close()
		h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		last := func(id int64) seen {
			t.Helper()
			mu.Lock()
			defer mu.Unlock()
			s := got[strconv.FormatInt(id, 10)]
			if len(s) == 0 {
				t.Fatalf("message %d never arrived", id)
			}
			return s[len(s)-1]
		}
		o := newOutbox(t, db, nil)
		var (
			leasedMu sync.Mutex
			leased   = map[int64]int64{} // the fence of each delivery the relay handed over
		)
		r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
			leasedMu.Lock()
			leased[d.ID] = d.Fence
			leasedMu.Unlock()
			return h(ctx, d)
		}, &outbox.RelayOptions{PollInterval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		acme, _ := tenant.With(context.Background(), "acme")
		globex, _ := tenant.With(context.Background(), "globex")
		a := enqueue(t, acme, o, db, outbox.Message{Topic: "t", Payload: []byte("a")})
		b := enqueue(t, globex, o, db, outbox.Message{Topic: "t", Payload: []byte("b")})
		waitFor(t, "both messages delivered", func() bool { return r.Stats().Delivered == 2 })
		stop()
		for id, want := range map[int64]string{a: "acme", b: "globex"} {
			leasedMu.Lock()
			fence := leased[id]
			leasedMu.Unlock()
			if s := last(id); s.tenant != want || s.fence != fence || fence < 1 {
				t.Errorf("message %d arrived as %+v, want tenant %s and the lease's fence %d", id, s, want, fence)
			}
		}

		// A lease that lapses and is taken over: the new one's fence is
		// higher, and the receiver then refuses the old holder.
		c := enqueue(t, acme, o, db, outbox.Message{Topic: "t", Payload: []byte("c")})
		d1 := claim(t, acme, o, "w1", 1, outbox.MinLease)[0]
		if err := h(acme, d1); err != nil {
			t.Fatal(err)
		}
		if s := last(c); s.tenant != "acme" || s.fence != d1.Fence {
			t.Fatalf("first lease: arrived as %+v, want acme and fence %d", s, d1.Fence)
		}
		var d2 *outbox.Delivery
		waitFor(t, "the lease to lapse and be taken over", func() bool {
			ds, err := o.Claim(acme, "w2", 1, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if len(ds) == 1 {
				d2 = ds[0]
			}
			return d2 != nil
		})
		if d2.ID != c || d2.Fence <= d1.Fence {
			t.Fatalf("re-lease: message %d fence %d, after fence %d", d2.ID, d2.Fence, d1.Fence)
		}
		if err := h(acme, d2); err != nil {
			t.Fatal(err)
		}
		if s := last(c); s.fence != d2.Fence {
			t.Fatalf("re-lease: arrived with fence %d, want %d", s.fence, d2.Fence)
		}
		var he *outbox.HTTPError
		if err := h(acme, d1); !errors.As(err, &he) || he.Status != http.StatusConflict {
			t.Fatalf("the lapsed holder's request: %v, want the receiver's 409", err)
		}

		// A redrive starts the attempts again, never the fence.
		if _, err := o.Fail(acme, d2, outbox.Permanent(errors.New("no"))); err != nil {
			t.Fatal(err)
		}
		if _, err := o.Redrive(acme, db, outbox.Filter{IDs: []int64{c}}); err != nil {
			t.Fatal(err)
		}
		d3 := claim(t, acme, o, "w3", 1, time.Minute)[0]
		if d3.Attempt != 1 || d3.Fence <= d2.Fence {
			t.Fatalf("after a redrive: attempt %d fence %d, want 1 and above %d", d3.Attempt, d3.Fence, d2.Fence)
		}
		if err := h(acme, d3); err != nil {
			t.Fatalf("after a redrive: %v", err)
		}
		if s := last(c); s.fence != d3.Fence {
			t.Fatalf("after a redrive: arrived with fence %d, want %d", s.fence, d3.Fence)
		}
	})
}

// TestReservedHeadersAreRefused: a message header whose name starts with
// Racefree- (in any case, the prefix alone too) is an InputError at
// Enqueue and nothing is stored: tenant acme cannot claim to be globex.
func TestReservedHeadersAreRefused(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		o := newOutbox(t, db, nil)
		acme, _ := tenant.With(context.Background(), "acme")
		for _, name := range []string{"racefree-outbox-tenant", "Racefree-Outbox-Tenant", "RACEFREE-OUTBOX-FENCE", "Racefree-Outbox-Topic", "rAcEfReE-anything", "racefree-"} {
			_, err := o.Enqueue(acme, db, outbox.Message{Topic: "t", Headers: map[string]string{"X-Fine": "1", name: "globex"}})
			var ie *racefree.InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), name) {
				t.Errorf("%s: %v, want an InputError naming it", name, err)
			}
		}
		if s, err := o.Stats(acme, db); err != nil || *s != (outbox.Stats{}) {
			t.Fatalf("stats %+v, %v: want nothing stored", s, err)
		}
		// Names that merely contain the word, or are shorter than the
		// prefix, are the message's own.
		enqueue(t, acme, o, db, outbox.Message{Topic: "t", Headers: map[string]string{"X-Racefree-Outbox-Tenant": "1", "Racefree": "2", "R": "3"}})
	})
}

// TestEdgesHTTPErrorText: an answer's error, as the history and the logs
// show it, names the status, the Retry-After only when there was one, and
// the body's first bytes only when there were some.
func TestEdgesHTTPErrorText(t *testing.T) {
	for _, c := range []struct {
		err  outbox.HTTPError
		want string
	}{
		{outbox.HTTPError{Status: 500}, "HTTP 500"},
		{outbox.HTTPError{Status: 503, RetryAfter: 2 * time.Second}, "HTTP 503 (Retry-After 2s)"},
		{outbox.HTTPError{Status: 404, Body: "no such hook"}, "HTTP 404: no such hook"},
		{outbox.HTTPError{Status: 429, RetryAfter: time.Millisecond, Body: "slow down"}, "HTTP 429 (Retry-After 1ms): slow down"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.err, got, c.want)
		}
	}
}
