package server_test

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// TestEdgesDashboardOldestDueIsTheTenantsOwn holds the outbox's "Oldest
// due" to the page's tenant: one tenant's message, due for 75 s, shows on
// its own page and not on another's, whose outbox is empty.
func TestEdgesDashboardOldestDueIsTheTenantsOwn(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{RequireKey: true}).Handler()
		keyA, keyB := newKey(t, db, tenantA, apikey.AllScopes), newKey(t, db, tenantB, apikey.Read)
		if code, body, _ := do(t, h, "POST", "/v1/outbox", `{"topic":"t","payload":{}}`, append(bearerOf(keyA), "Content-Type", "application/json")...); code != 200 {
			t.Fatalf("enqueue: %d %v", code, body)
		}
		clock.Advance(75 * time.Second)
		for key, want := range map[string]string{keyA: "1m15s", keyB: "0 ms"} {
			p := visit(t, h, "GET", "/", signIn(t, h, key), nil)
			m := regexp.MustCompile(`<dd id="outbox-oldest-due">([^<]*)</dd>`).FindStringSubmatch(p.body)
			if p.code != 200 || m == nil || m[1] != want {
				t.Errorf("oldest due on the page of key %s…: %d %v, want %s", key[:8], p.code, m, want)
			}
		}
	})
}

// TestEdgesDueMessagesAtTheirExactMillisecond holds
// racefree_outbox_due_messages at a message's due time: a millisecond
// before, it is not due; at its exact millisecond it is, as a relay would
// claim it then.
func TestEdgesDueMessagesAtTheirExactMillisecond(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		if code, body, _ := do(t, h, "POST", "/v1/outbox", `{"topic":"t","payload":{},"delay_ms":60000}`, "Content-Type", "application/json"); code != 200 {
			t.Fatalf("enqueue: %d %v", code, body)
		}
		clock.Advance(time.Minute - time.Millisecond)
		parseMetrics(t, scrape(t, h)).want(t, "a millisecond before its due time", "racefree_outbox_due_messages", 0)
		clock.Advance(time.Millisecond)
		m := parseMetrics(t, scrape(t, h))
		m.want(t, "at its due time", "racefree_outbox_due_messages", 1)
		m.want(t, "at its due time", "racefree_outbox_oldest_due_age_seconds", 0)
	})
}

// TestEdgesUncheckpointedEntriesOfEachTenantsLatestCheckpoint holds
// racefree_audit_uncheckpointed_entries to each tenant's own latest
// checkpoint of a scope: another tenant's checkpoint of a scope of the
// same name covers nothing of this one's, and a scope's first checkpoint
// covers less than its latest.
func TestEdgesUncheckpointedEntriesOfEachTenantsLatestCheckpoint(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		opts := tenantOptions(t)
		h := server.New(db, opts).Handler()
		as, bs := bearerOf(newKey(t, db, tenantA, apikey.AllScopes)), bearerOf(newKey(t, db, tenantB, apikey.AllScopes))
		post := func(auth []string, path, body string) {
			t.Helper()
			if code, b, _ := do(t, h, "POST", path, body, append(auth, "Content-Type", "application/json")...); code != 200 {
				t.Fatalf("POST %s: %d %v", path, code, b)
			}
		}
		appendN := func(auth []string, n int) {
			t.Helper()
			for range n {
				post(auth, "/v1/audit", `{"scope":"billing","actor":"ops","action":"refund"}`)
			}
		}
		appendN(as, 3)
		post(as, "/v1/audit/checkpoints", `{"scope":"billing"}`)
		appendN(bs, 3)
		clock.Advance(time.Minute)
		m := parseMetrics(t, scrape(t, h))
		m.want(t, "acme's billing checkpointed, globex's not", "racefree_audit_uncheckpointed_entries", 3)
		m.want(t, "acme's billing checkpointed, globex's not", "racefree_audit_checkpoint_age_seconds", 60)

		post(bs, "/v1/audit/checkpoints", `{"scope":"billing"}`)
		appendN(bs, 2)
		post(bs, "/v1/audit/checkpoints", `{"scope":"billing"}`)
		clock.Advance(time.Minute)
		appendN(bs, 1)
		clock.Advance(time.Second)
		m = parseMetrics(t, scrape(t, h))
		m.want(t, "globex's second checkpoint and one entry past it", "racefree_audit_uncheckpointed_entries", 1)
		m.want(t, "globex's second checkpoint and one entry past it", "racefree_audit_checkpoint_age_seconds", 1)
	})
}

// TestEdgesAuditChainGaugesAfterRepairAndPruning holds what the audit
// gauges remember of verifications: a chain found broken counts in
// racefree_audit_broken_chains until a verification finds it intact
// (its entry put back), and then not; entries verified and then pruned
// away are not counted unverified: the count starts at the retention
// floor once pruning passed the last position verified.
func TestEdgesAuditChainGaugesAfterRepairAndPruning(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ring := auditRing(t, true)
		h := server.New(db, server.Options{AuditKeys: ring}).Handler()
		for range 3 {
			if code, body, _ := do(t, h, "POST", "/v1/audit", `{"scope":"billing","actor":"ops","action":"refund"}`, "Content-Type", "application/json"); code != 200 {
				t.Fatalf("append: %d %v", code, body)
			}
		}
		verify := func(intact bool) {
			t.Helper()
			if code, body, _ := do(t, h, "GET", "/v1/audit/verify?scope=billing", ""); code != 200 || body["intact"] != intact {
				t.Fatalf("verify: %d %v, want intact %v", code, body, intact)
			}
		}
		tamper := []string{`ALTER TABLE racefree_audit DISABLE TRIGGER USER`}
		if db.Engine() == racefree.SQLite {
			tamper = []string{`DROP TRIGGER racefree_audit_no_update`}
		}
		testdb.ExecAll(t, db.SQL(), append(tamper, `UPDATE racefree_audit SET actor = 'mallory' WHERE scope = 'billing' AND seq = 2`)...)
		verify(false)
		parseMetrics(t, scrape(t, h)).want(t, "a broken chain", "racefree_audit_broken_chains", 1)
		testdb.ExecAll(t, db.SQL(), `UPDATE racefree_audit SET actor = 'ops' WHERE scope = 'billing' AND seq = 2`)
		if db.Engine() == racefree.Postgres {
			testdb.ExecAll(t, db.SQL(), `ALTER TABLE racefree_audit ENABLE TRIGGER USER`)
		}
		verify(true)
		m := parseMetrics(t, scrape(t, h))
		m.want(t, "the chain repaired and verified", "racefree_audit_broken_chains", 0)
		m.want(t, "the chain repaired and verified", "racefree_audit_unverified_entries", 0)

		// Verified through entry 3; two more, then a pruning through 4
		// (entry 6 records it): the floor, 4, is past the position verified.
		for range 2 {
			if code, body, _ := do(t, h, "POST", "/v1/audit", `{"scope":"billing","actor":"ops","action":"refund"}`, "Content-Type", "application/json"); code != 200 {
				t.Fatalf("append: %d %v", code, body)
			}
		}
		log, err := audit.New(db, ring)
		if err != nil {
			t.Fatal(err)
		}
		ctx, err := tenant.With(context.Background(), tenant.Default)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := log.Prune(ctx, db, "billing", 4, "ops"); err != nil {
			t.Fatal(err)
		}
		parseMetrics(t, scrape(t, h)).want(t, "pruned past the position verified", "racefree_audit_unverified_entries", 2)
	})
}

// TestEdgesDashboardSessionKeysOfOneTenantAndRevoked holds a session's
// keys at their edges: signing in with another key of a tenant the session
// holds replaces that tenant's key (the page then runs with the new key's
// scopes, not the old one's); a revoked key that is not the one viewed
// still leaves the session, the page says so and the cookie is renewed
// without it; a form rendered before the revocation still posts with the
// cookie it was rendered under.
func TestEdgesDashboardSessionKeysOfOneTenantAndRevoked(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{RequireKey: true}).Handler()
		add := func(session, key string) string {
			t.Helper()
			p := visit(t, h, "GET", "/", session, nil)
			q := visit(t, h, "POST", "/login", session, url.Values{"key": {key}, "csrf": {csrfOf(t, p)}})
			next := newSession(q)
			if q.code != 303 || next == "" {
				t.Fatalf("add a key: %d %v", q.code, q.header)
			}
			return next
		}
		// A session of acme's read key; add acme's write-only key: it
		// replaces the read key, and the page is 403 (the key lacks the read
		// scope), not shown with the read key it replaced.
		s := signIn(t, h, newKey(t, db, "acme", apikey.Read))
		if p := visit(t, h, "GET", "/", s, nil); p.code != 200 {
			t.Fatalf("acme's read key: %d, want 200", p.code)
		}
		s = add(s, newKey(t, db, "acme", apikey.Write))
		if p := visit(t, h, "GET", "/", s, nil); p.code != 403 {
			t.Fatalf("after signing in with acme's write-only key: %d, want 403 (its scopes, not the read key's)", p.code)
		}

		// Two tenants' keys, globex viewed; revoke acme's.
		acme := createKey(t, db, "acme", apikey.Read)
		two := add(signIn(t, h, acme.Token), newKey(t, db, "globex", apikey.Read))
		before := visit(t, h, "GET", "/", two, nil)
		if before.code != 200 || !strings.Contains(before.body, `<strong id="tenant">globex</strong>`) || !strings.Contains(before.body, `id="switcher"`) {
			t.Fatalf("two keys, globex viewed: %d %s", before.code, before.body)
		}
		store, err := apikey.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Revoke(context.Background(), "acme", acme.ID); err != nil {
			t.Fatal(err)
		}
		revoked := time.Now()
		var p page
		for {
			p = visit(t, h, "GET", "/", two, nil)
			if strings.Contains(p.body, "was revoked or expired") {
				break
			}
			if time.Since(revoked) > 10*time.Second {
				t.Fatalf("the page never says acme's key left the session: %d %s", p.code, p.body)
			}
			time.Sleep(5 * time.Millisecond) // poll the state: the key cache lets a key live half a second
		}
		left := newSession(p)
		if left == "" || strings.Contains(p.body, `id="switcher"`) || !strings.Contains(p.body, `<strong id="tenant">globex</strong>`) {
			t.Fatalf("after acme's key was revoked: cookie %q, %s", left, p.body)
		}
		if q := visit(t, h, "POST", "/logout", two, url.Values{"csrf": {csrfOf(t, before)}}); q.code != 303 {
			t.Fatalf("signing out with the form of the page before the revocation: %d %s, want 303", q.code, q.body)
		}
	})
}

// TestEdgesRelayMetricsByOutcome holds racefree_outbox_deliveries_total's
// outcomes apart: a lease a heartbeat finds lapsed counts lease_lost (and
// its failure, recorded in its own tenure, retried), never stale.
func TestEdgesRelayMetricsByOutcome(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		s := server.New(db, server.Options{})
		h := s.Handler()
		if code, body, _ := do(t, h, "POST", "/v1/outbox", `{"topic":"t","payload":{}}`, "Content-Type", "application/json"); code != 200 {
			t.Fatalf("enqueue: %d %v", code, body)
		}
		o, err := s.Outbox()
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{}, 1)
		// One poll, at the start: nothing claims the message again once
		// its lease lapsed, so its one tenure ends by the heartbeat alone.
		r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
			select {
			case started <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return context.Cause(ctx)
		}, &outbox.RelayOptions{Lease: 300 * time.Millisecond, PollInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		s.WatchRelay(r)
		rctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		defer func() { stop(); <-done }()
		<-started
		clock.Advance(time.Minute) // the lease lapses; the next heartbeat finds it lost
		deadline := time.Now().Add(20 * time.Second)
		for st := r.Stats(); st.Retried < 1; st = r.Stats() {
			if time.Now().After(deadline) {
				t.Fatalf("the lapsed lease's failure was not recorded: %+v", st)
			}
			time.Sleep(5 * time.Millisecond)
		}
		m := parseMetrics(t, scrape(t, h))
		m.want(t, "a lease lost", "racefree_outbox_deliveries_total", 1, "outcome", "lease_lost")
		m.want(t, "a lease lost", "racefree_outbox_deliveries_total", 0, "outcome", "stale")
		m.want(t, "a lease lost", "racefree_outbox_deliveries_total", 1, "outcome", "retried")
		m.want(t, "a lease lost", "racefree_outbox_claimed_total", 1)
	})
}

// TestEdgesDashboardSignInOverACookieThatNoLongerOpens holds sign-in with
// a session cookie this server cannot open (sealed under another secret,
// as after a restart without --dashboard-secret, or holding only expired
// keys): the form, which carries no CSRF token then, starts a new session
// of the key given, as it does with no cookie at all.
func TestEdgesDashboardSignInOverACookieThatNoLongerOpens(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{RequireKey: true}).Handler()
		before := server.New(db, server.Options{RequireKey: true, DashboardSecret: []byte(strings.Repeat("b", 32))}).Handler()
		key := newKey(t, db, "acme", apikey.Read)
		stale := signIn(t, before, key)
		if p := visit(t, h, "GET", "/", stale, nil); p.code != 401 {
			t.Fatalf("a cookie sealed under another secret: %d, want 401 and the sign-in form", p.code)
		}
		p := visit(t, h, "POST", "/login", stale, url.Values{"key": {key}})
		s := newSession(p)
		if p.code != 303 || s == "" {
			t.Fatalf("sign in over a cookie that does not open: %d %s, want 303 and a new session", p.code, p.body)
		}
		if p := visit(t, h, "GET", "/", s, nil); p.code != 200 || !strings.Contains(p.body, `<strong id="tenant">acme</strong>`) {
			t.Fatalf("the new session: %d %s", p.code, p.body)
		}
	})
}
