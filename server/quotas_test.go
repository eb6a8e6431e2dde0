package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestQuotasOverHTTP: the route charges (200) and refuses (429 with
// Retry-After, retry_after_ms, remaining and reset_at), and both answers carry the decision's
// RateLimit-Policy and RateLimit fields, as quota.Middleware formats them
// and as the OpenAPI document promises; under an Idempotency-Key a 429 is
// not stored, a charge is, and its replay carries the first answer's
// fields, however late it comes; bad input is 400 with no RateLimit.
func TestQuotasOverHTTP(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		// A bucket of 2 refilling one unit every 100 ms: full again 200 ms
		// after it was empty, w=1 second rounded up.
		const body = `{"n":1,"policy":{"kind":"gcra","rate":10,"per_ms":1000,"burst":2}}`
		rateLimit := func(what string, hdr http.Header, want string) {
			t.Helper()
			if got := hdr.Get("RateLimit-Policy"); got != `"default";q=2;w=1` {
				t.Fatalf("%s: RateLimit-Policy %q, want %q", what, got, `"default";q=2;w=1`)
			}
			if got := hdr.Get("RateLimit"); got != want {
				t.Fatalf("%s: RateLimit %q, want %q", what, got, want)
			}
		}
		for i, want := range []float64{1, 0} {
			code, got, hdr := do(t, h, "POST", "/v1/quotas/user-1/consume", body)
			if code != 200 || got["allowed"] != true || got["remaining"] != want {
				t.Fatalf("charge %d: %d %v", i+1, code, got)
			}
			rateLimit(fmt.Sprintf("charge %d", i+1), hdr, fmt.Sprintf(`"default";r=%v;t=1`, want))
		}
		code, got, hdr := do(t, h, "POST", "/v1/quotas/user-1/consume", body, "Idempotency-Key", `"k-1"`)
		if code != 429 || got["type"] != "urn:racefree:problem:quota-exceeded" || got["retry_after_ms"] != float64(100) ||
			got["remaining"] != float64(0) || got["reset_at"] != t0.Add(200*time.Millisecond).Format("2006-01-02T15:04:05.000Z") ||
			hdr.Get("Retry-After") != "1" || hdr.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("over the limit: %d %v %v", code, got, hdr)
		}
		rateLimit("over the limit", hdr, `"default";r=0;t=1`)
		// A denial wrote nothing and is not stored under its key: once it is
		// due, the same key is charged.
		clock.Advance(100 * time.Millisecond)
		code, got, hdr = do(t, h, "POST", "/v1/quotas/user-1/consume", body, "Idempotency-Key", `"k-1"`)
		if code != 200 || got["remaining"] != float64(0) || hdr.Get("Idempotent-Replayed") != "" {
			t.Fatalf("the retry when due: %d %v", code, got)
		}
		rateLimit("the retry when due", hdr, `"default";r=0;t=1`)
		// The replay, long after the bucket filled up again, is the first
		// answer: its body and its fields, not the key as it is now.
		clock.Advance(5 * time.Second)
		code, got, hdr = do(t, h, "POST", "/v1/quotas/user-1/consume", body, "Idempotency-Key", `"k-1"`)
		if code != 200 || hdr.Get("Idempotent-Replayed") != "true" || got["remaining"] != float64(0) {
			t.Fatalf("a replay of the charged key: %d %v", code, got)
		}
		rateLimit("the replay", hdr, `"default";r=0;t=1`)
		for _, status := range []string{"200", "429"} {
			for _, name := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
				if want := name != "Retry-After" || status == "429"; documented(t, "post", "/v1/quotas/{key}/consume", status, name) != want {
					t.Errorf("the OpenAPI document's %s answer of the route: %s documented %v, want %v", status, name, !want, want)
				}
			}
		}
		for _, bad := range []string{
			`{"n":3,"policy":{"kind":"gcra","rate":10,"per_ms":1000,"burst":2}}`,
			`{"n":1}`,
			`{"n":1,"policy":{"kind":"leaky","rate":10,"per_ms":1000,"burst":2}}`,
			`{"n":1,"policy":{"kind":"window","rate":10,"per_ms":0}}`,
			// 1 per 366 days with a burst of 3×10^8: the bucket overflows BIGINT.
			`{"n":1,"policy":{"kind":"gcra","rate":1,"per_ms":31622400000,"burst":300000000}}`,
		} {
			code, got, hdr := do(t, h, "POST", "/v1/quotas/user-2/consume", bad, "Idempotency-Key", `"k-bad"`)
			if code != 400 || got["type"] != "urn:racefree:problem:invalid-input" || hdr.Get("RateLimit") != "" || hdr.Get("RateLimit-Policy") != "" {
				t.Fatalf("%s: %d %v %v", bad, code, got, hdr)
			}
		}
	})
}

// documented reports whether the OpenAPI document promises the header
// name on the status answer of method path, and describes it in
// components.headers.
func documented(t *testing.T, method, path, status, name string) bool {
	t.Helper()
	raw, err := json.Marshal(server.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Headers map[string]json.RawMessage `json:"headers"`
			} `json:"responses"`
		} `json:"paths"`
		Components struct {
			Headers map[string]struct {
				Description string `json:"description"`
			} `json:"headers"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	_, ok := doc.Paths[path][method].Responses[status].Headers[name]
	return ok && doc.Components.Headers[name].Description != ""
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
