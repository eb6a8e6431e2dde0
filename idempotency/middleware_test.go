package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
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

// TestMiddlewareGivesTheHandlerItsCall proves that a handler behind the
// middleware gets its run's Call (CallFrom), whose StepKey is the same in
// every retry of the request: its first run inserts a row and then
// answers 503, as a handler whose commit's reply was lost does (the
// write may have happened); the middleware does not store a 5xx, so the
// retry with the same key runs the handler again, and the row it inserts
// under the same StepKey is the one already there. Another key gets
// another StepKey, and a request without a key passes through with no
// Call.
func TestMiddlewareGivesTheHandlerItsCall(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx := context.Background()
		if _, err := b.db.SQL().ExecContext(ctx, `CREATE TABLE orders_made (step_key TEXT PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		insert := `INSERT INTO orders_made (step_key) VALUES ($1) ON CONFLICT DO NOTHING`
		if b.db.Engine() == racefree.SQLite {
			insert = `INSERT INTO orders_made (step_key) VALUES (?) ON CONFLICT DO NOTHING`
		}
		var (
			mu    sync.Mutex
			keys  []string
			calls int
		)
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			call, ok := idempotency.CallFrom(r.Context())
			mu.Lock()
			calls++
			first := calls == 1
			if ok {
				keys = append(keys, call.StepKey("order"))
			}
			mu.Unlock()
			if !ok {
				w.WriteHeader(http.StatusTeapot)
				return
			}
			if _, err := b.db.SQL().ExecContext(r.Context(), insert, call.StepKey("order")); err != nil {
				t.Errorf("insert: %v", err)
			}
			if first {
				w.WriteHeader(http.StatusServiceUnavailable) // the write's outcome "unknown"
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
		if rec := send(t, h, "POST", `"order-7"`, `{}`); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("first run: %d, want the handler's 503", rec.Code)
		}
		if rec := send(t, h, "POST", `"order-7"`, `{}`); rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") == "true" {
			t.Fatalf("retry: %d, replayed %q; want the handler run again: 201", rec.Code, rec.Header().Get("Idempotent-Replayed"))
		}
		var rows int
		if err := b.db.SQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM orders_made`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != 1 || len(keys) != 2 || keys[0] != keys[1] {
			t.Fatalf("%d rows, step keys %q: want one row, the same step key in both runs", rows, keys)
		}
		if rec := send(t, h, "POST", `"order-8"`, `{}`); rec.Code != http.StatusServiceUnavailable && rec.Code != http.StatusCreated {
			t.Fatalf("another key: %d", rec.Code)
		}
		if len(keys) != 3 || keys[2] == keys[0] {
			t.Fatalf("step keys %q: want another key's to differ", keys)
		}
		if rec := send(t, h, "POST", "", `{}`); rec.Code != http.StatusTeapot {
			t.Fatalf("no key: %d, want the handler's answer without a Call (418)", rec.Code)
		}
	})
}
