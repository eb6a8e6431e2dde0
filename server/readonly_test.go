package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/postgres"
	"github.com/racefree/racefree/seq"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// TestReadOnlyNode serves a database whose sessions are read-only (a
// write fails with SQLSTATE 25006 and reads work, as on a hot standby),
// filled while it was writable, by a fresh process (no tenant known to
// it): every read route answers 200 with the data, for the default tenant
// and for an API key's tenant, and so do the library's reads on the pool;
// every write route answers 503 read-only with Retry-After; /readyz
// answers 503 read-only with its reason.
func TestReadOnlyNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.NewPostgresDatabase(t)
	auth := []string{"Authorization", "Bearer s3cret-token"}
	opts := func() server.Options {
		return server.Options{Token: "s3cret-token", AuditKeys: auditRing(t, true),
			InboxSecrets: map[string][]string{"stripe": {secret}}}
	}

	// Fill it while it is writable.
	primary := testdb.Open(t, dsn, nil)
	s := server.New(primary, opts())
	h := s.Handler()
	for _, c := range []struct{ path, body string }{
		{"/v1/claims/nightly", `{"holder":"w1","ttl_ms":3600000}`},
		{"/v1/sequences/invoices/2026/next", `{"n":3}`},
		{"/v1/audit", `{"scope":"billing","actor":"ops","action":"refund","subject":"order-1"}`},
		{"/v1/audit", `{"scope":"billing","actor":"ops","action":"refund","subject":"order-2"}`},
		{"/v1/audit/checkpoints", `{"scope":"billing"}`},
		{"/v1/quotas/user-42/consume", `{"n":3,"policy":{"kind":"window","rate":10,"per_ms":3600000}}`},
		{"/v1/outbox", `{"topic":"mail","payload":{"to":"a@example.com"}}`},
	} {
		if code, body, _ := do(t, h, "POST", c.path, c.body, auth...); code != 200 {
			t.Fatalf("POST %s: %d %v", c.path, code, body)
		}
	}
	if code, body, _ := do(t, h, "POST", "/v1/inbox/stripe", `{}`, webhook(t, secret, "evt_1", time.Now(), `{}`)...); code != 204 {
		t.Fatalf("inbox: %d %v", code, body)
	}
	o, _ := s.Outbox()
	dead := killOne(t, o, ctx, "hooks")
	key := newKey(t, primary, "acme", apikey.Read|apikey.Write)
	acquire(t, primary, "acme", "acme-job", "acme-worker")
	_ = primary.Close()

	testdb.SetReadOnly(t, dsn, true)
	db, err := postgres.Open(ctx, dsn, nil)
	if err != nil {
		t.Fatalf("open the read-only node: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	h = server.New(db, opts()).Handler()

	code, body, hdr := do(t, h, "GET", "/readyz", "")
	if code != 503 || body["type"] != server.ProblemType("read-only") || hdr.Get("Retry-After") == "" ||
		!strings.Contains(body["reason"].(string), "read-only") {
		t.Errorf("readyz on a read-only node: %d %v %v, want 503 read-only with a reason", code, body, hdr)
	}

	for _, c := range []struct {
		path, want string
		auth       []string
	}{
		{"/v1/claims/nightly", `"holder":"w1"`, auth},
		{"/v1/claims/acme-job", `"holder":"acme-worker"`, bearerOf(key)},
		{"/v1/audit?scope=billing", `"subject":"order-2"`, auth},
		{"/v1/audit/verify?scope=billing", `"intact":true`, auth},
		{"/v1/audit/checkpoints/latest?scope=billing", `"seq":2`, auth},
		{"/v1/inbox/stripe", `evt_1`, auth},
		{"/v1/outbox/dead", `"topic":"hooks"`, auth},
		{"/v1/outbox/stats", `"dead":1`, auth},
		{"/", "user-42", auth},
	} {
		p := visit(t, h, "GET", c.path, "", nil, c.auth...)
		if p.code != 200 || !strings.Contains(strings.ReplaceAll(p.body, " ", ""), strings.ReplaceAll(c.want, " ", "")) {
			t.Errorf("GET %s on a read-only node: %d %s, want 200 with %s", c.path, p.code, p.body, c.want)
		}
	}

	// The database gauges of /metrics, read in read-only transactions of
	// every tenant: the ready message, the dead letter, the audit entries
	// the checkpoint covers and the verify route above verified.
	m := parseMetrics(t, scrape(t, h))
	m.want(t, "read-only node", "racefree_database_gauges_ok", 1)
	m.want(t, "read-only node", "racefree_outbox_messages", 1, "state", "ready")
	m.want(t, "read-only node", "racefree_outbox_messages", 1, "state", "dead")
	m.want(t, "read-only node", "racefree_audit_uncheckpointed_entries", 0)
	m.want(t, "read-only node", "racefree_audit_unverified_entries", 0)

	// The library's reads on the pool, for a tenant this process never saw.
	actx, _ := tenant.With(ctx, "acme")
	if c, err := claim.New(db).Get(actx, db, "acme-job"); err != nil || c.Holder != "acme-worker" {
		t.Errorf("claim.Get on the pool: %v, %v", c, err)
	}
	if n, err := seq.New(db).Current(ctx, db, "invoices", "2026"); err != nil || n != 3 {
		t.Errorf("seq.Current on the pool: %d, %v", n, err)
	}

	for _, c := range []struct {
		method, path, body string
		header             []string
	}{
		{"POST", "/v1/claims/nightly", `{"holder":"w2","ttl_ms":60000}`, auth},
		{"POST", "/v1/claims/other", `{"holder":"w2","ttl_ms":60000}`, bearerOf(key)},
		{"POST", "/v1/claims/other", `{"holder":"w2","ttl_ms":60000}`, append([]string{"Idempotency-Key", `"k1"`}, auth...)},
		{"POST", "/v1/claims/nightly/renew", `{"holder":"w1","fence":1,"ttl_ms":60000}`, auth},
		{"DELETE", "/v1/claims/nightly?holder=w1&fence=1", "", auth},
		{"POST", "/v1/events", `{"source":"s","level":"l","message":"m"}`, auth},
		{"POST", "/v1/events/fp/result", `{"fence":1,"classification":"c"}`, auth},
		{"POST", "/v1/sequences/invoices/2026/next", `{}`, auth},
		{"POST", "/v1/audit", `{"scope":"billing","actor":"ops","action":"refund"}`, auth},
		{"POST", "/v1/audit/checkpoints", `{"scope":"billing"}`, auth},
		{"POST", "/v1/quotas/user-42/consume", `{"policy":{"kind":"window","rate":10,"per_ms":3600000}}`, auth},
		{"POST", "/v1/tokens", `{"purpose":"p","subject":"s","ttl_ms":60000}`, auth},
		{"POST", "/v1/outbox", `{"topic":"mail"}`, auth},
		{"POST", "/v1/outbox/dead/" + fmtID(dead) + "/redrive", "", auth},
		{"POST", "/v1/inbox/stripe", `{}`, webhook(t, secret, "evt_2", time.Now(), `{}`)},
	} {
		code, body, hdr := do(t, h, c.method, c.path, c.body, c.header...)
		if code != 503 || body["type"] != server.ProblemType("read-only") || hdr.Get("Retry-After") == "" {
			t.Errorf("%s %s on a read-only node: %d %v, want 503 read-only with Retry-After", c.method, c.path, code, body)
		}
	}
	if n, err := seq.New(db).Current(ctx, db, "invoices", "2026"); err != nil || n != 3 {
		t.Errorf("seq.Current after the refused writes: %d, %v", n, err)
	}
}

// TestAStandbyIsReadOnly: on a real hot standby (in recovery, streaming
// from its primary), /readyz answers 503 read-only with the reason
// pg_is_in_recovery() gives, reads work and see what the primary wrote,
// and a write answers 503 read-only and changes nothing, on the standby
// or on the primary.
func TestAStandbyIsReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testdb.NewCluster(t)
	primary := c.Primary.Open(t, nil)
	h := server.New(primary, server.Options{}).Handler()
	if code, body, _ := do(t, h, "POST", "/v1/sequences/invoices/2026/next", `{"n":2}`); code != 200 {
		t.Fatalf("next on the primary: %d %v", code, body)
	}
	c.WaitStreaming(t)
	var lsn string
	if err := c.Primary.DB(t).QueryRowContext(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	standbyDB := c.Standby.DB(t)
	for caught := false; !caught; { // wait on the state: the standby replayed the write
		if err := standbyDB.QueryRowContext(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&caught); err != nil {
			t.Fatal(err)
		}
	}

	standby, err := postgres.Open(ctx, c.Standby.URL, nil)
	if err != nil {
		t.Fatalf("open the standby: %v", err)
	}
	t.Cleanup(func() { _ = standby.Close() })
	h = server.New(standby, server.Options{}).Handler()
	code, body, hdr := do(t, h, "GET", "/readyz", "")
	if code != 503 || body["type"] != server.ProblemType("read-only") || hdr.Get("Retry-After") == "" ||
		!strings.Contains(body["reason"].(string), "recovery") {
		t.Errorf("readyz on a standby: %d %v %v, want 503 read-only, the reason naming recovery", code, body, hdr)
	}
	if n, err := seq.New(standby).Current(ctx, standby, "invoices", "2026"); err != nil || n != 2 {
		t.Errorf("seq.Current on the standby: %d, %v; want 2", n, err)
	}
	parseMetrics(t, scrape(t, h)).want(t, "standby", "racefree_database_gauges_ok", 1)
	code, body, hdr = do(t, h, "POST", "/v1/sequences/invoices/2026/next", `{}`)
	if code != 503 || body["type"] != server.ProblemType("read-only") || hdr.Get("Retry-After") == "" {
		t.Errorf("next on the standby: %d %v, want 503 read-only with Retry-After", code, body)
	}
	if n, err := seq.New(primary).Current(ctx, primary, "invoices", "2026"); err != nil || n != 2 {
		t.Errorf("seq.Current on the primary after the refused write: %d, %v; want 2", n, err)
	}
}
