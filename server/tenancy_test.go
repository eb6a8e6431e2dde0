package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// Tenants of the tenancy tests, and their inbox secrets for the same
// source name.
const (
	tenantA = "acme"
	tenantB = "globex"
)

var (
	secretA = secret
	secretB = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
)

// newKey creates a key of tenantID with scopes, as `racefree keys create`
// does (with the owner's database), and returns its text.
func newKey(t *testing.T, owner *racefree.DB, tenantID string, scopes apikey.Scope) string {
	t.Helper()
	return createKey(t, owner, tenantID, scopes).Token
}

// createKey creates an API key of tenantID with scopes and returns it
// whole (its ID too, to revoke it).
func createKey(t *testing.T, owner *racefree.DB, tenantID string, scopes apikey.Scope) apikey.Created {
	t.Helper()
	s, err := apikey.New(owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Create(context.Background(), tenantID, scopes, "test")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func bearerOf(key string) []string { return []string{"Authorization", "Bearer " + key} }

// tenantOptions serves the source "stripe" for both tenants, each with its
// own secret, and the audit log.
func tenantOptions(t *testing.T) server.Options {
	return server.Options{RequireKey: true, AuditKeys: auditRing(t, true),
		InboxSecrets: map[string][]string{tenantA + "/stripe": {secretA}, tenantB + "/stripe": {secretB}}}
}

// TestTenantsAreIndependentOverHTTP: with two tenants' keys, the same
// claim key, idempotency key, event fingerprint, inbox source and event,
// sequence, quota key, token and audit scope are independent per tenant,
// and nothing of one is visible to the other. On PostgreSQL it runs twice:
// on the owner's database (a superuser, so the SQL filter alone holds) and
// as the application role (row-level security binds every statement).
func TestTenantsAreIndependentOverHTTP(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		owner := testdb.Open(t, d, nil)
		t.Run("owner", func(t *testing.T) { tenantsAreIndependent(t, owner, owner) })
		if owner.Engine() == racefree.Postgres {
			t.Run("app-role", func(t *testing.T) { tenantsAreIndependent(t, owner, testdb.App(t, owner, d)) })
		}
	})
}

func tenantsAreIndependent(t *testing.T, owner, db *racefree.DB) {
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()) // the two runs share a database
	a, b := tenantA, tenantB
	ka, kb := newKey(t, owner, a, apikey.AllScopes), newKey(t, owner, b, apikey.AllScopes)
	h := server.New(db, tenantOptions(t)).Handler()
	as, bs := bearerOf(ka), bearerOf(kb)
	with := func(auth []string, kv ...string) []string { return append(append([]string{}, auth...), kv...) }

	// Claims: the same key, one tenure each, fence 1 each.
	claimKey := "/v1/claims/job-" + suffix
	for _, auth := range [][]string{as, bs} {
		code, body, _ := do(t, h, "POST", claimKey, `{"holder":"w","ttl_ms":60000}`, auth...)
		if code != 200 || body["fence"] != float64(1) {
			t.Fatalf("acquire: %d %v; want 200, fence 1 for each tenant", code, body)
		}
	}
	only := "/v1/claims/only-a-" + suffix
	if code, _, _ := do(t, h, "POST", only, `{"holder":"w","ttl_ms":60000}`, as...); code != 200 {
		t.Fatalf("acquire only-a: %d", code)
	}
	if code, body, _ := do(t, h, "GET", only, "", bs...); code != 404 {
		t.Fatalf("GET of the other tenant's claim: %d %v, want 404", code, body)
	}
	if code, _, _ := do(t, h, "DELETE", only+"?holder=w&fence=1", "", bs...); code != 409 {
		t.Fatalf("release of the other tenant's claim: %d, want 409 not-held", code)
	}
	if code, body, _ := do(t, h, "GET", only, "", as...); code != 200 || body["live"] != true {
		t.Fatalf("own claim after the other's release: %d %v", code, body)
	}

	// Idempotency: the same key with different requests is no mismatch
	// across tenants, and each replays its own answer.
	idem := `"idem-` + suffix + `"`
	for i, auth := range [][]string{as, bs} {
		path := fmt.Sprintf("/v1/claims/idem-%d-%s", i, suffix)
		code, body, hdr := do(t, h, "POST", path, `{"holder":"w","ttl_ms":60000}`, with(auth, "Idempotency-Key", idem)...)
		if code != 200 || hdr.Get("Idempotent-Replayed") != "" {
			t.Fatalf("tenant %d, first use of the key: %d %v %v", i, code, body, hdr)
		}
		code, body, hdr = do(t, h, "POST", path, `{"holder":"w","ttl_ms":60000}`, with(auth, "Idempotency-Key", idem)...)
		if code != 200 || hdr.Get("Idempotent-Replayed") != "true" || body["key"] != fmt.Sprintf("idem-%d-%s", i, suffix) {
			t.Fatalf("tenant %d, replay: %d %v %v", i, code, body, hdr)
		}
	}

	// Events: the same fingerprint is processed once per tenant.
	ev := `{"source":"s","level":"error","message":"m","fingerprint":"fp-` + suffix + `"}`
	for _, auth := range [][]string{as, bs} {
		if code, body, _ := do(t, h, "POST", "/v1/events", ev, auth...); code != 200 || body["process"] != true || body["count"] != float64(1) {
			t.Fatalf("observe: %d %v; want process, count 1 for each tenant", code, body)
		}
	}

	// Inbox: the same source and event ID, each delivery signed with its
	// tenant's secret, is new for each, and each lists its own payload.
	now, id := time.Now(), "evt-"+suffix
	for _, c := range []struct{ secret, body string }{{secretA, `{"of":"a"}`}, {secretB, `{"of":"b"}`}} {
		for range 2 {
			if code, body, _ := do(t, h, "POST", "/v1/inbox/stripe", c.body, webhook(t, c.secret, id, now, c.body)...); code != 204 {
				t.Fatalf("delivery: %d %v", code, body)
			}
		}
	}
	if code, _, _ := do(t, h, "POST", "/v1/inbox/stripe", `{}`, webhook(t, rotated, id, now, `{}`)...); code != 401 {
		t.Fatalf("a delivery signed with no tenant's secret: %d, want 401", code)
	}
	for _, c := range []struct {
		auth []string
		of   string
	}{{as, "a"}, {bs, "b"}} {
		code, body, _ := do(t, h, "GET", "/v1/inbox/stripe", "", c.auth...)
		evs, _ := body["events"].([]any)
		var mine []any
		for _, e := range evs {
			if e.(map[string]any)["id"] == id {
				mine = append(mine, e)
			}
		}
		if code != 200 || len(mine) != 1 || mine[0].(map[string]any)["payload"].(map[string]any)["of"] != c.of {
			t.Fatalf("list of tenant %s: %d %v", c.of, code, body)
		}
	}

	// Sequences: the same counter counts from 1 for each tenant.
	seqPath := "/v1/sequences/books/inv-" + suffix + "/next"
	for _, auth := range [][]string{as, bs} {
		if code, body, _ := do(t, h, "POST", seqPath, `{}`, auth...); code != 200 || body["first"] != float64(1) {
			t.Fatalf("next: %d %v; want 1 for each tenant", code, body)
		}
	}

	// Quotas: the same key has a budget per tenant.
	quotaPath := "/v1/quotas/q-" + suffix + "/consume"
	policy := `{"policy":{"kind":"window","rate":1,"per_ms":60000}}`
	for _, auth := range [][]string{as, bs} {
		if code, body, _ := do(t, h, "POST", quotaPath, policy, auth...); code != 200 {
			t.Fatalf("first charge: %d %v; want 200 for each tenant", code, body)
		}
	}
	for _, auth := range [][]string{as, bs} {
		if code, _, _ := do(t, h, "POST", quotaPath, policy, auth...); code != 429 {
			t.Fatalf("second charge: %d, want 429 for each tenant", code)
		}
	}

	// Tokens: a code of one tenant is unknown to the other.
	code, body, _ := do(t, h, "POST", "/v1/tokens", `{"purpose":"reset","subject":"u","ttl_ms":900000}`, as...)
	if code != 200 {
		t.Fatalf("issue: %d %v", code, body)
	}
	consume := fmt.Sprintf(`{"purpose":"reset","token":%q}`, body["token"])
	if code, body, _ := do(t, h, "POST", "/v1/tokens/consume", consume, bs...); code != 404 || body["type"] != "urn:racefree:problem:token-unknown" {
		t.Fatalf("the other tenant's code: %d %v, want 404 token-unknown", code, body)
	}
	if code, body, _ := do(t, h, "POST", "/v1/tokens/consume", consume, as...); code != 200 {
		t.Fatalf("own code after the other's attempt: %d %v", code, body)
	}

	// Audit: the same scope is a chain per tenant.
	scope := "sc-" + suffix
	for _, c := range []struct {
		auth  []string
		actor string
	}{{as, "alice"}, {bs, "bob"}} {
		entry := fmt.Sprintf(`{"scope":%q,"actor":%q,"action":"a","subject":"s"}`, scope, c.actor)
		if code, body, _ := do(t, h, "POST", "/v1/audit", entry, c.auth...); code != 200 || body["seq"] != float64(1) {
			t.Fatalf("append: %d %v; want seq 1 for each tenant", code, body)
		}
	}
	for _, c := range []struct {
		auth  []string
		actor string
	}{{as, "alice"}, {bs, "bob"}} {
		code, body, _ := do(t, h, "GET", "/v1/audit?scope="+scope, "", c.auth...)
		entries, _ := body["entries"].([]any)
		if code != 200 || len(entries) != 1 || entries[0].(map[string]any)["actor"] != c.actor {
			t.Fatalf("list: %d %v; want the tenant's own entry only", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/audit/verify?scope="+scope, "", c.auth...); code != 200 || body["intact"] != true {
			t.Fatalf("verify: %d %v", code, body)
		}
		if code, body, _ := do(t, h, "POST", "/v1/audit/checkpoints", fmt.Sprintf(`{"scope":%q}`, scope), c.auth...); code != 200 {
			t.Fatalf("checkpoint: %d %v", code, body)
		}
	}
}

// TestTenantIsNeverTakenFromTheRequest: a request runs for its key's
// tenant whatever its headers, query or body say.
func TestTenantIsNeverTakenFromTheRequest(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ka, kb := newKey(t, db, tenantA, apikey.AllScopes), newKey(t, db, tenantB, apikey.AllScopes)
		h := server.New(db, server.Options{RequireKey: true}).Handler()
		as, bs := bearerOf(ka), bearerOf(kb)
		spoof := []string{"X-Racefree-Tenant", tenantB, "X-Tenant", tenantB, "X-Tenant-ID", tenantB, "Tenant", tenantB,
			"Racefree-Tenant", tenantB, "X-Forwarded-Tenant", tenantB}
		code, body, _ := do(t, h, "POST", "/v1/claims/spoofed?tenant="+tenantB, `{"holder":"w","ttl_ms":60000}`, append(as, spoof...)...)
		if code != 200 {
			t.Fatalf("acquire with spoofed headers: %d %v", code, body)
		}
		if code, _, _ := do(t, h, "GET", "/v1/claims/spoofed?tenant="+tenantA, "", append(bs, "X-Racefree-Tenant", tenantA)...); code != 404 {
			t.Fatalf("the other tenant sees the claim: %d, want 404", code)
		}
		if code, _, _ := do(t, h, "GET", "/v1/claims/spoofed", "", as...); code != 200 {
			t.Fatalf("the key's tenant: %d, want 200", code)
		}
		if n := rows(t, db, `SELECT count(*) FROM racefree_claims WHERE key = 'spoofed' AND tenant = 'acme'`); n != 1 {
			t.Fatalf("%d rows of acme's claim, want 1", n)
		}
		// A tenant in the body is no field of any request: 400, nothing
		// written for either tenant.
		code, body, _ = do(t, h, "POST", "/v1/claims/body", `{"holder":"w","ttl_ms":60000,"tenant":"globex"}`, as...)
		if code != 400 {
			t.Fatalf("a tenant in the body: %d %v, want 400", code, body)
		}
		if n := rows(t, db, `SELECT count(*) FROM racefree_claims WHERE key = 'body'`); n != 0 {
			t.Fatalf("a tenant in the body wrote %d rows", n)
		}
		if n := rows(t, db, `SELECT count(*) FROM racefree_claims WHERE tenant = 'globex'`); n != 0 {
			t.Fatalf("%d rows of globex, which sent nothing", n)
		}
	})
}

func rows(t *testing.T, db *racefree.DB, query string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestScopesPerRoute: GET routes need read, state-changing ones write,
// the audit checkpoint and the outbox's dead-letter repairs admin; a key without the scope gets 403
// insufficient-scope with a challenge, and changes nothing.
func TestScopesPerRoute(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, tenantOptions(t))
		for pattern, scope := range s.Scopes() {
			want := "write"
			switch {
			case pattern == "POST /v1/audit/checkpoints", strings.HasPrefix(pattern, "POST /v1/outbox/dead/"):
				want = "admin"
			case strings.HasPrefix(pattern, "GET "):
				want = "read"
			}
			if scope != want {
				t.Errorf("%s needs %s, want %s", pattern, scope, want)
			}
		}
		if _, ok := s.Scopes()["POST /v1/inbox/{source}"]; ok {
			t.Error("the signed inbox route needs a key scope")
		}
		h := s.Handler()
		read, write, admin := newKey(t, db, tenantA, apikey.Read), newKey(t, db, tenantA, apikey.Write), newKey(t, db, tenantA, apikey.Admin)
		for _, c := range []struct {
			key, method, path, body string
			want                    int
		}{
			{read, "GET", "/v1/claims/k", "", 404},
			{read, "POST", "/v1/claims/k", `{"holder":"w","ttl_ms":60000}`, 403},
			{read, "DELETE", "/v1/claims/k?holder=w&fence=1", "", 403},
			{read, "POST", "/v1/audit/checkpoints", `{"scope":"s"}`, 403},
			{write, "GET", "/v1/claims/k", "", 403},
			{write, "GET", "/v1/inbox/stripe", "", 403},
			{write, "POST", "/v1/audit/checkpoints", `{"scope":"s"}`, 403},
			{admin, "POST", "/v1/claims/k", `{"holder":"w","ttl_ms":60000}`, 403},
			{admin, "GET", "/v1/audit/checkpoints/latest?scope=s", "", 403},
			{read, "POST", "/v1/outbox", `{"topic":"t"}`, 403},
			{admin, "POST", "/v1/outbox", `{"topic":"t"}`, 403},
			{write, "GET", "/v1/outbox/dead", "", 403},
			{write, "GET", "/v1/outbox/stats", "", 403},
			{read, "GET", "/v1/outbox/stats", "", 200},
			{read, "POST", "/v1/outbox/dead/1/redrive", "", 403},
			{write, "POST", "/v1/outbox/dead/1/redrive", "", 403},
			{write, "POST", "/v1/outbox/dead/1/discard", "", 403},
			{admin, "POST", "/v1/outbox/dead/1/discard", "", 404},
		} {
			code, body, hdr := do(t, h, c.method, c.path, c.body, bearerOf(c.key)...)
			if code != c.want {
				t.Errorf("%s %s: %d %v, want %d", c.method, c.path, code, body, c.want)
			}
			if code == 403 && (body["type"] != "urn:racefree:problem:insufficient-scope" || !strings.Contains(hdr.Get("WWW-Authenticate"), `error="insufficient_scope"`)) {
				t.Errorf("%s %s: 403 %v %v; want insufficient-scope with a challenge", c.method, c.path, body, hdr)
			}
		}
		if n := rows(t, db, `SELECT count(*) FROM racefree_claims`) + rows(t, db, `SELECT count(*) FROM racefree_audit_checkpoints`) +
			rows(t, db, `SELECT count(*) FROM racefree_outbox`); n != 0 {
			t.Fatalf("refused requests wrote %d rows", n)
		}
		if code, body, _ := do(t, h, "POST", "/v1/claims/k", `{"holder":"w","ttl_ms":60000}`, bearerOf(write)...); code != 200 {
			t.Fatalf("write key, POST: %d %v", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/claims/k", "", bearerOf(read)...); code != 200 {
			t.Fatalf("read key, GET: %d %v", code, body)
		}
		if code, _, _ := do(t, h, "POST", "/v1/audit", `{"scope":"s","actor":"a","action":"x","subject":"y"}`, bearerOf(write)...); code != 200 {
			t.Fatalf("append: %d", code)
		}
		if code, body, _ := do(t, h, "POST", "/v1/audit/checkpoints", `{"scope":"s"}`, bearerOf(admin)...); code != 200 {
			t.Fatalf("admin key, checkpoint: %d %v", code, body)
		}
	})
}

// TestBadCredentialsAre401AndTouchNothing: a missing, malformed, unknown,
// wrong or revoked credential is 401 with WWW-Authenticate, never 500; a
// malformed one is refused without a statement (the database is closed).
func TestBadCredentialsAre401AndTouchNothing(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		db := testdb.Open(t, d, nil)
		key := newKey(t, db, tenantA, apikey.AllScopes)
		revoked := newKey(t, db, tenantA, apikey.AllScopes)
		store, err := apikey.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Revoke(context.Background(), tenantA, strings.Split(strings.TrimPrefix(revoked, "rfk_"+tenantA+"_"), "_")[0]); err != nil {
			t.Fatal(err)
		}
		secretOf := key[strings.LastIndexByte(key, '_')+1:]
		id := strings.TrimSuffix(strings.TrimPrefix(key, "rfk_"+tenantA+"_"), "_"+secretOf)
		wrong := strings.TrimSuffix(key, secretOf) + strings.Repeat("0", 64)
		malformed := []string{"Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "bearer " + key, "Bearer " + key + "x", "Bearer " + strings.ToUpper(key),
			"Bearer rfk_" + tenantA + "_" + id, "Bearer " + strings.Repeat("a", 5000), "Bearer rfk_a\tb_" + id + "_" + secretOf}
		h := server.New(db, server.Options{RequireKey: true}).Handler()
		before := rows(t, db, `SELECT count(*) FROM racefree_tenants`)
		for _, auth := range append([]string{"", "Bearer " + wrong, "Bearer " + revoked, "Bearer rfk_ghost_" + id + "_" + secretOf,
			"Bearer rfk_" + tenantB + "_" + id + "_" + secretOf}, malformed...) {
			var hdr []string
			if auth != "" {
				hdr = []string{"Authorization", auth}
			}
			code, body, got := do(t, h, "POST", "/v1/claims/k", `{"holder":"w","ttl_ms":60000}`, hdr...)
			if code != 401 || got.Get("WWW-Authenticate") == "" || body["type"] != "urn:racefree:problem:unauthorized" {
				t.Errorf("Authorization %q: %d %v %v, want 401 with a challenge", auth, code, body, got)
			}
		}
		if n := rows(t, db, `SELECT count(*) FROM racefree_claims`); n != 0 {
			t.Fatalf("refused requests wrote %d claims", n)
		}
		if after := rows(t, db, `SELECT count(*) FROM racefree_tenants`); after != before {
			t.Fatalf("refused requests registered %d tenants", after-before)
		}
		// Two Authorization headers are refused too.
		req := httptest.NewRequest("GET", "/v1/claims/k", nil)
		req.Header.Add("Authorization", "Bearer "+key)
		req.Header.Add("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 401 {
			t.Fatalf("two Authorization headers: %d, want 401", rec.Code)
		}
		// Malformed credentials touch nothing: they are refused with the
		// database closed, where reading a key would be a 503.
		closed := testdb.Open(t, d, nil)
		hc := server.New(closed, server.Options{RequireKey: true}).Handler()
		closed.Close()
		for _, auth := range malformed {
			if code, body, _ := do(t, hc, "GET", "/v1/claims/k", "", "Authorization", auth); code != 401 {
				t.Errorf("Authorization %q with the database closed: %d %v, want 401", auth, code, body)
			}
		}
		if code, body, _ := do(t, hc, "GET", "/v1/claims/k", "", bearerOf(key)...); code < 500 {
			t.Errorf("a well-formed key with the database closed: %d %v, want a 5xx (reading the key failed)", code, body)
		}
	})
}

// TestRevokedKeyIsRefusedWithinOneSecondOnEveryInstance: two servers on
// one database have served a key; once `racefree keys revoke` (here the
// store on a third connection) revokes it, both answer 401 within a
// second.
func TestRevokedKeyIsRefusedWithinOneSecondOnEveryInstance(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		admin, err := apikey.New(testdb.Open(t, d, nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := admin.Create(ctx, tenantA, apikey.Read, "")
		if err != nil {
			t.Fatal(err)
		}
		one := server.New(testdb.Open(t, d, nil), server.Options{RequireKey: true}).Handler()
		two := server.New(testdb.Open(t, d, nil), server.Options{RequireKey: true}).Handler()
		for _, h := range []http.Handler{one, two} {
			if code, _, _ := do(t, h, "GET", "/v1/claims/k", "", bearerOf(c.Token)...); code != 404 {
				t.Fatalf("before the revocation: %d, want 404", code)
			}
		}
		if _, err := admin.Revoke(ctx, tenantA, c.ID); err != nil {
			t.Fatal(err)
		}
		revokedAt := time.Now()
		for i, h := range []http.Handler{one, two} {
			for {
				code, _, _ := do(t, h, "GET", "/v1/claims/k", "", bearerOf(c.Token)...)
				if code == 401 {
					break
				}
				if code != 404 {
					t.Fatalf("instance %d: %d", i+1, code)
				}
				if time.Since(revokedAt) > 10*time.Second {
					t.Fatalf("instance %d still accepts the revoked key", i+1)
				}
				time.Sleep(5 * time.Millisecond) // poll the state
			}
		}
		if took := time.Since(revokedAt); took > time.Second {
			t.Fatalf("the revoked key was accepted for %v after its revocation, want at most 1s", took)
		}
	})
}

// TestTokenAndAnonymousAreTheDefaultTenant: Options.Token is a key of the
// default tenant with every scope; without Token and RequireKey a request
// without credentials is the default tenant with every scope, as before
// tenants; a request that carries a credential must carry a valid one.
func TestTokenAndAnonymousAreTheDefaultTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ka := newKey(t, db, tenantA, apikey.AllScopes)
		ring := auditRing(t, true)
		tok := server.New(db, server.Options{Token: "s3cret", AuditKeys: ring}).Handler()
		open := server.New(db, server.Options{AuditKeys: ring}).Handler()
		if code, body, _ := do(t, tok, "POST", "/v1/claims/t", `{"holder":"w","ttl_ms":60000}`, "Authorization", "Bearer s3cret"); code != 200 {
			t.Fatalf("token: %d %v", code, body)
		}
		if code, _, _ := do(t, tok, "POST", "/v1/claims/t", `{"holder":"w","ttl_ms":60000}`); code != 401 {
			t.Fatalf("no credential with a token configured: %d, want 401", code)
		}
		if code, body, _ := do(t, tok, "POST", "/v1/audit/checkpoints", `{"scope":"s"}`, "Authorization", "Bearer s3cret"); code != 404 || body["type"] != "urn:racefree:problem:not-found" {
			t.Fatalf("token, admin route: %d %v; want past the scope check (404: no entries)", code, body)
		}
		if code, body, _ := do(t, open, "GET", "/v1/claims/t", ""); code != 200 || body["holder"] != "w" {
			t.Fatalf("anonymous reads the default tenant's claim: %d %v", code, body)
		}
		if code, _, _ := do(t, open, "GET", "/v1/claims/t", "", bearerOf(ka)...); code != 404 {
			t.Fatalf("acme's key sees the default tenant's claim: %d, want 404", code)
		}
		if code, _, _ := do(t, tok, "GET", "/v1/claims/t", "", bearerOf(ka)...); code != 404 {
			t.Fatalf("with a token configured, a key still works for its tenant: %d, want 404", code)
		}
		if code, _, _ := do(t, open, "GET", "/v1/claims/t", "", "Authorization", "Bearer nope"); code != 401 {
			t.Fatalf("a bad credential without any configured: %d, want 401", code)
		}
		if n := rows(t, db, `SELECT count(*) FROM racefree_claims WHERE tenant = 'default' AND key = 't'`); n != 1 {
			t.Fatalf("%d default-tenant rows, want 1", n)
		}
	})
}

// TestMetricsAndReadyzRevealNoTenant: /metrics and /readyz answer without
// credentials when keys are required, and name no tenant, key id or key
// in any label or value, after every kind of request of two tenants.
func TestMetricsAndReadyzRevealNoTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		const ta, tb = "tenant-alpha-7f3", "tenant-beta-9c1"
		ka, kb := newKey(t, db, ta, apikey.AllScopes), newKey(t, db, tb, apikey.Read)
		opts := tenantOptions(t)
		opts.InboxSecrets = map[string][]string{ta + "/stripe": {secretA}, tb + "/stripe": {secretB}}
		h := server.New(db, opts).Handler()
		for _, k := range []string{ka, kb} {
			auth := bearerOf(k)
			do(t, h, "POST", "/v1/claims/k", `{"holder":"w","ttl_ms":60000}`, auth...)
			do(t, h, "GET", "/v1/claims/k", "", auth...)
			do(t, h, "POST", "/v1/events", `{"source":"s","level":"e","message":"m"}`, append(auth, "Idempotency-Key", `"i"`)...)
			do(t, h, "POST", "/v1/events", `{"source":"s","level":"e","message":"m"}`, append(auth, "Idempotency-Key", `"i"`)...)
			do(t, h, "POST", "/v1/sequences/s/n/next", `{}`, auth...)
			do(t, h, "POST", "/v1/audit", `{"scope":"s","actor":"a","action":"x","subject":"y"}`, auth...)
			do(t, h, "GET", "/v1/audit/verify?scope=s", "", auth...)
			do(t, h, "POST", "/v1/tokens", `{"purpose":"p","subject":"u","ttl_ms":900000}`, auth...)
			do(t, h, "POST", "/v1/quotas/q/consume", `{"policy":{"kind":"window","rate":1,"per_ms":1000}}`, auth...)
		}
		for _, s := range []string{secretA, secretB} {
			do(t, h, "POST", "/v1/inbox/stripe", `{}`, webhook(t, s, "e1", time.Now(), `{}`)...)
		}
		do(t, h, "GET", "/v1/claims/k", "", "Authorization", "Bearer rfk_"+ta+"_0123456789abcdef_"+strings.Repeat("0", 64))
		code, _, _ := do(t, h, "GET", "/readyz", "")
		metrics := scrape(t, h)
		if code != 200 || !strings.Contains(metrics, "racefree_http_requests_total") || !strings.Contains(metrics, `racefree_inbox_deliveries_total{outcome="new",source="stripe"} 2`) {
			t.Fatalf("readyz %d; metrics:\n%s", code, metrics)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		for _, secretText := range []string{ta, tb, "alpha", "beta", "rfk_", keyID(ka), keyID(kb), ka[len(ka)-64:], kb[len(kb)-64:]} {
			if strings.Contains(metrics, secretText) {
				t.Errorf("/metrics reveals %q", secretText)
			}
			if strings.Contains(rec.Body.String(), secretText) {
				t.Errorf("/readyz reveals %q", secretText)
			}
		}
	})
}

func keyID(key string) string {
	rest := key[:len(key)-65]
	return rest[len(rest)-16:]
}
