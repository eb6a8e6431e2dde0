package outbox_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testdb"
	"github.com/racefree/racefree/outbox"
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
	d := &outbox.Delivery{ID: 42, Topic: "users", Attempt: 3, Payload: []byte(`{"id":7}`), Headers: map[string]string{"Content-Type": "application/json", "X-Trace": "abc"}}
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
		r.Header.Get("X-Trace") != "abc" || r.Header.Get("Racefree-Outbox-Topic") != "users" || r.Header.Get("Racefree-Outbox-Attempt") != "3" || b != `{"id":7}` {
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
