package server_test

import (
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testdb"
	"github.com/racefree/racefree/server"
)

func TestQuotasOverHTTP(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		const body = `{"n":1,"policy":{"kind":"gcra","rate":10,"per_ms":1000,"burst":2}}`
		for i, want := range []float64{1, 0} {
			code, got, _ := do(t, h, "POST", "/v1/quotas/user-1/consume", body)
			if code != 200 || got["allowed"] != true || got["remaining"] != want {
				t.Fatalf("charge %d: %d %v", i+1, code, got)
			}
		}
		code, got, hdr := do(t, h, "POST", "/v1/quotas/user-1/consume", body, "Idempotency-Key", `"k-1"`)
		if code != 429 || got["type"] != "urn:racefree:problem:quota-exceeded" || got["retry_after_ms"] != float64(100) ||
			hdr.Get("Retry-After") != "1" || hdr.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("over the limit: %d %v %v", code, got, hdr)
		}
		// A denial wrote nothing and is not stored under its key: once it is
		// due, the same key is charged.
		clock.Advance(100 * time.Millisecond)
		code, got, hdr = do(t, h, "POST", "/v1/quotas/user-1/consume", body, "Idempotency-Key", `"k-1"`)
		if code != 200 || got["remaining"] != float64(0) || hdr.Get("Idempotent-Replayed") != "" {
			t.Fatalf("the retry when due: %d %v", code, got)
		}
		code, got, hdr = do(t, h, "POST", "/v1/quotas/user-1/consume", body, "Idempotency-Key", `"k-1"`)
		if code != 200 || hdr.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("a replay of the charged key: %d %v", code, got)
		}
		for _, bad := range []string{
			`{"n":3,"policy":{"kind":"gcra","rate":10,"per_ms":1000,"burst":2}}`,
			`{"n":1}`,
			`{"n":1,"policy":{"kind":"leaky","rate":10,"per_ms":1000,"burst":2}}`,
			`{"n":1,"policy":{"kind":"window","rate":10,"per_ms":0}}`,
		} {
			if code, got, _ := do(t, h, "POST", "/v1/quotas/user-2/consume", bad); code != 400 || got["type"] != "urn:racefree:problem:invalid-input" {
				t.Fatalf("%s: %d %v", bad, code, got)
			}
		}
	})
}

func TestConcurrentHTTPConsumesAdmitExactlyTheLimit(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{Clock: racefree.NewManualClock(t0)}, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			codes = map[int]int{}
		)
		for range 60 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, _, _ := do(t, h, "POST", "/v1/quotas/hot/consume", `{"policy":{"kind":"window","rate":20,"per_ms":60000}}`)
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		if codes[200] != 20 || codes[429] != 40 {
			t.Fatalf("answers %v, want 20 × 200 and 40 × 429", codes)
		}
	})
}

// TestSlidingWindowQuotaOverHTTP: the route takes a sliding-window policy
// ({"kind":"sliding_window"}) and answers its denial 429 with the exact
// retry_after_ms.
func TestSlidingWindowQuotaOverHTTP(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		const body = `{"n":1,"policy":{"kind":"sliding_window","rate":2,"per_ms":1000}}`
		for i, want := range []float64{1, 0} {
			code, got, _ := do(t, h, "POST", "/v1/quotas/s/consume", body)
			if code != 200 || got["allowed"] != true || got["remaining"] != want {
				t.Fatalf("charge %d: %d %v", i+1, code, got)
			}
		}
		// The 2 units weigh 1 from 500 ms into the next window on.
		code, got, hdr := do(t, h, "POST", "/v1/quotas/s/consume", body)
		if code != 429 || got["retry_after_ms"] != float64(1500) || hdr.Get("Retry-After") != "2" {
			t.Fatalf("over the limit: %d %v %v", code, got, hdr)
		}
		for _, bad := range []string{
			`{"n":3,"policy":{"kind":"sliding_window","rate":2,"per_ms":1000}}`,
			`{"n":1,"policy":{"kind":"sliding_window","rate":1000000000,"per_ms":31622400000}}`,
		} {
			if code, got, _ := do(t, h, "POST", "/v1/quotas/s/consume", bad); code != 400 || got["type"] != "urn:racefree:problem:invalid-input" {
				t.Fatalf("%s: %d %v", bad, code, got)
			}
		}
	})
}
