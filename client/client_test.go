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
