package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/client"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// faulty is a proxy in front of a real server: it answers the first fail
// requests itself with answer (nil: it drops the connection, a transport
// error), passes the others through, and counts every request.
type faulty struct {
	h      http.Handler
	answer func(w http.ResponseWriter)
	fail   int

	mu   sync.Mutex
	seen int
	got  chan struct{} // receives after each request the proxy answered itself
}

func (f *faulty) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.seen++
	mine := f.seen <= f.fail
	f.mu.Unlock()
	if !mine {
		f.h.ServeHTTP(w, r)
		return
	}
	defer func() {
		select {
		case f.got <- struct{}{}:
		default:
		}
	}()
	if f.answer == nil {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	f.answer(w)
}

func (f *faulty) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen
}

// problem answers a problem of status and type name, with Retry-After
// when retryAfter is not "".
func problem(status int, name, retryAfter string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/problem+json")
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"type":"urn:racefree:problem:` + name + `","title":"` + name + `","status":` + strconv.Itoa(status) + `}`))
	}
}

// TestEdgesRetryClasses: the client retries each class its loop retries
// (a transport error, a 503, a 409 idempotency-in-progress) up to exactly
// Attempts requests and no more, succeeds when the last allowed attempt
// does, and sends every other answer (400, 401, 404, 409 held, 429, 500)
// once,
// never again; a call cancelled while it waits between attempts returns
// at once with the context's error.
func TestEdgesRetryClasses(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		h := server.New(db, server.Options{Token: "secret"}).Handler()
		if _, err := claim.New(db).Acquire(ctx, db, "held", "someone", time.Hour); err != nil {
			t.Fatal(err)
		}
		const attempts = 3
		start := func(t *testing.T, f *faulty, opts client.Options) *client.Client {
			f.h, f.got = h, make(chan struct{}, 1)
			srv := httptest.NewServer(f)
			t.Cleanup(srv.Close)
			opts.Attempts, opts.Backoff = attempts, time.Millisecond
			if opts.Key == "" {
				opts.Key = "secret"
			}
			c, err := client.New(srv.URL, &opts)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		retried := []struct {
			name   string
			answer func(http.ResponseWriter)
			is     func(error) bool
		}{
			{"transport error", nil, func(err error) bool {
				var u *client.UnreachableError
				return errors.As(err, &u) && u.Attempts == attempts && errors.Is(err, client.ErrUnreachable)
			}},
			{"503", problem(503, "unavailable", "0"), func(err error) bool {
				var e *client.Error
				return errors.As(err, &e) && e.Status == 503
			}},
			{"409 in progress", problem(409, "idempotency-in-progress", ""), func(err error) bool {
				var e *client.Error
				return errors.As(err, &e) && e.Status == 409
			}},
		}
		for _, c := range retried {
			t.Run(c.name, func(t *testing.T) {
				// Every attempt fails: exactly Attempts requests, the
				// last answer's error.
				f := &faulty{answer: c.answer, fail: attempts}
				_, err := start(t, f, client.Options{}).Get(ctx, "free")
				if !c.is(err) || f.requests() != attempts {
					t.Fatalf("every attempt failing: %v after %d requests; want its error after exactly %d", err, f.requests(), attempts)
				}
				// The last allowed attempt succeeds: the call does.
				f = &faulty{answer: c.answer, fail: attempts - 1}
				got, err := start(t, f, client.Options{}).Get(ctx, "held")
				if err != nil || got.Holder != "someone" || f.requests() != attempts {
					t.Fatalf("the last attempt succeeding: %+v, %v after %d requests; want the claim after %d", got, err, f.requests(), attempts)
				}
			})
		}
		// Answers that are not retried: one request each, its error.
		for _, c := range []struct {
			name string
			call func(*client.Client) error
			want error
		}{
			{"404 not found", func(c *client.Client) error { _, err := c.Get(ctx, "free"); return err }, racefree.ErrNotFound},
			{"409 held", func(c *client.Client) error {
				_, err := c.Acquire(ctx, "held", "me", time.Minute)
				return err
			}, racefree.ErrHeld},
		} {
			t.Run(c.name, func(t *testing.T) {
				f := &faulty{}
				err := c.call(start(t, f, client.Options{}))
				if !errors.Is(err, c.want) || f.requests() != 1 {
					t.Fatalf("%v after %d requests; want %v after exactly 1", err, f.requests(), c.want)
				}
			})
		}
		// Answers a real server gives where the client checks first (a
		// bad input) or under faults (a 500), from the proxy.
		for _, c := range []struct {
			status int
			name   string
		}{{400, "invalid-input"}, {500, "internal"}, {429, "rate-limited"}} {
			t.Run(strconv.Itoa(c.status)+" "+c.name, func(t *testing.T) {
				f := &faulty{answer: problem(c.status, c.name, "0"), fail: attempts}
				_, err := start(t, f, client.Options{}).Get(ctx, "held")
				var e *client.Error
				if !errors.As(err, &e) || e.Status != c.status || f.requests() != 1 {
					t.Fatalf("%v after %d requests; want its %d after exactly 1", err, f.requests(), c.status)
				}
			})
		}
		t.Run("401 unauthorized", func(t *testing.T) {
			f := &faulty{}
			_, err := start(t, f, client.Options{Key: "wrong"}).Get(ctx, "held")
			if !errors.Is(err, client.ErrUnauthorized) || f.requests() != 1 {
				t.Fatalf("%v after %d requests; want ErrUnauthorized after exactly 1", err, f.requests())
			}
		})
		t.Run("cancelled between attempts", func(t *testing.T) {
			// The server asks for an hour; the caller gives up meanwhile.
			f := &faulty{answer: problem(503, "unavailable", "3600"), fail: attempts}
			c := start(t, f, client.Options{MaxBackoff: time.Hour})
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { _, err := c.Get(cctx, "held"); done <- err }()
			<-f.got // the first attempt was answered 503: the client waits
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) || f.requests() != 1 {
				t.Fatalf("cancelled while waiting: %v after %d requests; want context.Canceled after 1", err, f.requests())
			}
		})
	})
}

// heldServer returns the handler of a server on a new SQLite database,
// with the token "secret", whose claim "held" is someone's for an hour.
func heldServer(t *testing.T) http.Handler {
	t.Helper()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	if _, err := claim.New(db).Acquire(context.Background(), db, "held", "someone", time.Hour); err != nil {
		t.Fatal(err)
	}
	return server.New(db, server.Options{Token: "secret"}).Handler()
}

// TestEdgesWaitsBetweenAttempts: the wait before a retry is the server's
// Retry-After when it asks for more than the client's backoff, and never
// more than MaxBackoff: a Retry-After of an hour under a MaxBackoff of a
// millisecond retries at once, and one of a second under a MaxBackoff of
// an hour waits that second (a lower bound, which a slow machine only
// lengthens), and one too large for a Duration waits MaxBackoff; the
// client's own backoff doubles up to MaxBackoff and no further.
func TestEdgesWaitsBetweenAttempts(t *testing.T) {
	t.Parallel()
	h := heldServer(t)
	ctx := context.Background()
	get := func(retryAfter string, maxBackoff, guard time.Duration) (time.Duration, error) {
		f := &faulty{h: h, answer: problem(503, "unavailable", retryAfter), fail: 1, got: make(chan struct{}, 1)}
		srv := httptest.NewServer(f)
		defer srv.Close()
		c, err := client.New(srv.URL, &client.Options{Key: "secret", Attempts: 2, Backoff: time.Millisecond, MaxBackoff: maxBackoff})
		if err != nil {
			t.Fatal(err)
		}
		gctx, cancel := context.WithTimeout(ctx, guard)
		defer cancel()
		start := time.Now()
		_, err = c.Get(gctx, "held")
		return time.Since(start), err
	}
	if _, err := get("3600", time.Millisecond, time.Minute); err != nil {
		t.Fatalf("Retry-After of an hour, MaxBackoff 1ms: %v; want the retry at once, and the claim", err)
	}
	took, err := get("1", time.Hour, time.Minute)
	if err != nil || took < time.Second {
		t.Fatalf("Retry-After 1, MaxBackoff an hour: %v after %v; want the claim after at least 1s", err, took)
	}
	// Seconds whose nanoseconds pass 2^64 (about 0.29 s once wrapped
	// round) ask for more than MaxBackoff: the wait is MaxBackoff.
	took, err = get("18446744074", time.Second, time.Minute)
	if err != nil || took < time.Second {
		t.Fatalf("Retry-After 18446744074, MaxBackoff 1s: %v after %v; want the claim after at least 1s", err, took)
	}
	// Without a Retry-After the wait doubles from Backoff, never past
	// MaxBackoff: six waits of at most 50 ms, where 50 ms doubled six
	// times would take 3.15 s.
	f := &faulty{h: h, answer: problem(503, "unavailable", ""), fail: 6, got: make(chan struct{}, 8)}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, err := client.New(srv.URL, &client.Options{Key: "secret", Attempts: 7, Backoff: 50 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	defer cancel()
	if _, err := c.Get(gctx, "held"); err != nil {
		t.Fatalf("six 503s, Backoff and MaxBackoff 50ms: %v; want the claim well within 2.5s", err)
	}
}

// TestEdgesAnswersBetweenTheServerAndTheClient: what a proxy or the
// network may answer instead of the server. A 503 without a problem body
// (a proxy's page) matches racefree.ErrUnavailable after its retries; a
// 200 or a problem whose body was cut short is retried like a lost reply,
// never decoded as it is; Attempts 0 is the default, five; and a call
// whose context ends during its last attempt returns the context's error,
// not "server unreachable".
func TestEdgesAnswersBetweenTheServerAndTheClient(t *testing.T) {
	t.Parallel()
	h := heldServer(t)
	ctx := context.Background()
	start := func(f *faulty, attempts int) *client.Client {
		f.h, f.got = h, make(chan struct{}, 1)
		srv := httptest.NewServer(f)
		t.Cleanup(srv.Close)
		c, err := client.New(srv.URL, &client.Options{Key: "secret", Attempts: attempts, Backoff: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	page := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("<html><body>Service Unavailable</body></html>"))
	}
	f := &faulty{answer: page, fail: 2}
	if _, err := start(f, 2).Get(ctx, "held"); !errors.Is(err, racefree.ErrUnavailable) || f.requests() != 2 {
		t.Fatalf("a proxy's 503 page: %v after %d requests; want ErrUnavailable after 2", err, f.requests())
	}

	cut := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"key":"held","holder":"nob`))
	}
	f = &faulty{answer: cut, fail: 1}
	if got, err := start(f, 2).Get(ctx, "held"); err != nil || got.Holder != "someone" || f.requests() != 2 {
		t.Fatalf("a reply cut short: %+v, %v after %d requests; want the claim from the retry, after 2", got, err, f.requests())
	}

	// A problem cut short likewise: read whole it would be the held
	// claim's 409, but cut it is no answer at all.
	cutProblem := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"type":"urn:racefree:problem:he`))
	}
	f = &faulty{answer: cutProblem, fail: 1}
	if _, err := start(f, 2).Acquire(ctx, "held", "me", time.Minute); !errors.Is(err, racefree.ErrHeld) || f.requests() != 2 {
		t.Fatalf("a problem cut short: %v after %d requests; want the retry's ErrHeld, after 2", err, f.requests())
	}

	// Attempts 0 is the default, five: a server that drops every
	// connection gets five requests.
	f = &faulty{h: h, fail: 100, got: make(chan struct{}, 1)}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	dflt, err := client.New(srv.URL, &client.Options{Key: "secret", Backoff: time.Millisecond, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var unreachable *client.UnreachableError
	if _, err := dflt.Get(ctx, "held"); !errors.As(err, &unreachable) || f.requests() != 5 {
		t.Fatalf("Attempts 0, every connection dropped: %v after %d requests; want an *UnreachableError after the default 5", err, f.requests())
	}

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f = &faulty{answer: func(w http.ResponseWriter) {
		cancel()
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}, fail: 1}
	_, err = start(f, 1).Get(cctx, "held")
	var u *client.UnreachableError
	if !errors.Is(err, context.Canceled) || errors.As(err, &u) {
		t.Fatalf("cancelled during the last attempt: %v; want context.Canceled, not an *UnreachableError", err)
	}
}

// TestEdgesClientBoundsBeforeAnyRequest: New refuses a server URL with no
// host or of another scheme than http and https; a claim's TTL of
// exactly claim.MinTTL and claim.MaxTTL is sent, and one with a fraction
// of a millisecond is an InputError before any request, as the library
// refuses it.
func TestEdgesClientBoundsBeforeAnyRequest(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"http:///v1", "https://", "ftp://example.com", "file:///tmp/x", "ws://localhost:8080"} {
		if _, err := client.New(u, nil); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("New(%q): %v; want an InputError", u, err)
		}
	}
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	f := &faulty{h: server.New(db, server.Options{Token: "secret"}).Handler()}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, err := client.New(srv.URL, &client.Options{Key: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, ttl := range []time.Duration{claim.MinTTL, claim.MaxTTL} {
		key := "k" + strconv.Itoa(i)
		if cl, err := c.Acquire(ctx, key, "w", ttl); err != nil || cl.ExpiresAt.Sub(cl.ClaimedAt) != ttl {
			t.Fatalf("ttl %v: %+v, %v; want a claim of exactly that ttl", ttl, cl, err)
		}
	}
	before := f.requests()
	if _, err := c.Acquire(ctx, "k", "w", claim.MinTTL+time.Millisecond/2); !errors.Is(err, racefree.ErrInvalidInput) || f.requests() != before {
		t.Fatalf("a ttl with half a millisecond: %v after %d requests; want an InputError and none", err, f.requests()-before)
	}
}
