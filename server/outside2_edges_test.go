package server_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// The tests of this file hold the server's plumbing at its edges, a
// second round: the request id's bounds, the route labels of refusals, the
// answers and counts of a 409 under an Idempotency-Key, the fields of the
// conflict and quota problems, the body's media type and shape, and the
// guard of /metrics.

// TestEdges2RequestIDAtItsBounds: a client's X-Request-Id of exactly 128
// visible ASCII characters is kept and echoed; one of 129, one holding DEL
// (0x7f), and a request carrying two X-Request-Id headers get a made-up id
// instead.
func TestEdges2RequestIDAtItsBounds(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		send := func(ids ...string) string {
			req := httptest.NewRequest("GET", "/healthz", nil)
			for _, id := range ids {
				req.Header.Add(server.RequestIDHeader, id)
			}
			return sendRaw(h, req).Header().Get(server.RequestIDHeader)
		}
		at := strings.Repeat("r", 128)
		if got := send(at); got != at {
			t.Errorf("an id of 128 characters: answered %q, want it kept", got)
		}
		for _, id := range []string{at + "r", "abc\x7fdef"} {
			if got := send(id); got == id || got == "" {
				t.Errorf("id %q: answered %q, want a made-up one", id, got)
			}
		}
		if got := send("first-id", "second-id"); got == "first-id" || got == "second-id" || got == "" {
			t.Errorf("two ids: answered %q, want a made-up one, neither of them", got)
		}
	})
}

// TestEdges2RouteLabelsOfRefusals: a 403 insufficient-scope is counted
// under the route label forbidden, a path with a .. segment under unclean
// (400), and a path with a trailing slash is no unclean path: it is routed,
// 404 no-route, counted under unmatched.
func TestEdges2RouteLabelsOfRefusals(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		reader := newKey(t, db, tenantA, apikey.Read)
		if code, body, _ := do(t, h, "POST", "/v1/claims/k", `{"holder":"a","ttl_ms":1000}`, bearerOf(reader)...); code != 403 {
			t.Fatalf("a read key POSTs: %d %v, want 403", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/claims/../x", ""); code != 400 || body["type"] != server.ProblemType("invalid-input") {
			t.Fatalf("a .. segment: %d %v, want 400 invalid-input", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/nothing/", ""); code != 404 || body["type"] != server.ProblemType("no-route") {
			t.Errorf("a trailing slash: %d %v, want 404 no-route", code, body)
		}
		m := scrape(t, h)
		for _, want := range []string{
			`racefree_http_requests_total{code="403",route="forbidden"} 1`,
			`racefree_http_requests_total{code="400",route="unclean"} 1`,
			`racefree_http_requests_total{code="404",route="unmatched"} 1`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %q", want)
			}
		}
		for _, not := range []string{`route="unauthorized"`, `code="400",route="unmatched"`} {
			if strings.Contains(m, not) {
				t.Errorf("metrics count %s", not)
			}
		}
	})
}

// TestEdges2ConflictsUnderAnIdempotencyKey: a 409 held and a 409 not-held
// under an Idempotency-Key are outcomes: each is stored, answered as
// application/problem+json first and replayed (Idempotent-Replayed: true),
// and neither is counted as an in_progress idempotency answer, which is
// the 409 with Retry-After only; nor is either, or a 400 under a key,
// counted as a mismatch, which is the 422 only.
func TestEdges2ConflictsUnderAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		if code, body, _ := do(t, h, "POST", "/v1/claims/k", `{"holder":"a","ttl_ms":60000}`); code != 200 {
			t.Fatalf("acquire: %d %v", code, body)
		}
		for _, c := range []struct{ path, body, key, kind string }{
			{"/v1/claims/k", `{"holder":"b","ttl_ms":60000}`, `"held-1"`, "held"},
			{"/v1/claims/k/renew", `{"holder":"b","fence":1,"ttl_ms":60000}`, `"notheld-1"`, "not-held"},
		} {
			for i, replayed := range []string{"", "true"} {
				code, body, hdr := do(t, h, "POST", c.path, c.body, "Idempotency-Key", c.key)
				if code != 409 || body["type"] != server.ProblemType(c.kind) || hdr.Get("Idempotent-Replayed") != replayed ||
					hdr.Get("Content-Type") != "application/problem+json" {
					t.Errorf("%s, answer %d: %d %v %v, want 409 %s as application/problem+json, Idempotent-Replayed %q",
						c.path, i+1, code, body, hdr, c.kind, replayed)
				}
			}
		}
		if code, body, _ := do(t, h, "POST", "/v1/claims/k", `{"holder":"","ttl_ms":1000}`, "Idempotency-Key", `"bad-1"`); code != 400 {
			t.Fatalf("an empty holder under a key: %d %v, want 400", code, body)
		}
		m := scrape(t, h)
		for _, not := range []string{`racefree_idempotency_requests_total{outcome="in_progress"}`, `racefree_idempotency_requests_total{outcome="mismatch"}`} {
			if strings.Contains(m, not) {
				t.Errorf("a 409 held or not-held, or a 400, was counted: %s", grepLines(m, "racefree_idempotency_requests_total"))
			}
		}
	})
}

// TestEdges2StaleFenceNamesTheCurrentTenure: a renewal by a tenure that
// is over is 409 stale-fence naming the caller's fence and the current
// one, and is counted as racefree_claim_operations_total{op="renew",
// outcome="stale"}.
func TestEdges2StaleFenceNamesTheCurrentTenure(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		if code, body, _ := do(t, h, "POST", "/v1/claims/k", `{"holder":"a","ttl_ms":1000}`); code != 200 {
			t.Fatalf("acquire by a: %d %v", code, body)
		}
		clock.Advance(2 * time.Second)
		if code, body, _ := do(t, h, "POST", "/v1/claims/k", `{"holder":"b","ttl_ms":1000}`); code != 200 || body["fence"] != 2.0 {
			t.Fatalf("acquire by b: %d %v, want fence 2", code, body)
		}
		code, body, _ := do(t, h, "POST", "/v1/claims/k/renew", `{"holder":"a","fence":1,"ttl_ms":1000}`)
		if code != 409 || body["type"] != server.ProblemType("stale-fence") || body["fence"] != 1.0 || body["current_fence"] != 2.0 {
			t.Errorf("renewal of fence 1: %d %v, want 409 stale-fence with fence 1 and current_fence 2", code, body)
		}
		m := scrape(t, h)
		if !strings.Contains(m, `racefree_claim_operations_total{op="renew",outcome="stale"} 1`) ||
			strings.Contains(m, `racefree_claim_operations_total{op="renew",outcome="not_held"}`) {
			t.Errorf("a stale renewal is not counted as stale:\n%s", grepLines(m, "racefree_claim_operations_total"))
		}
	})
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestEdges2QuotaRetryAfterMsIsInMilliseconds: a 429 quota-exceeded body
// gives retry_after_ms in milliseconds: a window of 60 s refused at its
// start is due in 60000 ms.
func TestEdges2QuotaRetryAfterMsIsInMilliseconds(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		const charge = `{"policy":{"kind":"window","rate":1,"per_ms":60000}}`
		if code, body, _ := do(t, h, "POST", "/v1/quotas/q/consume", charge); code != 200 {
			t.Fatalf("first charge: %d %v", code, body)
		}
		code, body, _ := do(t, h, "POST", "/v1/quotas/q/consume", charge)
		ms, _ := body["retry_after_ms"].(float64)
		if code != 429 || ms < 1000 || ms > 60000 {
			t.Errorf("second charge: %d %v, want 429 with retry_after_ms in milliseconds (1000 to 60000)", code, body)
		}
	})
}

// TestEdges2BodyMediaTypeAndShape: a body typed text/json (no +json
// suffix) is 415, while a +json type is JSON; a body of JSON null is
// refused as not an object; an integer with a leading zero (01) is
// invalid JSON, 400, and acquires nothing; so is a raw 0x1f, the last
// control character, inside a string.
func TestEdges2BodyMediaTypeAndShape(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		const acquire = `{"holder":"a","ttl_ms":1000}`
		for _, ct := range []string{"text/json", "application/notjson"} {
			if code, body, _ := do(t, h, "POST", "/v1/claims/m", acquire, "Content-Type", ct); code != 415 {
				t.Errorf("Content-Type %s: %d %v, want 415", ct, code, body)
			}
		}
		if code, body, _ := do(t, h, "POST", "/v1/claims/m", acquire, "Content-Type", "application/vnd.acme+json"); code != 200 {
			t.Errorf("a +json type: %d %v, want 200", code, body)
		}
		code, body, _ := do(t, h, "POST", "/v1/claims/n", `null`)
		if detail, _ := body["detail"].(string); code != 400 || !strings.Contains(detail, "null") {
			t.Errorf("a null body: %d %v, want 400 saying it is null", code, body)
		}
		if code, body, _ := do(t, h, "POST", "/v1/claims/z", `{"holder":"a","ttl_ms":01}`); code != 400 || body["type"] != server.ProblemType("invalid-input") {
			t.Errorf("ttl_ms 01: %d %v, want 400 invalid-input", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/claims/z", ""); code != 404 {
			t.Errorf("after ttl_ms 01 was refused: %d %v, want no claim (404)", code, body)
		}
		if code, body, _ := do(t, h, "POST", "/v1/claims/u", "{\"holder\":\"a\x1fb\",\"ttl_ms\":1000}"); code != 400 || body["type"] != server.ProblemType("invalid-input") {
			t.Errorf("a raw 0x1f in holder: %d %v, want 400 invalid-input", code, body)
		}
	})
}

// TestEdges2MetricsTokenNeedsBearer: with MetricsToken set, a scrape whose
// Authorization is the bare token, without "Bearer ", is 401; with it, 200.
func TestEdges2MetricsTokenNeedsBearer(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{MetricsToken: "s3cret"}).Handler()
		if code, _, _ := do(t, h, "GET", "/metrics", "", "Authorization", "s3cret"); code != 401 {
			t.Errorf("the bare token: %d, want 401", code)
		}
		if code, _, _ := do(t, h, "GET", "/metrics", "", "Authorization", "Bearer s3cret"); code != 200 {
			t.Errorf("Bearer and the token: %d, want 200", code)
		}
	})
}

// TestEdges2OutboxGaugeSumsEveryTenant: racefree_outbox_messages{state=
// "ready"} is the sum over every tenant: one ready message of the default
// tenant and one of another tenant show as 2.
func TestEdges2OutboxGaugeSumsEveryTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		key := newKey(t, db, tenantA, apikey.AllScopes)
		for _, hdr := range [][]string{nil, bearerOf(key)} {
			if code, body, _ := do(t, h, "POST", "/v1/outbox", `{"topic":"t","payload":{}}`, hdr...); code != 200 {
				t.Fatalf("enqueue: %d %v", code, body)
			}
		}
		if m := scrape(t, h); !strings.Contains(m, `racefree_outbox_messages{state="ready"} 2`) {
			t.Errorf("one ready message in each of two tenants: %s, want 2", grepLines(m, "racefree_outbox_messages"))
		}
	})
}
