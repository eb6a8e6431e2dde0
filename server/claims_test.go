package server_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestClaimsOverHTTP(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()

		code, body, _ := do(t, h, "POST", "/v1/claims/job-1", `{"holder":"w1","ttl_ms":30000}`)
		if code != 200 || body["holder"] != "w1" || body["fence"] != float64(1) ||
			body["claimed_at"] != "2026-01-02T03:04:05.000Z" || body["expires_at"] != "2026-01-02T03:04:35.000Z" {
			t.Fatalf("acquire: %d %v", code, body)
		}
		code, body, hdr := do(t, h, "POST", "/v1/claims/job-1", `{"holder":"w2","ttl_ms":30000}`)
		if code != 409 || hdr.Get("Content-Type") != "application/problem+json" || body["type"] != "urn:racefree:problem:held" ||
			body["holder"] != "w1" || body["fence"] != float64(1) || body["expires_at"] != "2026-01-02T03:04:35.000Z" {
			t.Fatalf("held: %d %v", code, body)
		}
		if code, body, _ = do(t, h, "POST", "/v1/claims/job-1/renew", `{"holder":"w1","fence":1,"ttl_ms":60000}`); code != 200 || body["expires_at"] != "2026-01-02T03:05:05.000Z" {
			t.Fatalf("renew: %d %v", code, body)
		}
		if code, body, _ = do(t, h, "POST", "/v1/claims/job-1/renew", `{"holder":"w2","fence":1,"ttl_ms":60000}`); code != 409 || body["type"] != "urn:racefree:problem:not-held" {
			t.Fatalf("renew by another: %d %v", code, body)
		}
		if code, body, _ = do(t, h, "GET", "/v1/claims/job-1", ""); code != 200 || body["live"] != true || body["count"] != float64(2) {
			t.Fatalf("get: %d %v", code, body)
		}
		if code, _, _ = do(t, h, "DELETE", "/v1/claims/job-1?holder=w1&fence=1", ""); code != 204 {
			t.Fatalf("release: %d", code)
		}
		if code, body, _ = do(t, h, "POST", "/v1/claims/job-1", `{"holder":"w2","ttl_ms":30000}`); code != 200 || body["fence"] != float64(2) {
			t.Fatalf("acquire after release: %d %v", code, body)
		}
		if code, body, _ = do(t, h, "DELETE", "/v1/claims/job-1?holder=w1&fence=1", ""); code != 409 || body["type"] != "urn:racefree:problem:stale-fence" || body["current_fence"] != float64(2) {
			t.Fatalf("stale release: %d %v", code, body)
		}
		if code, body, _ = do(t, h, "GET", "/v1/claims/nothing-here", ""); code != 404 || body["type"] != "urn:racefree:problem:not-found" {
			t.Fatalf("get missing: %d %v", code, body)
		}
	})
}

func TestClaimsBadInputIs400AndChangesNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		long := strings.Repeat("k", 257)
		for _, tc := range []struct{ method, path, body string }{
			{"POST", "/v1/claims/k", `{"holder":"","ttl_ms":1000}`},
			{"POST", "/v1/claims/k", `{"holder":"` + strings.Repeat("h", 129) + `","ttl_ms":1000}`},
			{"POST", "/v1/claims/k", `{"holder":"w","ttl_ms":0}`},
			{"POST", "/v1/claims/k", `{"holder":"w","ttl_ms":2592000001}`},
			{"POST", "/v1/claims/k", `{"holder":"w"}`},
			{"POST", "/v1/claims/k", `{"holder":"w","ttl_ms":1000,"extra":1}`},
			{"POST", "/v1/claims/k", `{"holder":"w","ttl_ms":"soon"}`},
			{"POST", "/v1/claims/k", `not json`},
			{"POST", "/v1/claims/" + long, `{"holder":"w","ttl_ms":1000}`},
			{"POST", "/v1/claims/k/renew", `{"holder":"w","ttl_ms":1000}`},
			{"DELETE", "/v1/claims/k?holder=w&fence=x", ""},
			{"POST", "/v1/events", `{"source":"s","level":"l"}`},
			{"POST", "/v1/events", `{"source":"s","level":"l","message":"m","window_ms":-1}`},
			{"POST", "/v1/events/fp/result", `{"classification":"c"}`},
		} {
			code, body, hdr := do(t, h, tc.method, tc.path, tc.body)
			if code != 400 || hdr.Get("Content-Type") != "application/problem+json" || body["type"] != "urn:racefree:problem:invalid-input" {
				t.Errorf("%s %s %s: %d %v, want a 400 problem", tc.method, tc.path, tc.body, code, body)
			}
		}
		var n int
		if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM racefree_claims`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d rows, %v; want none", n, err)
		}
	})
}

func TestOneWinnerAmongConcurrentHTTPAcquires(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			codes = map[int]int{}
		)
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, _, _ := do(t, h, "POST", "/v1/claims/hot", fmt.Sprintf(`{"holder":"w%d","ttl_ms":60000}`, i))
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		if codes[http.StatusOK] != 1 || codes[http.StatusConflict] != 63 {
			t.Fatalf("status codes %v; want one 200 and 63 409s", codes)
		}
	})
}

func TestEventsOverHTTP(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		ev := `{"source":"billing","level":"error","message":"charge 12 failed","window_ms":60000}`
		code, first, _ := do(t, h, "POST", "/v1/events", ev)
		if code != 200 || first["process"] != true || first["fence"] != float64(1) || first["count"] != float64(1) || first["first_seen"] != "2026-01-02T03:04:05.000Z" {
			t.Fatalf("first: %d %v", code, first)
		}
		if code, second, _ := do(t, h, "POST", "/v1/events", ev); code != 200 || second["process"] != false || second["count"] != float64(2) {
			t.Fatalf("second: %d %v", code, second)
		}
		fp := first["fingerprint"].(string)
		clock.Advance(time.Minute)
		if code, third, _ := do(t, h, "POST", "/v1/events", ev); code != 200 || third["process"] != true || third["fence"] != float64(2) {
			t.Fatalf("next window: %d %v", code, third)
		}
		code, body, _ := do(t, h, "POST", "/v1/events/"+fp+"/result", `{"fence":1,"classification":"x","external_id":"T-1"}`)
		if code != 409 || body["type"] != "urn:racefree:problem:stale-fence" {
			t.Fatalf("stale result: %d %v", code, body)
		}
		if code, body, _ = do(t, h, "POST", "/v1/events/"+fp+"/result", `{"fence":2,"classification":"card","external_id":"T-2"}`); code != 200 || body["external_id"] != "T-2" {
			t.Fatalf("result: %d %v", code, body)
		}
	})
}

func TestRetriedAcquireWithIdempotencyKeyGetsItsOwnClaim(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		body := `{"holder":"w1","ttl_ms":60000}`
		code, first, _ := do(t, h, "POST", "/v1/claims/job", body, "Idempotency-Key", `"try-1"`)
		if code != 200 {
			t.Fatalf("first: %d %v", code, first)
		}
		// The reply was lost; the client retries the same request.
		code, again, hdr := do(t, h, "POST", "/v1/claims/job", body, "Idempotency-Key", `"try-1"`)
		if code != 200 || again["fence"] != first["fence"] || hdr.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d %v %v", code, again, hdr)
		}
		if code, body, _ := do(t, h, "POST", "/v1/claims/job", `{"holder":"w2","ttl_ms":60000}`, "Idempotency-Key", `"try-1"`); code != 422 {
			t.Fatalf("same key, other holder: %d %v; want 422", code, body)
		}
	})
}

// TestEdgesKeyWithDotSegments checks the escaped form of a path's dot
// segments: a key whose segments between %2F are empty, "." or ".." is
// 400 invalid-input and acquires nothing, one of "..." is a key like any
// other.
func TestEdgesKeyWithDotSegments(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{Logger: slog.New(slog.DiscardHandler)}).Handler()
		body := `{"holder":"w","ttl_ms":60000}`
		for _, key := range []string{"a%2F..%2Fb", "..%2Fb", "a%2F..", "a%2F.%2Fb", "a%2F%2Fb", "%2Fa", "a%2F"} {
			if code, resp, _ := do(t, h, "POST", "/v1/claims/"+key, body); code != 400 || resp["type"] != "urn:racefree:problem:invalid-input" {
				t.Errorf("POST /v1/claims/%s: %d %v, want 400 invalid-input", key, code, resp)
			}
		}
		for _, key := range []string{"a%2F...%2Fb", "...", "a%2F.b", "a%2F..b"} {
			if code, resp, _ := do(t, h, "POST", "/v1/claims/"+key, body); code != 200 {
				t.Errorf("POST /v1/claims/%s: %d %v, want 200", key, code, resp)
			}
		}
	})
}
