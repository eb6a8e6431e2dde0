package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/server"
)

// The tests of this file hold the handlers of the primitives at their
// edges, a second round from outside: which member of a body reaches
// which argument, a bound at the bound, a retry class stored or not under
// an Idempotency-Key, a tenant's data read with its own tenant, and the
// figures and encodings an answer gives.

// TestOutside4EdgesEventAnswersAtTheirBounds: an observation's last_seen
// is when its latest duplicate came, not its first_seen; an event whose
// fingerprint is exactly claim.MaxKeyBytes (256 bytes) is read back by
// GET; a window_ms out of range is refused in the name of window_ms.
func TestOutside4EdgesEventAnswersAtTheirBounds(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		ev := `{"source":"billing","level":"error","message":"card declined","window_ms":60000}`
		if code, body, _ := do(t, h, "POST", "/v1/events", ev); code != 200 || body["first_seen"] != "2026-01-02T03:04:05.000Z" || body["last_seen"] != "2026-01-02T03:04:05.000Z" {
			t.Fatalf("first observation: %d %v", code, body)
		}
		clock.Advance(1500 * time.Millisecond)
		if code, body, _ := do(t, h, "POST", "/v1/events", ev); code != 200 || body["process"] != false ||
			body["first_seen"] != "2026-01-02T03:04:05.000Z" || body["last_seen"] != "2026-01-02T03:04:06.500Z" {
			t.Errorf("a duplicate 1.5 s later: %d %v, want first_seen 03:04:05.000 and last_seen 03:04:06.500", code, body)
		}

		fp := strings.Repeat("f", 256)
		if code, body, _ := do(t, h, "POST", "/v1/events", `{"source":"s","level":"info","message":"m","fingerprint":"`+fp+`"}`); code != 200 || body["fingerprint"] != fp {
			t.Fatalf("observe a fingerprint of 256 bytes: %d %v", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/events/"+fp, ""); code != 200 || body["fingerprint"] != fp {
			t.Errorf("GET an event whose fingerprint is 256 bytes: %d %v, want 200", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/events/"+fp+"f", ""); code != 400 {
			t.Errorf("GET an event whose fingerprint is 257 bytes: %d %v, want 400", code, body)
		}

		for _, w := range []string{"0", "2592000001"} {
			code, body, _ := do(t, h, "POST", "/v1/events", `{"source":"s","level":"info","message":"w","window_ms":`+w+`}`)
			if detail, _ := body["detail"].(string); code != 400 || !strings.Contains(detail, "window_ms") || strings.Contains(detail, "ttl_ms") {
				t.Errorf("window_ms %s: %d %v, want 400 naming window_ms", w, code, body)
			}
		}
	})
}

// TestOutside4EdgesQuotaNAndRetryAfter: an n of 0 or below is 400 and
// charges nothing (the next charge of a key of one unit is allowed), and
// a refusal's Retry-After is its wait rounded up to whole seconds (a GCRA
// interval of 1.8 s refuses the second charge with Retry-After: 2).
func TestOutside4EdgesQuotaNAndRetryAfter(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		policy := `"policy":{"kind":"window","rate":1,"per_ms":3600000}`
		for _, n := range []string{"0", "-1"} {
			if code, body, _ := do(t, h, "POST", "/v1/quotas/user-1/consume", `{"n":`+n+`,`+policy+`}`); code != 400 || body["type"] != server.ProblemType("invalid-input") {
				t.Errorf("n %s: %d %v, want 400 invalid-input", n, code, body)
			}
		}
		if code, body, _ := do(t, h, "POST", "/v1/quotas/user-1/consume", `{`+policy+`}`); code != 200 || body["remaining"] != float64(0) {
			t.Errorf("the one unit of the key after two refused charges: %d %v, want 200 remaining 0 (nothing was charged)", code, body)
		}

		gcra := `{"policy":{"kind":"gcra","rate":1,"per_ms":1800,"burst":1}}`
		if code, body, _ := do(t, h, "POST", "/v1/quotas/user-2/consume", gcra); code != 200 {
			t.Fatalf("first GCRA charge: %d %v", code, body)
		}
		code, body, hdr := do(t, h, "POST", "/v1/quotas/user-2/consume", gcra)
		ms, _ := body["retry_after_ms"].(float64)
		if code != 429 || ms != 1800 {
			t.Fatalf("second GCRA charge at the same instant: %d %v, want 429 with retry_after_ms 1800", code, body)
		}
		if got := hdr.Get("Retry-After"); got != "2" {
			t.Errorf("Retry-After of a wait of %v ms: %q, want 2 (whole seconds, rounded up)", ms, got)
		}
	})
}

// TestOutside4EdgesHeldIsStoredUnderItsKey: under an Idempotency-Key a
// 409 held is the decided outcome of the acquire, stored and replayed:
// its retry with the same key after the holder released answers the same
// 409 (Idempotent-Replayed: true) and takes no claim; the same key with
// another body is 422.
func TestOutside4EdgesHeldIsStoredUnderItsKey(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		if code, body, _ := do(t, h, "POST", "/v1/claims/job", `{"holder":"a","ttl_ms":60000}`); code != 200 {
			t.Fatalf("a acquires: %d %v", code, body)
		}
		key := []string{"Idempotency-Key", `"b-1"`}
		if code, body, _ := do(t, h, "POST", "/v1/claims/job", `{"holder":"b","ttl_ms":60000}`, key...); code != 409 || body["type"] != server.ProblemType("held") {
			t.Fatalf("b while a holds: %d %v, want 409 held", code, body)
		}
		if code, body, _ := do(t, h, "DELETE", "/v1/claims/job?holder=a&fence=1", ""); code != 204 {
			t.Fatalf("a releases: %d %v", code, body)
		}
		code, body, hdr := do(t, h, "POST", "/v1/claims/job", `{"holder":"b","ttl_ms":60000}`, key...)
		if code != 409 || body["type"] != server.ProblemType("held") || hdr.Get("Idempotent-Replayed") != "true" {
			t.Errorf("b's retry with its key after a released: %d %v %v, want the 409 held replayed", code, body, hdr)
		}
		if code, body, _ := do(t, h, "GET", "/v1/claims/job", ""); code != 200 || body["live"] != false || body["holder"] != "a" {
			t.Errorf("the claim after b's replayed retry: %d %v, want a's released tenure, not b's", code, body)
		}
		if code, body, _ := do(t, h, "POST", "/v1/claims/job", `{"holder":"c","ttl_ms":60000}`, key...); code != 422 {
			t.Errorf("the key with another body: %d %v, want 422", code, body)
		}
	})
}

// TestOutside4EdgesNullIsAValueOfAnyJSONMember: a member that takes any
// JSON value takes null too: an outbox payload of null is enqueued (and
// read back as null) and an audit entry's data of null is appended.
func TestOutside4EdgesNullIsAValueOfAnyJSONMember(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{AuditKeys: auditRing(t, true)}).Handler()
		code, body, _ := do(t, h, "POST", "/v1/outbox", `{"topic":"mail","payload":null}`)
		if code != 200 {
			t.Fatalf("enqueue a payload of null: %d %v, want 200", code, body)
		}
		if code, got, _ := do(t, h, "GET", fmt.Sprintf("/v1/outbox/messages/%v", body["id"]), ""); code != 200 || got["payload"] != nil || got["headers"] == nil {
			t.Errorf("the message of a null payload: %d %v", code, got)
		}
		if code, body, _ := do(t, h, "POST", "/v1/audit", `{"scope":"s","actor":"bob","action":"login","data":null}`); code != 200 {
			t.Errorf("append with data null: %d %v, want 200", code, body)
		}
	})
}

// TestOutside4EdgesTokenRoutesAtTheirEdges: a ttl_ms of exactly
// onetime.MinTTL (1 ms) issues a code; a call the store refuses for bad
// input is counted under outcome "invalid"; a rotation retried within the
// grace window answers the same successor (outcome "replayed"); the
// successor of a family revoked on reuse is 409 token-revoked.
func TestOutside4EdgesTokenRoutesAtTheirEdges(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{RefreshGrace: time.Minute, RefreshSecret: refreshSecret}).Handler()
		if code, body, _ := do(t, h, "POST", "/v1/tokens", `{"purpose":"login","subject":"u1","ttl_ms":1}`); code != 200 || body["token"] == nil {
			t.Errorf("a code of ttl_ms 1: %d %v, want 200", code, body)
		}
		if code, body, _ := do(t, h, "POST", "/v1/tokens", `{"purpose":"login","subject":"u\u00001","ttl_ms":60000}`); code != 400 {
			t.Errorf("a subject with a NUL byte: %d %v, want 400", code, body)
		}
		if m := scrape(t, h); !strings.Contains(m, `racefree_token_operations_total{op="issue",outcome="invalid"} 1`+"\n") ||
			strings.Contains(m, `racefree_token_operations_total{op="issue",outcome="error"}`) {
			t.Errorf("a refused issue is not counted as invalid:\n%s", grepLines(m, "racefree_token_operations_total"))
		}

		_, issued, _ := do(t, h, "POST", "/v1/tokens", `{"kind":"refresh","subject":"u1","ttl_ms":60000}`)
		first, _ := issued["token"].(string)
		code, rotated, _ := do(t, h, "POST", "/v1/tokens/rotate", `{"token":"`+first+`"}`)
		if code != 200 || rotated["outcome"] != "rotated" {
			t.Fatalf("rotate: %d %v", code, rotated)
		}
		if code, again, _ := do(t, h, "POST", "/v1/tokens/rotate", `{"token":"`+first+`"}`); code != 200 || again["outcome"] != "replayed" || again["token"] != rotated["token"] {
			t.Errorf("the rotation retried within the grace window: %d %v, want 200 replayed with %v", code, again, rotated["token"])
		}

		h = server.New(db, server.Options{}).Handler() // no grace: a retry is reuse
		_, issued, _ = do(t, h, "POST", "/v1/tokens", `{"kind":"refresh","subject":"u2","ttl_ms":60000}`)
		first, _ = issued["token"].(string)
		_, rotated, _ = do(t, h, "POST", "/v1/tokens/rotate", `{"token":"`+first+`"}`)
		if code, body, _ := do(t, h, "POST", "/v1/tokens/rotate", `{"token":"`+first+`"}`); code != 409 || body["type"] != server.ProblemType("token-reused") {
			t.Fatalf("reuse: %d %v", code, body)
		}
		if code, body, _ := do(t, h, "POST", "/v1/tokens/rotate", fmt.Sprintf(`{"token":%q}`, rotated["token"])); code != 409 ||
			body["type"] != server.ProblemType("token-revoked") || body["outcome"] != "revoked" {
			t.Errorf("the successor of a revoked family: %d %v, want 409 token-revoked", code, body)
		}
	})
}

// TestOutside4EdgesListsTakeAfterZero: after=0, the next that a first
// page with nothing in it answers, is a cursor on every list route
// (inbox, audit, dead letters), not a 400.
func TestOutside4EdgesListsTakeAfterZero(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{AuditKeys: auditRing(t, true), InboxSecrets: map[string][]string{"stripe": {secret}}}).Handler()
		for _, path := range []string{"/v1/inbox/stripe", "/v1/audit?scope=s", "/v1/outbox/dead"} {
			code, body, _ := do(t, h, "GET", path, "")
			if code != 200 || body["next"] != "0" {
				t.Fatalf("GET %s: %d %v, want 200 next 0", path, code, body)
			}
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			if code, body, _ := do(t, h, "GET", path+sep+"after=0", ""); code != 200 || body["next"] != "0" {
				t.Errorf("GET %s with after=0: %d %v, want 200 next 0", path, code, body)
			}
		}
	})
}

// TestOutside4EdgesInboxRejectedAndSourceBound: a signed delivery the
// inbox refuses with 400 (a webhook-id of 256 bytes, one past
// inbox.MaxEventIDLen) is counted rejected, never duplicate or new; a
// source name of exactly 100 characters is a source (configured, received
// and listed) and 101 is not.
func TestOutside4EdgesInboxRejectedAndSourceBound(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		long := strings.Repeat("s", 100)
		secrets, err := server.ParseInboxSecrets([]string{"stripe=" + secret, long + "=" + secret})
		if err != nil {
			t.Fatalf("a source of 100 characters: %v", err)
		}
		if _, err := server.ParseInboxSecrets([]string{long + "s=" + secret}); err == nil {
			t.Errorf("a source of 101 characters was taken")
		}
		h := server.New(db, server.Options{InboxSecrets: secrets}).Handler()
		id := strings.Repeat("x", 256)
		if code, body, _ := do(t, h, "POST", "/v1/inbox/stripe", `{}`, webhook(t, secret, id, time.Now(), `{}`)...); code != 400 {
			t.Fatalf("a webhook-id of 256 bytes: %d %v, want 400", code, body)
		}
		m := scrape(t, h)
		if !strings.Contains(m, `racefree_inbox_deliveries_total{outcome="rejected",source="stripe"} 1`+"\n") ||
			strings.Contains(m, `outcome="duplicate"`) || strings.Contains(m, `outcome="new"`) {
			t.Errorf("a delivery refused 400 is not counted rejected alone:\n%s", grepLines(m, "racefree_inbox_deliveries_total"))
		}

		if code, body, _ := do(t, h, "POST", "/v1/inbox/"+long, `{}`, webhook(t, secret, "evt_1", time.Now(), `{}`)...); code != 204 {
			t.Errorf("a delivery to a source of 100 characters: %d %v, want 204", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/inbox/"+long, ""); code != 200 || len(body["events"].([]any)) != 1 {
			t.Errorf("the listing of a source of 100 characters: %d %v, want its one event", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/inbox/"+long+"s", ""); code != 400 {
			t.Errorf("the listing of a source of 101 characters: %d %v, want 400", code, body)
		}
	})
}

// TestOutside4EdgesOutboxEnqueueFields: delay_ms counts from the
// database's clock (Config.Clock), not the process's; a payload_base64
// with a carriage return is not standard base64 (400); delay_ms and
// not_before together are 400; neither enqueues anything.
func TestOutside4EdgesOutboxEnqueueFields(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		code, body, _ := do(t, h, "POST", "/v1/outbox", `{"topic":"mail","payload":{"n":1},"delay_ms":60000}`)
		if code != 200 {
			t.Fatalf("enqueue: %d %v", code, body)
		}
		if code, got, _ := do(t, h, "GET", fmt.Sprintf("/v1/outbox/messages/%v", body["id"]), ""); code != 200 || got["available_at"] != "2026-01-02T03:05:05.000Z" {
			t.Errorf("a message delayed 60 s at %v: %d %v, want available_at 03:05:05.000", t0, code, got)
		}
		for _, bad := range []string{
			`{"topic":"mail","payload_base64":"AAEC\r"}`,
			`{"topic":"mail","payload_base64":"AA\rEC"}`,
			`{"topic":"mail","payload":1,"delay_ms":1000,"not_before":"2030-01-02T15:04:05Z"}`,
		} {
			if code, body, _ := do(t, h, "POST", "/v1/outbox", bad); code != 400 || body["type"] != server.ProblemType("invalid-input") {
				t.Errorf("%s: %d %v, want 400 invalid-input", bad, code, body)
			}
		}
		if code, st, _ := do(t, h, "GET", "/v1/outbox/stats", ""); code != 200 || st["ready"] != float64(1) {
			t.Errorf("stats after the refused requests: %d %v, want the one message", code, st)
		}
	})
}

// killKeyed enqueues a message of topic and key for the default tenant
// and makes it dead, returning its id.
func killKeyed(t *testing.T, o *outbox.Outbox, topic, key string, payload []byte) int64 {
	t.Helper()
	ctx := context.Background()
	id, err := o.Enqueue(ctx, o.DB(), outbox.Message{Topic: topic, Key: key, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := o.Claim(ctx, "test-worker", 1, time.Minute, topic)
	if err != nil || len(ds) != 1 || ds[0].ID != id {
		t.Fatalf("claim: %v, %v", ds, err)
	}
	if _, err := o.Fail(ctx, ds[0], outbox.Permanent(errors.New("refused by the receiver"))); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestOutside4EdgesOutboxReadsAndRepairs: a payload that is not JSON is
// answered in standard base64 (+ and /), as POST takes it; the stats'
// backlog counts the leased messages with the ready ones and
// oldest_pending_ms is in milliseconds; the dead letters are filtered by
// ?key=; a redrive with a body that is not an empty JSON object is 400
// and leaves the message dead.
func TestOutside4EdgesOutboxReadsAndRepairs(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		s := server.New(db, server.Options{})
		h := s.Handler()
		o, err := s.Outbox()
		if err != nil {
			t.Fatal(err)
		}
		code, body, _ := do(t, h, "POST", "/v1/outbox", `{"topic":"bytes","payload_base64":"+/8="}`)
		if code != 200 {
			t.Fatalf("enqueue bytes: %d %v", code, body)
		}
		if code, got, _ := do(t, h, "GET", fmt.Sprintf("/v1/outbox/messages/%v", body["id"]), ""); code != 200 || got["payload_base64"] != "+/8=" {
			t.Errorf("a payload of 0xfb 0xff: %d %v, want payload_base64 +/8=", code, got)
		}
		if _, err := o.Enqueue(context.Background(), db, outbox.Message{Topic: "lease", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if ds, err := o.Claim(context.Background(), "w", 1, time.Minute, "lease"); err != nil || len(ds) != 1 {
			t.Fatalf("claim: %v %v", ds, err)
		}
		clock.Advance(90 * time.Second)
		code, st, _ := do(t, h, "GET", "/v1/outbox/stats", "")
		if code != 200 || st["ready"] != float64(1) || st["leased"] != float64(1) || st["backlog"] != float64(2) || st["oldest_pending_ms"] != float64(90000) {
			t.Errorf("stats of one ready and one leased message, 90 s old: %d %v, want backlog 2 and oldest_pending_ms 90000", code, st)
		}

		k1 := killKeyed(t, o, "mail", "k1", []byte(`{}`))
		killKeyed(t, o, "mail", "k2", []byte(`{}`))
		code, body, _ = do(t, h, "GET", "/v1/outbox/dead?topic=mail&key=k1", "")
		if ms, _ := body["messages"].([]any); code != 200 || len(ms) != 1 || ms[0].(map[string]any)["id"] != float64(k1) {
			t.Errorf("the dead letters of key k1: %d %v, want the one message %d", code, body, k1)
		}
		for _, bad := range []string{`{"all":true}`, `text`, `[]`} {
			if code, body, _ := do(t, h, "POST", fmt.Sprintf("/v1/outbox/dead/%d/redrive", k1), bad); code != 400 {
				t.Errorf("a redrive with the body %s: %d %v, want 400", bad, code, body)
			}
		}
		if code, body, _ := do(t, h, "GET", "/v1/outbox/dead?key=k1", ""); code != 200 || len(body["messages"].([]any)) != 1 {
			t.Errorf("the message after the refused redrives: %d %v, want it still dead", code, body)
		}
	})
}

// TestOutside4EdgesAuditByTenantAndScope: a tenant's chain is verified
// against its own checkpoints, never the default tenant's of the same
// scope; a checkpoint is taken of the body's scope.
func TestOutside4EdgesAuditByTenantAndScope(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{AuditKeys: auditRing(t, true)}).Handler()
		acme := bearerOf(newKey(t, db, tenantA, apikey.Read|apikey.Write))
		for i := range 3 {
			if code, body, _ := do(t, h, "POST", "/v1/audit", fmt.Sprintf(`{"scope":"ledger","actor":"bob","action":"a%d"}`, i)); code != 200 {
				t.Fatalf("append: %d %v", code, body)
			}
		}
		code, cp, _ := do(t, h, "POST", "/v1/audit/checkpoints", `{"scope":"ledger"}`)
		if code != 200 || cp["scope"] != "ledger" || cp["seq"] != float64(3) {
			t.Fatalf("checkpoint of ledger: %d %v, want scope ledger at seq 3", code, cp)
		}
		if code, body, _ := do(t, h, "GET", "/v1/audit/checkpoints/latest?scope=ledger", ""); code != 200 || body["seq"] != float64(3) {
			t.Errorf("latest checkpoint of ledger: %d %v", code, body)
		}
		if code, body, _ := do(t, h, "POST", "/v1/audit", `{"scope":"ledger","actor":"eve","action":"x"}`, acme...); code != 200 || body["seq"] != float64(1) {
			t.Fatalf("acme's append: %d %v", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/audit/verify?scope=ledger", "", acme...); code != 200 || body["intact"] != true {
			t.Errorf("acme's chain of one entry, beside the default tenant's checkpoint at 3: %d %v, want intact", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/audit/verify?scope=ledger", ""); code != 200 || body["intact"] != true {
			t.Errorf("the default tenant's chain: %d %v, want intact", code, body)
		}
	})
}
