package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// The tests of this file hold the server's plumbing at its edges: the
// credential, the routing of what matches no route, the request body and
// its media type, the Idempotency-Key's answers, Retry-After's unit and
// rounding, the doctor on /readyz and the OpenAPI document's security and
// headers.

// sendRaw serves req on h and returns the recorder.
func sendRaw(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestEdgesCredentialAtItsSeams: a request with two Authorization headers
// is 401 even when the first is a valid key (a proxy's own credential
// behind the client's must not let it through); a /v1/ path that matches
// no route is 401 to a caller without a credential, never 404 or 405
// (which would tell which paths exist), and 404 no-route or 405 with
// Allow to a valid key.
func TestEdgesCredentialAtItsSeams(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{RequireKey: true}).Handler()
		key := newKey(t, db, tenantA, apikey.AllScopes)

		req := httptest.NewRequest("GET", "/v1/claims/k", nil)
		req.Header.Add("Authorization", "Bearer "+key)
		req.Header.Add("Authorization", "Bearer not-a-key")
		if rec := sendRaw(h, req); rec.Code != 401 || rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("two Authorization headers, the first valid: %d %s, want 401 with WWW-Authenticate", rec.Code, rec.Body)
		}

		for _, c := range []struct{ method, path string }{{"GET", "/v1/nothing-here"}, {"PUT", "/v1/claims/k"}} {
			if code, body, _ := do(t, h, c.method, c.path, ""); code != 401 || body["type"] != server.ProblemType("unauthorized") {
				t.Errorf("%s %s without a credential: %d %v, want 401 unauthorized", c.method, c.path, code, body)
			}
		}
		if code, body, _ := do(t, h, "GET", "/v1/nothing-here", "", bearerOf(key)...); code != 404 || body["type"] != server.ProblemType("no-route") {
			t.Errorf("GET /v1/nothing-here with a key: %d %v, want 404 no-route", code, body)
		}
		code, body, hdr := do(t, h, "PUT", "/v1/claims/k", "", bearerOf(key)...)
		if allow := hdr.Get("Allow"); code != 405 || body["type"] != server.ProblemType("method-not-allowed") ||
			!strings.Contains(allow, "POST") || !strings.Contains(allow, "DELETE") || !strings.Contains(allow, "GET") {
			t.Errorf("PUT /v1/claims/k with a key: %d %v Allow %q, want 405 with Allow listing GET, POST and DELETE", code, body, allow)
		}
	})
}

// TestEdgesIdempotencyKeyAnswers: a malformed Idempotency-Key is 400
// idempotency-key-malformed, not invalid-input; an answer under a key,
// first and replayed, carries Cache-Control: no-store; a stale-fence
// refusal (an outcome the route decided) is stored and replayed like a
// success.
func TestEdgesIdempotencyKeyAnswers(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		if code, body, _ := do(t, h, "POST", "/v1/claims/m", `{"holder":"a","ttl_ms":1000}`, "Idempotency-Key", `""`); code != 400 ||
			body["type"] != server.ProblemType("idempotency-key-malformed") {
			t.Errorf("malformed Idempotency-Key: %d %v, want 400 idempotency-key-malformed", code, body)
		}

		for i, replayed := range []string{"", "true"} {
			code, body, hdr := do(t, h, "POST", "/v1/claims/c", `{"holder":"a","ttl_ms":1000}`, "Idempotency-Key", `"cache"`)
			if code != 200 || hdr.Get("Cache-Control") != "no-store" || hdr.Get("Idempotent-Replayed") != replayed {
				t.Errorf("answer %d under a key: %d %v, Cache-Control %q Idempotent-Replayed %q; want 200, no-store, %q",
					i+1, code, body, hdr.Get("Cache-Control"), hdr.Get("Idempotent-Replayed"), replayed)
			}
		}

		observe := `{"source":"s","level":"error","message":"m","fingerprint":"fp","window_ms":1000}`
		if code, body, _ := do(t, h, "POST", "/v1/events", observe); code != 200 {
			t.Fatalf("observe: %d %v", code, body)
		}
		clock.Advance(1001 * time.Millisecond)
		if code, body, _ := do(t, h, "POST", "/v1/events", observe); code != 200 {
			t.Fatalf("observe in the next window: %d %v", code, body)
		}
		for i, replayed := range []string{"", "true"} {
			code, body, hdr := do(t, h, "POST", "/v1/events/fp/result", `{"fence":1,"classification":"c"}`, "Idempotency-Key", `"stale"`)
			if code != 409 || body["type"] != server.ProblemType("stale-fence") || hdr.Get("Idempotent-Replayed") != replayed {
				t.Errorf("stale record %d under a key: %d %v Idempotent-Replayed %q; want 409 stale-fence, %q", i+1, code, body, hdr.Get("Idempotent-Replayed"), replayed)
			}
		}
	})
}

// TestEdgesBodyAndMediaType: a JSON body labelled with a charset
// parameter is JSON; a body with data after its object, or with a raw
// control character inside a string, is 400 and acquires nothing, on the
// flat path's type as on the strict one's.
func TestEdgesBodyAndMediaType(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		if code, body, _ := do(t, h, "POST", "/v1/claims/cs", `{"holder":"a","ttl_ms":1000}`, "Content-Type", "application/json; charset=utf-8"); code != 200 {
			t.Errorf("application/json; charset=utf-8: %d %v, want 200", code, body)
		}
		for _, bad := range []string{
			`{"holder":"a","ttl_ms":1000} x`,
			`{"holder":"a","ttl_ms":1000}{"holder":"b","ttl_ms":1000}`,
			"{\"holder\":\"a\tb\",\"ttl_ms\":1000}",
			"{\"holder\":\"a\nb\",\"ttl_ms\":1000}",
		} {
			if code, body, _ := do(t, h, "POST", "/v1/claims/bad", bad); code != 400 || body["type"] != server.ProblemType("invalid-input") {
				t.Errorf("body %q: %d %v, want 400 invalid-input", bad, code, body)
			}
		}
		if code, body, _ := do(t, h, "GET", "/v1/claims/bad", ""); code != 404 {
			t.Errorf("after the refused bodies: GET %d %v, want 404 (nothing acquired)", code, body)
		}
	})
}

// TestEdgesRetryAfterIsWholeSecondsRoundedUp: Retry-After is in seconds,
// rounded up: a quota refusal due in 1.5 s is "2" (retry_after_ms 1500),
// and an Idempotency-Key held by another process whose lease is 1.5 s is
// "2", so that a client that waits as told never comes back too early.
func TestEdgesRetryAfterIsWholeSecondsRoundedUp(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		charge := `{"policy":{"kind":"gcra","rate":2,"per_ms":3000,"burst":1}}`
		if code, body, _ := do(t, h, "POST", "/v1/quotas/q/consume", charge); code != 200 {
			t.Fatalf("first charge: %d %v", code, body)
		}
		code, body, hdr := do(t, h, "POST", "/v1/quotas/q/consume", charge)
		if code != 429 || hdr.Get("Retry-After") != "2" || body["retry_after_ms"] != float64(1500) {
			t.Errorf("refused charge: %d %v Retry-After %q; want 429, Retry-After 2, retry_after_ms 1500", code, body, hdr.Get("Retry-After"))
		}

		claim := `{"holder":"w","ttl_ms":60000}`
		req := httptest.NewRequest("POST", "/v1/claims/held", strings.NewReader(claim))
		scope, fp := idempotency.DefaultScope(req), idempotency.Fingerprint(req, []byte(claim))
		running, finish, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			other := idempotency.New(db, &idempotency.Options{Lease: 1500 * time.Millisecond})
			_, err := other.Do(context.Background(), scope, "busy", fp, func(context.Context, *idempotency.Call) ([]byte, error) {
				close(running)
				<-finish
				return []byte(`{"status":200,"body":{}}`), nil
			})
			done <- err
		}()
		<-running
		code, body, hdr = do(t, h, "POST", "/v1/claims/held", claim, "Idempotency-Key", `"busy"`)
		close(finish)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if code != 409 || body["type"] != server.ProblemType("idempotency-in-progress") || hdr.Get("Retry-After") != "2" {
			t.Errorf("key held under a 1.5 s lease: %d %v Retry-After %q; want 409 idempotency-in-progress, Retry-After 2", code, body, hdr.Get("Retry-After"))
		}
	})
}

// TestEdgesDoctorThatFailedShowsOnReadyz: a doctor check that failed is
// listed on /readyz as doctor-not-run, never as no finding at all (not
// checked is not sound).
func TestEdgesDoctorThatFailedShowsOnReadyz(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := s.Doctor(ctx); err == nil {
			t.Fatal("Doctor with an ended context: no error")
		}
		if code, got := readyDoctor(t, s); code != 200 || got[server.DoctorNotRun] != "warn" {
			t.Errorf("readyz after a failed doctor: %d %v, want 200 with %s", code, got, server.DoctorNotRun)
		}
	})
}

// TestEdgesOpenAPISecurityAndRetryAfter: the document states that the
// probes, the document itself and the signed webhook inbox need no
// credential (security: []), and every 429 it lists carries Retry-After
// with the RateLimit fields, as the server sends them.
func TestEdgesOpenAPISecurityAndRetryAfter(t *testing.T) {
	t.Parallel()
	paths := server.OpenAPI()["paths"].(map[string]any)
	for _, c := range []struct{ path, method string }{{"/healthz", "get"}, {"/readyz", "get"}, {"/openapi.json", "get"}, {"/v1/inbox/{source}", "post"}} {
		op := paths[c.path].(map[string]any)[c.method].(map[string]any)
		if sec, ok := op["security"].([]any); !ok || len(sec) != 0 {
			t.Errorf("%s %s: security %v, want [] (no credential)", c.method, c.path, op["security"])
		}
	}
	n := 0
	for path, item := range paths {
		for method, op := range item.(map[string]any) {
			r, ok := op.(map[string]any)["responses"].(map[string]any)["429"].(map[string]any)
			if !ok {
				continue
			}
			n++
			headers := r["headers"].(map[string]any)
			for _, name := range []string{"Retry-After", "RateLimit-Policy", "RateLimit"} {
				if headers[name] == nil {
					t.Errorf("%s %s: the 429 answer lists no %s header", method, path, name)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no operation lists a 429 answer")
	}
}
