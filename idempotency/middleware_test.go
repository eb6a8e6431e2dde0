package idempotency_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree/idempotency"
)

func send(t *testing.T, h http.Handler, method, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, "/v1/orders", strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestMiddlewareRunsOnceAndReplays(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs atomic.Int64
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			body, _ := io.ReadAll(r.Body)
			time.Sleep(20 * time.Millisecond)
			w.Header().Set("Location", fmt.Sprintf("/v1/orders/%d", n))
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"order":%d,"echo":%q}`, n, body)
		}))
		const n = 64
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			bodies  = map[string]int{}
			replays int
		)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					rec := send(t, h, "POST", `"order-42"`, `{"sku":"x"}`)
					if rec.Code == http.StatusConflict {
						if rec.Header().Get("Retry-After") == "" {
							t.Error("409 without Retry-After")
						}
						time.Sleep(5 * time.Millisecond)
						continue
					}
					mu.Lock()
					bodies[fmt.Sprint(rec.Code, rec.Header().Get("Location"), rec.Body.String())]++
					if rec.Header().Get("Idempotent-Replayed") == "true" {
						replays++
					}
					mu.Unlock()
					return
				}
			}()
		}
		wg.Wait()
		if runs.Load() != 1 || len(bodies) != 1 || replays != n-1 {
			t.Fatalf("handler ran %d times; responses %v; %d replays", runs.Load(), bodies, replays)
		}
		for k := range bodies {
			if !strings.HasPrefix(k, "201/v1/orders/1") {
				t.Fatalf("replayed %q; want status, Location and body of the first run", k)
			}
		}
	})
}

func TestMiddlewareErrors(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs atomic.Int64
		status := http.StatusInternalServerError
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(status)
		})
		h := b.store.Middleware(idempotency.MiddlewareOptions{MaxBodyBytes: 64})(next)
		required := b.store.Middleware(idempotency.MiddlewareOptions{Required: true})(next)

		for _, key := range []string{`"unterminated`, `has space`, `""`, strings.Repeat("k", 256), `:YWJj:`} {
			if rec := send(t, h, "POST", key, "{}"); rec.Code != 400 || rec.Header().Get("Content-Type") != "application/problem+json" {
				t.Errorf("key %q: %d, want a 400 problem", key, rec.Code)
			}
		}
		if rec := send(t, required, "POST", "", "{}"); rec.Code != 400 {
			t.Errorf("missing required key: %d, want 400", rec.Code)
		}
		if rec := send(t, h, "POST", "big", strings.Repeat("x", 65)); rec.Code != 413 {
			t.Errorf("large body: %d, want 413", rec.Code)
		}
		if runs.Load() != 0 {
			t.Fatalf("the handler ran %d times on bad input", runs.Load())
		}
		// GET passes through, without a key too.
		if rec := send(t, h, "GET", "", ""); rec.Code != 500 || runs.Load() != 1 {
			t.Fatalf("GET: %d", rec.Code)
		}

		// A 5xx is not stored: the retry runs again, and its 201 is.
		if rec := send(t, h, "POST", "k1", "{}"); rec.Code != 500 {
			t.Fatalf("first: %d", rec.Code)
		}
		status = http.StatusCreated
		if rec := send(t, h, "POST", "k1", "{}"); rec.Code != 201 || rec.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry after 5xx: %d, replayed %q", rec.Code, rec.Header().Get("Idempotent-Replayed"))
		}
		status = http.StatusTeapot
		if rec := send(t, h, "POST", "k1", "{}"); rec.Code != 201 || rec.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d", rec.Code)
		}
		if rec := send(t, h, "POST", "k1", `{"other":1}`); rec.Code != 422 || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("same key, other body: %d, want 422", rec.Code)
		}
		if got := runs.Load(); got != 3 {
			t.Fatalf("handler ran %d times, want 3", got)
		}
	})
}
