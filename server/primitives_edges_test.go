package server_test

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// The edges of the primitives' routes, written from their handlers: each
// field of a request honoured, each answer's member as documented, each
// limit at the limit.

// TestEdgesClaimRenewHonoursItsTTL: a renewal's ttl_ms is the claim's new
// lease from now, however short (1 s here, and 1 ms, claim.MinTTL), in
// the answer and in what GET reads.
func TestEdgesClaimRenewHonoursItsTTL(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		if code, body, _ := do(t, h, "POST", "/v1/claims/lease", `{"holder":"w","ttl_ms":60000}`); code != 200 {
			t.Fatalf("acquire: %d %v", code, body)
		}
		for _, c := range []struct {
			ttl  int64
			want string
		}{{1000, "2026-01-02T03:04:06.000Z"}, {1, "2026-01-02T03:04:05.001Z"}} {
			code, body, _ := do(t, h, "POST", "/v1/claims/lease/renew", fmt.Sprintf(`{"holder":"w","fence":1,"ttl_ms":%d}`, c.ttl))
			if code != 200 || body["expires_at"] != c.want {
				t.Errorf("renew with ttl_ms %d: %d %v, want expires_at %s", c.ttl, code, body, c.want)
			}
			if code, body, _ := do(t, h, "GET", "/v1/claims/lease", ""); code != 200 || body["expires_at"] != c.want {
				t.Errorf("get after renewing with ttl_ms %d: %d %v, want expires_at %s", c.ttl, code, body, c.want)
			}
		}
	})
}

// TestEdgesEventFieldsAreHonoured: an observation's window_ms is its
// window (the next observer wins once it lapses, at the next fence), a
// recorded result is stored as sent (classification and external_id
// apart) and GET answers each member of it and of the event.
func TestEdgesEventFieldsAreHonoured(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		ev := `{"source":"billing","level":"warning","message":"card declined","window_ms":1000}`
		code, first, _ := do(t, h, "POST", "/v1/events", ev)
		if code != 200 || first["process"] != true || first["fence"] != float64(1) {
			t.Fatalf("first: %d %v", code, first)
		}
		clock.Advance(999 * time.Millisecond)
		if code, body, _ := do(t, h, "POST", "/v1/events", ev); code != 200 || body["process"] != false || body["count"] != float64(2) || body["fence"] != float64(1) {
			t.Fatalf("1 ms before the window lapses: %d %v, want a duplicate at fence 1, count 2", code, body)
		}
		clock.Advance(time.Millisecond)
		code, next, _ := do(t, h, "POST", "/v1/events", ev)
		if code != 200 || next["process"] != true || next["fence"] != float64(2) || next["count"] != float64(3) {
			t.Fatalf("at the window's end: %d %v, want the next window won at fence 2, count 3", code, next)
		}
		fp := first["fingerprint"].(string)
		if code, body, _ := do(t, h, "POST", "/v1/events/"+fp+"/result", `{"fence":2,"classification":"card","external_id":"T-2"}`); code != 200 {
			t.Fatalf("result: %d %v", code, body)
		}
		code, got, _ := do(t, h, "GET", "/v1/events/"+fp, "")
		want := map[string]any{"fingerprint": fp, "source": "billing", "level": "warning", "message": "card declined",
			"classification": "card", "external_id": "T-2", "result_fence": float64(2)}
		if code != 200 {
			t.Fatalf("get: %d %v", code, got)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("get: %s = %v, want %v (%v)", k, got[k], v, got)
			}
		}
	})
}

// TestEdgesInboxSourceOfTwoTenantsAtItsBodyLimit: a source two tenants
// configure reads the body before it knows whose secret verifies it; a
// body of exactly --inbox-max-body is received, one byte more is 413
// too-large (not 401), and without --inbox-max-body a delivery of the
// default limit's order is received.
func TestEdgesInboxSourceOfTwoTenantsAtItsBodyLimit(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		secrets := map[string][]string{tenantA + "/github": {secretA}, tenantB + "/github": {secretB}}
		h := server.New(db, server.Options{InboxMaxBody: 64, InboxSecrets: secrets}).Handler()
		at := `{"a":"` + strings.Repeat("x", 64-8) + `"}`
		if len(at) != 64 {
			t.Fatalf("body of %d bytes", len(at))
		}
		if code, body, _ := do(t, h, "POST", "/v1/inbox/github", at, webhook(t, secretB, "evt_at", time.Now(), at)...); code != 204 {
			t.Errorf("a body of exactly the limit: %d %v, want 204", code, body)
		}
		past := `{"a":"` + strings.Repeat("x", 64-7) + `"}`
		if code, body, _ := do(t, h, "POST", "/v1/inbox/github", past, webhook(t, secretB, "evt_past", time.Now(), past)...); code != 413 || body["type"] != server.ProblemType("too-large") {
			t.Errorf("a body one byte past the limit: %d %v, want 413 too-large", code, body)
		}

		h = server.New(db, server.Options{InboxSecrets: secrets}).Handler()
		big := `{"a":"` + strings.Repeat("y", 4096) + `"}`
		if code, body, _ := do(t, h, "POST", "/v1/inbox/github", big, webhook(t, secretA, "evt_default", time.Now(), big)...); code != 204 {
			t.Errorf("without InboxMaxBody: %d %v, want 204", code, body)
		}
	})
}

// TestEdgesInboxListNextWithNothingNew: a listing with nothing after its
// cursor answers next as the after it was given, so a poller never starts
// again from the first event.
func TestEdgesInboxListNextWithNothingNew(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{InboxSecrets: map[string][]string{"stripe": {secret}}}).Handler()
		for _, id := range []string{"evt_1", "evt_2"} {
			if code, body, _ := do(t, h, "POST", "/v1/inbox/stripe", `{}`, webhook(t, secret, id, time.Now(), `{}`)...); code != 204 {
				t.Fatalf("delivery %s: %d %v", id, code, body)
			}
		}
		code, body, _ := do(t, h, "GET", "/v1/inbox/stripe", "")
		if evs, _ := body["events"].([]any); code != 200 || len(evs) != 2 {
			t.Fatalf("list: %d %v", code, body)
		}
		next := body["next"].(string)
		code, body, _ = do(t, h, "GET", "/v1/inbox/stripe?after="+url.QueryEscape(next), "")
		if evs, _ := body["events"].([]any); code != 200 || len(evs) != 0 || body["next"] != next {
			t.Errorf("list after %s: %d %v, want no event and next %s", next, code, body, next)
		}
	})
}

// TestEdgesAuditListDefaultAndLargestLimit: a listing without limit
// answers the documented default of 100 entries; a limit of exactly
// audit.MaxListLimit, 1000, is allowed, one more is 400.
func TestEdgesAuditListDefaultAndLargestLimit(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{AuditKeys: auditRing(t, false)}).Handler()
		for i := range 101 {
			if code, body, _ := do(t, h, "POST", "/v1/audit", fmt.Sprintf(`{"scope":"pages","actor":"a","action":"n%d"}`, i)); code != 200 {
				t.Fatalf("append %d: %d %v", i, code, body)
			}
		}
		code, body, _ := do(t, h, "GET", "/v1/audit?scope=pages", "")
		if es, _ := body["entries"].([]any); code != 200 || len(es) != 100 || body["next"] != "100" {
			t.Errorf("list without limit: %d, %d entries, next %v; want 100 entries, next 100", code, len(es), body["next"])
		}
		code, body, _ = do(t, h, "GET", "/v1/audit?scope=pages&limit=1000", "")
		if es, _ := body["entries"].([]any); code != 200 || len(es) != 101 {
			t.Errorf("list with limit 1000: %d, %d entries; want 101", code, len(es))
		}
		if code, body, _ := do(t, h, "GET", "/v1/audit?scope=pages&limit=1001", ""); code != 400 || body["type"] != server.ProblemType("invalid-input") {
			t.Errorf("list with limit 1001: %d %v, want 400 invalid-input", code, body)
		}
	})
}

// TestEdgesAuditVerifyAndLatestOverHTTP: GET /v1/audit/verify verifies
// against the stored checkpoints, so a tail cut with its head row cut to
// match is not intact; GET /v1/audit/checkpoints/latest answers the latest
// checkpoint of the scope named, not of another.
func TestEdgesAuditVerifyAndLatestOverHTTP(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{AuditKeys: auditRing(t, true)}).Handler()
		for _, scope := range []string{"cut", "other"} {
			for i := range 3 {
				if code, body, _ := do(t, h, "POST", "/v1/audit", fmt.Sprintf(`{"scope":%q,"actor":"a","action":"n%d"}`, scope, i)); code != 200 {
					t.Fatalf("append: %d %v", code, body)
				}
			}
		}
		if code, body, _ := do(t, h, "POST", "/v1/audit/checkpoints", `{"scope":"cut"}`); code != 200 || body["seq"] != float64(3) {
			t.Fatalf("checkpoint of cut: %d %v", code, body)
		}
		if code, body, _ := do(t, h, "POST", "/v1/audit", `{"scope":"other","actor":"a","action":"n3"}`); code != 200 {
			t.Fatalf("append: %d %v", code, body)
		}
		if code, body, _ := do(t, h, "POST", "/v1/audit/checkpoints", `{"scope":"other"}`); code != 200 || body["seq"] != float64(4) {
			t.Fatalf("checkpoint of other: %d %v", code, body)
		}
		for scope, seq := range map[string]float64{"cut": 3, "other": 4} {
			if code, body, _ := do(t, h, "GET", "/v1/audit/checkpoints/latest?scope="+scope, ""); code != 200 || body["scope"] != scope || body["seq"] != seq {
				t.Errorf("latest of %s: %d %v, want seq %v", scope, code, body, seq)
			}
		}
		if code, body, _ := do(t, h, "GET", "/v1/audit/verify?scope=cut", ""); code != 200 || body["intact"] != true {
			t.Fatalf("verify before the cut: %d %v", code, body)
		}
		tamper := []string{`ALTER TABLE racefree_audit DISABLE TRIGGER USER`, `ALTER TABLE racefree_audit_heads DISABLE TRIGGER USER`}
		untamper := []string{`ALTER TABLE racefree_audit ENABLE TRIGGER USER`, `ALTER TABLE racefree_audit_heads ENABLE TRIGGER USER`}
		if db.Engine() == racefree.SQLite {
			tamper, untamper = []string{`DROP TRIGGER IF EXISTS racefree_audit_no_delete`}, nil
		}
		testdb.ExecAll(t, db.SQL(), append(append(tamper,
			`DELETE FROM racefree_audit WHERE scope = 'cut' AND seq = 3`,
			`UPDATE racefree_audit_heads SET last_seq = 2 WHERE scope = 'cut'`), untamper...)...)
		if code, body, _ := do(t, h, "GET", "/v1/audit/verify?scope=cut", ""); code != 200 || body["intact"] != false {
			t.Errorf("verify of a tail cut past its checkpoint: %d %v, want intact false", code, body)
		}
	})
}

// TestEdgesOutboxMessageIDZeroIsBadInput: an id of 0 in the path is no
// message id: 400 invalid-input on every route that takes one, not a 404.
func TestEdgesOutboxMessageIDZeroIsBadInput(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		for _, r := range [][2]string{{"GET", "/v1/outbox/messages/0"}, {"POST", "/v1/outbox/dead/0/redrive"}, {"POST", "/v1/outbox/dead/0/discard"}} {
			if code, body, _ := do(t, h, r[0], r[1], ""); code != 400 || body["type"] != server.ProblemType("invalid-input") {
				t.Errorf("%s %s: %d %v, want 400 invalid-input", r[0], r[1], code, body)
			}
		}
	})
}

// TestEdgesQuotaPolicyOverHTTP: a GCRA policy's burst is honoured (a
// burst of 3 allows three charges at once, the fourth is refused), a
// per_ms of exactly quota.MaxPer is allowed, and the refusal carries
// RateLimit-Policy and RateLimit as the allowance does.
func TestEdgesQuotaPolicyOverHTTP(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		body := `{"policy":{"kind":"gcra","rate":1,"per_ms":60000,"burst":3}}`
		for i := range 3 {
			code, resp, hdr := do(t, h, "POST", "/v1/quotas/burst/consume", body)
			if code != 200 || resp["allowed"] != true || resp["remaining"] != float64(2-i) || hdr.Get("RateLimit-Policy") == "" || hdr.Get("RateLimit") == "" {
				t.Fatalf("charge %d within the burst: %d %v %v", i+1, code, resp, hdr)
			}
		}
		code, resp, hdr := do(t, h, "POST", "/v1/quotas/burst/consume", body)
		if code != 429 || resp["type"] != server.ProblemType("quota-exceeded") || hdr.Get("RateLimit-Policy") == "" || hdr.Get("RateLimit") == "" || hdr.Get("Retry-After") == "" {
			t.Errorf("a charge past the burst: %d %v %v, want 429 with Retry-After, RateLimit-Policy and RateLimit", code, resp, hdr)
		}
		maxPer := fmt.Sprintf(`{"policy":{"kind":"window","rate":5,"per_ms":%d}}`, (366 * 24 * time.Hour).Milliseconds())
		if code, resp, _ := do(t, h, "POST", "/v1/quotas/year/consume", maxPer); code != 200 || resp["allowed"] != true {
			t.Errorf("per_ms of exactly MaxPer: %d %v, want 200", code, resp)
		}
	})
}

// TestEdgesSequenceNumbersAndNameAtItsLimit: a call for n numbers counts
// n in racefree_sequence_numbers_total, and a name of exactly
// seq.MaxNameBytes is a name like any other.
func TestEdgesSequenceNumbersAndNameAtItsLimit(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		if code, body, _ := do(t, h, "POST", "/v1/sequences/inv/2026/next", `{"n":5}`); code != 200 || body["first"] != float64(1) || body["last"] != float64(5) {
			t.Fatalf("next 5: %d %v", code, body)
		}
		parseMetrics(t, scrape(t, h)).want(t, "after a call for 5", "racefree_sequence_numbers_total", 5)
		name := strings.Repeat("n", 128)
		if code, body, _ := do(t, h, "POST", "/v1/sequences/inv/"+name+"/next", `{}`); code != 200 || body["name"] != name || body["first"] != float64(1) {
			t.Errorf("a name of 128 bytes: %d %v, want 200", code, body)
		}
		if code, body, _ := do(t, h, "POST", "/v1/sequences/inv/"+name+"n/next", `{}`); code != 400 {
			t.Errorf("a name of 129 bytes: %d %v, want 400", code, body)
		}
	})
}

// TestEdgesTokenRoutes: a token's answer is never cacheable
// (Cache-Control: no-store, issue and rotate); a ttl_ms of exactly
// onetime.MaxTTL is allowed; a refresh token with a purpose is 400 and
// issues nothing; a consumed code's used_at is when it was consumed.
func TestEdgesTokenRoutes(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		maxTTL := (366 * 24 * time.Hour).Milliseconds()
		code, code1, hdr := do(t, h, "POST", "/v1/tokens", fmt.Sprintf(`{"purpose":"login","subject":"s","ttl_ms":%d}`, maxTTL))
		if code != 200 || hdr.Get("Cache-Control") != "no-store" {
			t.Fatalf("issue with ttl_ms MaxTTL: %d %v %v, want 200 with Cache-Control: no-store", code, code1, hdr)
		}
		code, refresh, hdr := do(t, h, "POST", "/v1/tokens", `{"kind":"refresh","subject":"s","ttl_ms":60000}`)
		if code != 200 || hdr.Get("Cache-Control") != "no-store" {
			t.Fatalf("issue refresh: %d %v %v", code, refresh, hdr)
		}
		if code, body, hdr := do(t, h, "POST", "/v1/tokens/rotate", fmt.Sprintf(`{"token":%q}`, refresh["token"])); code != 200 || hdr.Get("Cache-Control") != "no-store" {
			t.Errorf("rotate: %d %v %v, want 200 with Cache-Control: no-store", code, body, hdr)
		}
		var before int
		if err := db.SQL().QueryRowContext(t.Context(), `SELECT count(*) FROM racefree_refresh_families`).Scan(&before); err != nil {
			t.Fatal(err)
		}
		if code, body, _ := do(t, h, "POST", "/v1/tokens", `{"kind":"refresh","purpose":"login","subject":"s","ttl_ms":60000}`); code != 400 || body["type"] != server.ProblemType("invalid-input") {
			t.Errorf("refresh with a purpose: %d %v, want 400", code, body)
		}
		var after int
		if err := db.SQL().QueryRowContext(t.Context(), `SELECT count(*) FROM racefree_refresh_families`).Scan(&after); err != nil || after != before {
			t.Errorf("refresh with a purpose: %d families, was %d (%v)", after, before, err)
		}
		clock.Advance(90 * time.Second)
		code, used, _ := do(t, h, "POST", "/v1/tokens/consume", fmt.Sprintf(`{"purpose":"login","token":%q}`, code1["token"]))
		if code != 200 || used["used_at"] != "2026-01-02T03:05:35.000Z" || used["issued_at"] != "2026-01-02T03:04:05.000Z" {
			t.Errorf("consume: %d %v, want issued_at at t0 and used_at 90 s later", code, used)
		}
	})
}

// TestEdgesInboxDeliveryThatFailsIsCountedFailed: a delivery the database
// fails in a way not known to be transient (its table gone) is a 500, and
// counted failed in racefree_inbox_deliveries_total, as a 503 is: the
// sender will retry it, and it is no mistake of the sender's.
func TestEdgesInboxDeliveryThatFailsIsCountedFailed(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{Logger: slog.New(slog.DiscardHandler), InboxSecrets: map[string][]string{"stripe": {secret}}}).Handler()
		testdb.ExecAll(t, db.SQL(), `ALTER TABLE racefree_inbox RENAME TO racefree_inbox_gone`)
		if code, body, _ := do(t, h, "POST", "/v1/inbox/stripe", `{}`, webhook(t, secret, "evt_1", time.Now(), `{}`)...); code != 500 {
			t.Fatalf("delivery without its table: %d %v, want 500", code, body)
		}
		m := parseMetrics(t, scrape(t, h))
		m.want(t, "a delivery answered 500", "racefree_inbox_deliveries_total", 1, "outcome", "failed", "source", "stripe")
		if v, ok := m.get("racefree_inbox_deliveries_total", "outcome", "rejected", "source", "stripe"); ok && v != 0 {
			t.Errorf("a delivery answered 500 counted rejected: %v", v)
		}
	})
}
