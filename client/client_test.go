package client_test

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
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/client"
	"github.com/racefree/racefree/internal/testing/conformance"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/server"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// loseFirstReply delivers every request but loses the reply of the first
// one of each path, as a connection cut after the server committed would;
// it records the Idempotency-Key of every attempt.
type loseFirstReply struct {
	mu   sync.Mutex
	seen map[string]bool
	keys []string
}

func (l *loseFirstReply) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, r.Header.Get("Idempotency-Key"))
	if err != nil || l.seen[r.URL.Path] {
		return resp, err
	}
	l.seen[r.URL.Path] = true
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, errors.New("connection reset after the request was sent")
}

// TestClient runs, against one real server on loopback per engine, the
// conformance cases the library passes for claims and quotas, and the
// client's own promises.
func TestClient(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(conformance.T0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		srv := httptest.NewServer(server.New(db, server.Options{Token: "secret"}).Handler())
		defer srv.Close()
		c, err := client.New(srv.URL, &client.Options{Key: "secret", Backoff: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Run("Claims", func(t *testing.T) { conformance.RunClaims(t, c, clock) })
		t.Run("Quotas", func(t *testing.T) { conformance.RunQuotas(t, c, clock) })

		t.Run("ARetryAfterALostReplyCarriesTheSameKey", func(t *testing.T) {
			clock.Set(conformance.T0)
			lose := &loseFirstReply{seen: map[string]bool{}}
			lossy, _ := client.New(srv.URL, &client.Options{Key: "secret", Backoff: time.Millisecond, HTTPClient: &http.Client{Transport: lose}})
			ctx := context.Background()
			p := quota.Policy{Kind: quota.GCRA, Rate: 10, Per: time.Minute, Burst: 10}
			d, err := lossy.Consume(ctx, "lost-reply", 1, p)
			if err != nil || !d.Allowed || d.Remaining != 9 {
				t.Fatalf("consume after a lost reply = %+v, %v; want allowed with 9 remaining", d, err)
			}
			if d, err := c.Consume(ctx, "lost-reply", 1, p); err != nil || d.Remaining != 8 {
				t.Fatalf("next consume = %+v, %v; want 8 remaining: the retry must not be charged again", d, err)
			}
			got, err := lossy.Acquire(ctx, "lost-reply", "me", time.Minute)
			if err != nil || got.Holder != "me" || got.Fence != 1 {
				t.Fatalf("acquire after a lost reply = %+v, %v; want my claim, fence 1", got, err)
			}
			if len(lose.keys) != 4 || lose.keys[0] == "" || lose.keys[0] != lose.keys[1] || lose.keys[2] != lose.keys[3] || lose.keys[0] == lose.keys[2] {
				t.Fatalf("Idempotency-Keys of the attempts = %q; want one per call, the same on its retry", lose.keys)
			}
		})

		t.Run("A503AfterTheCommitIsRetriedAndReplayed", func(t *testing.T) {
			clock.Set(conformance.T0)
			// A proxy in front of the server answers 503 to the first
			// request, after the server served it.
			var once sync.Once
			h := server.New(db, server.Options{Token: "secret"}).Handler()
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				lost := false
				once.Do(func() { lost = true })
				if !lost {
					h.ServeHTTP(w, r)
					return
				}
				h.ServeHTTP(httptest.NewRecorder(), r)
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			defer proxy.Close()
			behind, _ := client.New(proxy.URL, &client.Options{Key: "secret", Backoff: time.Millisecond})
			p := quota.Policy{Kind: quota.GCRA, Rate: 10, Per: time.Minute, Burst: 10}
			if d, err := behind.Consume(context.Background(), "503", 1, p); err != nil || !d.Allowed || d.Remaining != 9 {
				t.Fatalf("consume behind a 503 = %+v, %v; want allowed with 9 remaining, charged once", d, err)
			}
		})

		t.Run("ProblemsKeepTheirRequestIDAndCredentialsAreRefused", func(t *testing.T) {
			anon, _ := client.New(srv.URL, nil)
			_, err := anon.Get(context.Background(), "x")
			var e *client.Error
			if !errors.Is(err, client.ErrUnauthorized) || !errors.As(err, &e) || e.Status != http.StatusUnauthorized || e.RequestID == "" {
				t.Fatalf("get without a key: %v (%+v), want ErrUnauthorized with the request id", err, e)
			}
			if _, err := client.New("localhost:8080", nil); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("New without a scheme: %v, want an InputError", err)
			}
		})
	})
}

// loseFirstDelete loses the reply of the first DELETE, after the server
// handled it, and runs between before the retry goes out.
type loseFirstDelete struct {
	mu      sync.Mutex
	done    bool
	between func()
}

func (l *loseFirstDelete) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil || r.Method != http.MethodDelete || l.done {
		return resp, err
	}
	l.done = true
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	l.between()
	return nil, errors.New("connection reset after the request was sent")
}

// TestReleaseAfterALostReplyMayHaveReleased: a Release whose first reply
// was lost (a transport error, or a 503 after the server released) and
// whose retry is refused because another holder took the freed key
// between them answers an *OutcomeUnknownError matching ErrUnavailable,
// never a stale fence as if the release had been refused; with no
// takeover between them the retry succeeds, and a stale release with no
// lost reply is still a *claim.StaleFenceError.
func TestReleaseAfterALostReplyMayHaveReleased(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		h := server.New(db, server.Options{Token: "secret"}).Handler()
		srv := httptest.NewServer(h)
		defer srv.Close()
		other, _ := client.New(srv.URL, &client.Options{Key: "secret", Backoff: time.Millisecond})
		// takeOver is a worker waiting for key: it takes it the moment it
		// is free, before the retry.
		takeOver := func(t *testing.T, key string) func() {
			return func() {
				if _, err := other.Acquire(ctx, key, "w2", time.Minute); err != nil {
					t.Errorf("w2 acquire of the released key: %v", err)
				}
			}
		}
		// lossy503 is a proxy that serves the first DELETE and answers it
		// 503, as a server whose commit reply was lost does.
		lossy503 := func(t *testing.T, between func()) *client.Client {
			var once sync.Once
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				lost := false
				if r.Method == http.MethodDelete {
					once.Do(func() { lost = true })
				}
				if !lost {
					h.ServeHTTP(w, r)
					return
				}
				h.ServeHTTP(httptest.NewRecorder(), r)
				between()
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			t.Cleanup(proxy.Close)
			c, _ := client.New(proxy.URL, &client.Options{Key: "secret", Backoff: time.Millisecond})
			return c
		}
		lossyTransport := func(t *testing.T, between func()) *client.Client {
			c, _ := client.New(srv.URL, &client.Options{Key: "secret", Backoff: time.Millisecond,
				HTTPClient: &http.Client{Transport: &loseFirstDelete{between: between}}})
			return c
		}
		for _, loss := range []struct {
			name string
			c    func(*testing.T, func()) *client.Client
		}{{"transport error", lossyTransport}, {"503", lossy503}} {
			t.Run(loss.name+"/taken over before the retry", func(t *testing.T) {
				key := "taken-" + loss.name
				c := loss.c(t, takeOver(t, key))
				cl, err := c.Acquire(ctx, key, "w1", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				err = c.Release(ctx, key, "w1", cl.Fence)
				var u *client.OutcomeUnknownError
				if !errors.As(err, &u) || !errors.Is(err, racefree.ErrUnavailable) || errors.Is(err, racefree.ErrStaleFence) {
					t.Fatalf("release after a lost reply, the key taken since: %v; want an *OutcomeUnknownError matching ErrUnavailable, not ErrStaleFence: the release did happen", err)
				}
				var sf *claim.StaleFenceError
				if !errors.As(u.Answer, &sf) || sf.Fence != cl.Fence || sf.Current != cl.Fence+1 {
					t.Fatalf("the retry's refusal = %v; want a *claim.StaleFenceError of fence %d, current %d", u.Answer, cl.Fence, cl.Fence+1)
				}
				if got, err := c.Get(ctx, key); err != nil || got.Holder != "w2" || !got.Live {
					t.Fatalf("get = %+v, %v; want w2's live claim", got, err)
				}
			})
			t.Run(loss.name+"/free at the retry", func(t *testing.T) {
				key := "free-" + loss.name
				c := loss.c(t, func() {})
				cl, err := c.Acquire(ctx, key, "w1", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Release(ctx, key, "w1", cl.Fence); err != nil {
					t.Fatalf("release after a lost reply, nobody took the key: %v; want it released", err)
				}
				if got, err := c.Get(ctx, key); err != nil || got.Live {
					t.Fatalf("get = %+v, %v; want the claim released", got, err)
				}
			})
		}
		t.Run("reaped before the retry", func(t *testing.T) {
			// The lost release freed the key and a reaper deleted its row
			// before the retry, which is refused not-held: the release
			// may well have happened, so its outcome is unknown.
			key := "reaped"
			c := lossyTransport(t, func() {
				if n, err := claim.New(db).Reap(ctx, 0, 100); err != nil || n < 1 {
					t.Errorf("reap: %d, %v", n, err)
				}
			})
			cl, err := c.Acquire(ctx, key, "w1", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Release(ctx, key, "w1", cl.Fence)
			var u *client.OutcomeUnknownError
			if !errors.As(err, &u) || !errors.Is(err, racefree.ErrUnavailable) || !errors.Is(u.Answer, racefree.ErrNotHeld) {
				t.Fatalf("release after a lost reply, the row reaped since: %v; want an *OutcomeUnknownError matching ErrUnavailable, its answer not-held", err)
			}
		})
		t.Run("stale with no lost reply", func(t *testing.T) {
			cl, err := other.Acquire(ctx, "stale", "w1", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := other.Release(ctx, "stale", "w1", cl.Fence); err != nil {
				t.Fatal(err)
			}
			if _, err := other.Acquire(ctx, "stale", "w2", time.Minute); err != nil {
				t.Fatal(err)
			}
			err = other.Release(ctx, "stale", "w1", cl.Fence)
			var sf *claim.StaleFenceError
			var u *client.OutcomeUnknownError
			if !errors.As(err, &sf) || errors.As(err, &u) || errors.Is(err, racefree.ErrUnavailable) {
				t.Fatalf("a stale release answered at once: %v; want a *claim.StaleFenceError alone", err)
			}
		})
	})
}
