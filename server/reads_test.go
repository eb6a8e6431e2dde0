package server_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// TestReadRoutesMirrorTheLibrary: GET /v1/events/{fingerprint}, GET
// /v1/sequences/{scope}/{name} and GET /v1/outbox/messages/{id} answer
// what the library's Get and Current read, in the key's tenant only: a
// second tenant reading the same fingerprint, counter and id gets 404, 0
// and 404, the 404s saying what was not found. Reading creates nothing.
func TestReadRoutesMirrorTheLibrary(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{RequireKey: true})
		h := s.Handler()
		a, b := bearerOf(newKey(t, db, tenantA, apikey.AllScopes)), bearerOf(newKey(t, db, tenantB, apikey.AllScopes))

		// An event observed and its result recorded in tenant A.
		if code, body, _ := do(t, h, "POST", "/v1/events", `{"source":"s","level":"error","message":"m","fingerprint":"fp-1"}`, a...); code != 200 || body["fence"] != 1.0 {
			t.Fatalf("observe: %d %v", code, body)
		}
		code, ev, _ := do(t, h, "GET", "/v1/events/fp-1", "", a...)
		if code != 200 || ev["source"] != "s" || ev["level"] != "error" || ev["message"] != "m" || ev["result_fence"] != 0.0 || ev["classification"] != "" {
			t.Fatalf("the event before its result: %d %v; want it with result_fence 0", code, ev)
		}
		if code, body, _ := do(t, h, "POST", "/v1/events/fp-1/result", `{"fence":1,"classification":"c","external_id":"x"}`, a...); code != 200 {
			t.Fatalf("record: %d %v", code, body)
		}
		if code, ev, _ = do(t, h, "GET", "/v1/events/fp-1", "", a...); code != 200 || ev["result_fence"] != 1.0 || ev["classification"] != "c" || ev["external_id"] != "x" {
			t.Fatalf("the event after its result: %d %v; want the result at fence 1", code, ev)
		}
		if code, body, _ := do(t, h, "GET", "/v1/events/fp-1", "", b...); code != 404 || !strings.Contains(fmt.Sprint(body["detail"]), "fp-1") {
			t.Errorf("tenant B reads tenant A's event: %d %v; want 404 naming the fingerprint", code, body)
		}

		// A counter of tenant A.
		if code, body, _ := do(t, h, "POST", "/v1/sequences/inv/2026/next", `{"n":3}`, a...); code != 200 || body["last"] != 3.0 {
			t.Fatalf("next: %d %v", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/sequences/inv/2026", "", a...); code != 200 || body["current"] != 3.0 || body["scope"] != "inv" || body["name"] != "2026" {
			t.Errorf("current: %d %v; want 3", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/sequences/inv/2026", "", b...); code != 200 || body["current"] != 0.0 {
			t.Errorf("tenant B reads tenant A's counter: %d %v; want 0", code, body)
		}
		if n := rows(t, db, `SELECT count(*) FROM racefree_sequences`); n != 1 {
			t.Errorf("%d counters after tenant B's read, want tenant A's one: reading creates nothing", n)
		}

		// A message of tenant A, ready, then failed once.
		code, enq, _ := do(t, h, "POST", "/v1/outbox", `{"topic":"mail","key":"u1","payload":{"to":"a@example.com"},"max_attempts":3}`, a...)
		if code != 200 {
			t.Fatalf("enqueue: %d %v", code, enq)
		}
		id := int64(enq["id"].(float64))
		path := fmt.Sprintf("/v1/outbox/messages/%d", id)
		if code, m, _ := do(t, h, "GET", path, "", a...); code != 200 || m["state"] != "ready" || m["attempts"] != 0.0 || fmt.Sprint(m["payload"]) != "map[to:a@example.com]" ||
			fmt.Sprint(m["history"]) != "[]" || m["max_attempts"] != 3.0 {
			t.Fatalf("the message as enqueued: %d %v; want ready, its JSON payload, no history", code, m)
		}
		o, _ := s.Outbox()
		ctxA, err := tenant.With(context.Background(), tenantA)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := o.Claim(ctxA, "relay-1", 1, time.Minute, "mail")
		if err != nil || len(ds) != 1 {
			t.Fatalf("claim: %v %v", ds, err)
		}
		if _, err := o.Fail(ctxA, ds[0], errors.New("smtp 451")); err != nil {
			t.Fatal(err)
		}
		code, m, _ := do(t, h, "GET", path, "", a...)
		hist, _ := m["history"].([]any)
		if code != 200 || m["state"] != "ready" || m["attempts"] != 1.0 || len(hist) != 1 || m["last_error"] != "smtp 451" {
			t.Fatalf("the message after a failed attempt: %d %v; want ready again, one attempt in its history", code, m)
		}
		if h0 := hist[0].(map[string]any); h0["outcome"] != "retry" || h0["worker"] != "relay-1" || h0["error"] != "smtp 451" || h0["attempt"] != 1.0 || h0["fence"] != float64(ds[0].Fence) {
			t.Errorf("the failed attempt: %v", h0)
		}
		if code, body, _ := do(t, h, "GET", path, "", b...); code != 404 || !strings.Contains(fmt.Sprint(body["detail"]), fmt.Sprint(id)) {
			t.Errorf("tenant B reads tenant A's message: %d %v; want 404 naming the id", code, body)
		}
		for _, p := range []string{"/v1/outbox/messages/0", "/v1/outbox/messages/x", "/v1/sequences/inv/" + strings.Repeat("n", 300), "/v1/events/" + strings.Repeat("f", 300)} {
			if code, body, _ := do(t, h, "GET", p, "", a...); code != 400 || body["type"] != "urn:racefree:problem:invalid-input" {
				t.Errorf("GET %.40s…: %d %v; want 400 invalid-input", p, code, body)
			}
		}
	})
}

// TestEveryJSONRouteRefusesAnotherMediaType: every operation of the OpenAPI
// document that takes a JSON body answers 415 unsupported-media-type to a
// text/plain or form body, and to an empty one labelled text/plain (what a
// browser sends cross-origin without a CORS preflight), with or without an
// Idempotency-Key, and changes nothing.
func TestEveryJSONRouteRefusesAnotherMediaType(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{AuditKeys: auditRing(t, true)})
		h := s.Handler()
		var ops []string
		keyed := map[string]bool{} // operations that take an Idempotency-Key
		for path, item := range server.OpenAPI()["paths"].(map[string]any) {
			for method, op := range item.(map[string]any) {
				rb, ok := op.(map[string]any)["requestBody"].(map[string]any)
				if !ok {
					continue
				}
				if _, isJSON := rb["content"].(map[string]any)["application/json"]; isJSON {
					name := strings.ToUpper(method) + " " + path
					ops = append(ops, name)
					keyed[name] = strings.Contains(fmt.Sprint(op.(map[string]any)["parameters"]), "Idempotency-Key")
				}
			}
		}
		sort.Strings(ops)
		if len(ops) < 12 {
			t.Fatalf("%d operations with a JSON body in the document, want every POST but the inbox's: %v", len(ops), ops)
		}
		for _, op := range ops {
			method, path, _ := strings.Cut(op, " ")
			path = strings.NewReplacer("{id}", "1", "{key}", "k", "{fingerprint}", "f", "{scope}", "s", "{name}", "n").Replace(path)
			for _, c := range []struct{ body, ct string }{{`{}`, "text/plain"}, {`a=b`, "application/x-www-form-urlencoded"}, {``, "text/plain;charset=UTF-8"}} {
				for _, idem := range []string{"", `"k1"`} {
					if idem != "" && !keyed[op] {
						continue
					}
					hdr := []string{"Content-Type", c.ct}
					if idem != "" {
						hdr = append(hdr, "Idempotency-Key", idem)
					}
					if code, body, _ := do(t, h, method, path, c.body, hdr...); code != 415 || body["type"] != "urn:racefree:problem:unsupported-media-type" {
						t.Errorf("%s %q as %s (key %q): %d %v; want 415", op, c.body, c.ct, idem, code, body)
					}
				}
			}
		}
		for _, table := range []string{"racefree_idempotency", "racefree_sequences", "racefree_claims", "racefree_outbox", "racefree_audit", "racefree_onetime_codes", "racefree_refresh_families", "racefree_quotas", "racefree_dedup_events"} {
			if n := rows(t, db, `SELECT count(*) FROM `+table); n != 0 {
				t.Errorf("%s holds %d rows after refused requests", table, n)
			}
		}
	})
}
