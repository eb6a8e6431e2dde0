package server_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestExpiredTokensAre410OverHTTP: a code is redeemed up to the last
// millisecond before it expires; at its expiry, a code's consumption and a
// refresh token's rotation are 410 token-expired with outcome "expired",
// not a 409 (used, reused or revoked), whose advice differs.
func TestExpiredTokensAre410OverHTTP(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		var consume [2]string
		for i := range consume {
			code, body, _ := do(t, h, "POST", "/v1/tokens", `{"purpose":"login","subject":"s","ttl_ms":1000}`)
			if code != 200 {
				t.Fatalf("issue: %d %v", code, body)
			}
			consume[i] = fmt.Sprintf(`{"purpose":"login","token":%q}`, body["token"])
		}
		code, body, _ := do(t, h, "POST", "/v1/tokens", `{"kind":"refresh","subject":"s","ttl_ms":1000}`)
		if code != 200 {
			t.Fatalf("issue refresh: %d %v", code, body)
		}
		rotate := fmt.Sprintf(`{"token":%q}`, body["token"])

		clock.Advance(999 * time.Millisecond)
		if code, body, _ := do(t, h, "POST", "/v1/tokens/consume", consume[0]); code != 200 || body["outcome"] != "consumed" {
			t.Fatalf("consume 1ms before expiry: %d %v, want 200", code, body)
		}
		clock.Advance(time.Millisecond)
		for path, req := range map[string]string{"/v1/tokens/consume": consume[1], "/v1/tokens/rotate": rotate} {
			code, body, _ := do(t, h, "POST", path, req)
			if code != 410 || body["type"] != server.ProblemType("token-expired") || body["outcome"] != "expired" {
				t.Errorf("%s at expiry: %d %v, want 410 token-expired, outcome expired", path, code, body)
			}
		}
	})
}

// TestFirstAuditEntryHasAnEmptyPrevMAC: the first entry of a scope has no
// predecessor, and says so with prev_mac "" (the OpenAPI document's
// base64 string, always present), never null, both in the append's
// answer and in the listing; the next entry's prev_mac is its mac.
func TestFirstAuditEntryHasAnEmptyPrevMAC(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{AuditKeys: auditRing(t, false)}).Handler()
		code, first, _ := do(t, h, "POST", "/v1/audit", `{"scope":"first","actor":"a","action":"b"}`)
		if prev, ok := first["prev_mac"].(string); code != 200 || !ok || prev != "" {
			t.Fatalf("first append: %d %v, want prev_mac \"\"", code, first)
		}
		if code, body, _ := do(t, h, "POST", "/v1/audit", `{"scope":"first","actor":"a","action":"c"}`); code != 200 || body["prev_mac"] != first["mac"] {
			t.Fatalf("second append: %d %v, want prev_mac %v", code, body, first["mac"])
		}
		code, body, _ := do(t, h, "GET", "/v1/audit?scope=first", "")
		entries, _ := body["entries"].([]any)
		if code != 200 || len(entries) != 2 {
			t.Fatalf("list: %d %v", code, body)
		}
		if prev, ok := entries[0].(map[string]any)["prev_mac"].(string); !ok || prev != "" {
			t.Errorf("listed first entry: %v, want prev_mac \"\"", entries[0])
		}
	})
}

// TestInboxSourceOfAnotherTenantIsUnknown: a source that one tenant alone
// configured is 404 unknown-source to another tenant's listing, as a
// source nobody configured is; its own tenant lists it.
func TestInboxSourceOfAnotherTenantIsUnknown(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{RequireKey: true, InboxSecrets: map[string][]string{tenantB + "/github": {secretB}}}).Handler()
		keyA, keyB := newKey(t, db, tenantA, apikey.Read), newKey(t, db, tenantB, apikey.Read)
		if code, body, _ := do(t, h, "POST", "/v1/inbox/github", `{}`, webhook(t, secretB, "evt_1", time.Now(), `{}`)...); code != 204 {
			t.Fatalf("delivery: %d %v", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/inbox/github", "", bearerOf(keyA)...); code != 404 || body["type"] != server.ProblemType("unknown-source") {
			t.Errorf("tenant %s lists tenant %s's source: %d %v, want 404 unknown-source", tenantA, tenantB, code, body)
		}
		code, body, _ := do(t, h, "GET", "/v1/inbox/github", "", bearerOf(keyB)...)
		if evs, _ := body["events"].([]any); code != 200 || len(evs) != 1 {
			t.Errorf("tenant %s lists its source: %d %v, want its one event", tenantB, code, body)
		}
	})
}

// TestEnqueuedContentTypeInAnyCase: a JSON payload is labelled
// Content-Type: application/json only when the request's headers name no
// content type in any case; a content-type the client gave, in lower
// case, is the message's only one.
func TestEnqueuedContentTypeInAnyCase(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		for req, want := range map[string]map[string]any{
			`{"topic":"t","payload":{"a":1},"headers":{"content-type":"application/vnd.acme+json"}}`: {"content-type": "application/vnd.acme+json"},
			`{"topic":"t","payload":{"a":1},"headers":{"CONTENT-TYPE":"text/csv","X-A":"b"}}`:        {"CONTENT-TYPE": "text/csv", "X-A": "b"},
			`{"topic":"t","payload":{"a":1}}`: {"Content-Type": "application/json"},
		} {
			code, body, _ := do(t, h, "POST", "/v1/outbox", req)
			if code != 200 {
				t.Fatalf("enqueue %s: %d %v", req, code, body)
			}
			code, msg, _ := do(t, h, "GET", fmt.Sprintf("/v1/outbox/messages/%v", body["id"]), "")
			if code != 200 || !reflect.DeepEqual(msg["headers"], want) {
				t.Errorf("enqueue %s: message %d %v, want headers %v", req, code, msg["headers"], want)
			}
		}
	})
}
