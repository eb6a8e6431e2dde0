package server_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// The tests of this file hold the dashboard at its edges, a second round
// from outside: a session's keys when a key is wrong, revoked or cannot
// be read, the Redrive and Discard buttons by scope, a dead letter's
// bytes, a list's filter and sort key at their bounds, and what the page
// shows of the audit log, the requests in progress and a long lease.

// TestOutside3DashboardSessionKeysAtTheirEdges: a wrong key added to a
// session of one key leaves the session as it was (401, no cookie set);
// when the viewed tenant's key is revoked the page shows the first key
// left, not the one added last; a valid key signed in over a session
// whose every key was revoked starts a session of its own; and a database
// that cannot be read while the keys are checked is 503, the session
// kept, never a sign-out.
func TestOutside3DashboardSessionKeysAtTheirEdges(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		store, err := apikey.New(db, &apikey.Options{CacheTTL: -1}) // no cache: a revocation counts at once
		if err != nil {
			t.Fatal(err)
		}
		h := server.New(db, server.Options{RequireKey: true, Keys: store}).Handler()
		keyA, keyB, keyC := createKey(t, db, "acme", apikey.Read), createKey(t, db, "globex", apikey.Read), createKey(t, db, "initech", apikey.Read)
		for _, tn := range []string{"acme", "globex", "initech"} {
			acquire(t, db, tn, "report", "holder-of-"+tn)
		}
		shows := func(session, want string) page {
			t.Helper()
			p := visit(t, h, "GET", "/", session, nil)
			if p.code != 200 || !strings.Contains(p.body, `<strong id="tenant">`+want+`</strong>`) || !strings.Contains(p.body, "holder-of-"+want) {
				t.Fatalf("want %s's page: %d %s", want, p.code, p.body)
			}
			return p
		}
		add := func(session, key string) string {
			t.Helper()
			q := visit(t, h, "POST", "/login", session, url.Values{"key": {key}, "csrf": {csrfOf(t, visit(t, h, "GET", "/", session, nil))}})
			next := newSession(q)
			if q.code != 303 || next == "" {
				t.Fatalf("add a key: %d %v %s", q.code, q.header, q.body)
			}
			return next
		}

		// A wrong key added to a session of one key: 401, the session as it was.
		one := signIn(t, h, keyA.Token)
		q := visit(t, h, "POST", "/login", one, url.Values{"key": {"wrong"}, "csrf": {csrfOf(t, shows(one, "acme"))}})
		if q.code != 401 || q.header.Get("Set-Cookie") != "" {
			t.Fatalf("a wrong key added to a session of one key: %d, Set-Cookie %q, want 401 and the cookie left alone", q.code, q.header.Get("Set-Cookie"))
		}
		shows(one, "acme")

		// acme, then globex, then initech; the page switched to globex,
		// whose key is then revoked: the first key left (acme's) shows.
		three := add(add(one, keyB.Token), keyC.Token)
		shows(three, "initech")
		toB := newSession(visit(t, h, "POST", "/switch", three, url.Values{"tenant": {"globex"}, "csrf": {csrfOf(t, shows(three, "initech"))}}))
		shows(toB, "globex")
		if _, err := store.Revoke(ctx, "globex", keyB.ID); err != nil {
			t.Fatal(err)
		}
		if p := shows(toB, "acme"); !strings.Contains(p.body, "was revoked or expired") {
			t.Fatalf("the page does not say a key left the session: %s", p.body)
		}

		// Every key of a session revoked; a valid key signed in over it
		// (with the token of a page rendered before) starts a session.
		alone := signIn(t, h, keyA.Token)
		token := csrfOf(t, shows(alone, "acme"))
		if _, err := store.Revoke(ctx, "acme", keyA.ID); err != nil {
			t.Fatal(err)
		}
		q = visit(t, h, "POST", "/login", alone, url.Values{"key": {keyC.Token}, "csrf": {token}})
		fresh := newSession(q)
		if q.code != 303 || fresh == "" {
			t.Fatalf("a valid key over a session whose keys were all revoked: %d %v %s", q.code, q.header, q.body)
		}
		shows(fresh, "initech")

		// The database cannot be read while the session's keys are checked:
		// 503, and the cookie is left alone.
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if p := visit(t, h, "GET", "/", fresh, nil); p.code != 503 || p.header.Get("Set-Cookie") != "" {
			t.Fatalf("the keys unreadable: %d, Set-Cookie %q, want 503 and the session kept: %s", p.code, p.header.Get("Set-Cookie"), p.body)
		}
	})
}

// TestOutside3DashboardRepairButtonsByScope: the page shows Redrive and
// Discard to a key with the admin scope (without write too) and to no
// key without it; an address's redriven=0 names no message; a dead
// letter whose payload is bytes, not UTF-8, shows as base64.
func TestOutside3DashboardRepairButtonsByScope(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{RequireKey: true})
		h := s.Handler()
		o, _ := s.Outbox()
		ctx, _ := tenant.With(context.Background(), "acme")
		id := killWith(t, o, ctx, "bytes", []byte{0xff, 0x00, 0x80}, nil)
		redrive := `action="/outbox/dead/` + fmtID(id) + `/redrive"`
		admin := signIn(t, h, newKey(t, db, "acme", apikey.Read|apikey.Admin))
		writer := signIn(t, h, newKey(t, db, "acme", apikey.Read|apikey.Write))
		if p := visit(t, h, "GET", "/", admin, nil); p.code != 200 || !strings.Contains(p.body, redrive) {
			t.Fatalf("a key with the admin scope (not write) sees no Redrive: %d %s", p.code, p.body)
		}
		if p := visit(t, h, "GET", "/", writer, nil); p.code != 200 || strings.Contains(p.body, redrive) {
			t.Fatalf("a key without the admin scope sees Redrive: %d %s", p.code, p.body)
		}
		if p := visit(t, h, "GET", "/?redriven=0&discarded=0", admin, nil); p.code != 200 || strings.Contains(p.body, "Message 0 ") {
			t.Fatalf("redriven=0 names a message: %d %s", p.code, p.body)
		}
		p := visit(t, h, "GET", "/outbox/dead/"+fmtID(id), admin, nil)
		if p.code != 200 || !strings.Contains(p.body, "Payload (base64)") || !strings.Contains(p.body, `<pre id="dead-payload">/wCA</pre>`) {
			t.Fatalf("a payload of bytes: %d %s", p.code, p.body)
		}
	})
}

// TestOutside3DashboardListsAtTheirBounds: a claim key filter of exactly
// claim.MaxKeyBytes is taken, one byte more is 400; a whole-number sort
// key of 0 (the dead letters after=0) is the first page, not refused.
func TestOutside3DashboardListsAtTheirBounds(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{})
		h := s.Handler()
		o, _ := s.Outbox()
		id := killOne(t, o, context.Background(), "mail")
		for _, c := range []struct {
			target string
			want   int
		}{
			{"/?claims.key=" + strings.Repeat("k", claim.MaxKeyBytes), 200},
			{"/?claims.key=" + strings.Repeat("k", claim.MaxKeyBytes+1), 400},
			{"/?claims.holder=" + strings.Repeat("h", claim.MaxHolderBytes+1), 400},
		} {
			if p := visit(t, h, "GET", c.target, "", nil); p.code != c.want {
				t.Fatalf("GET %s…: %d, want %d", c.target[:20], p.code, c.want)
			}
		}
		if p := visit(t, h, "GET", "/?after=0", "", nil); p.code != 200 || !strings.Contains(p.body, `<a href="/outbox/dead/`+fmtID(id)+`"`) {
			t.Fatalf("after=0: %d, want the first page of dead letters: %s", p.code, p.body)
		}
	})
}

// TestOutside3DashboardShowsWhatItPromises: the audit scope's latest
// checkpoint is its last one, not its first; the requests in progress
// leave out a completed request; a claim's time left of 3h02m30s reads
// 3h02m (a manual clock).
func TestOutside3DashboardShowsWhatItPromises(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{Token: "s3cret-token", AuditKeys: auditRing(t, true)}).Handler()
		auth := []string{"Authorization", "Bearer s3cret-token"}
		for _, c := range []struct{ path, body string }{
			{"/v1/audit", `{"scope":"billing","actor":"ops","action":"refund","subject":"order-1"}`},
			{"/v1/audit/checkpoints", `{"scope":"billing"}`},
			{"/v1/audit", `{"scope":"billing","actor":"ops","action":"refund","subject":"order-2"}`},
			{"/v1/audit/checkpoints", `{"scope":"billing"}`},
		} {
			if code, body, _ := do(t, h, "POST", c.path, c.body, auth...); code != 200 {
				t.Fatalf("POST %s: %d %v", c.path, code, body)
			}
		}
		acquire3h := func() {
			t.Helper()
			if _, err := claim.New(db).Acquire(context.Background(), db, "long-lease", "h", 3*time.Hour+2*time.Minute+30*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		acquire3h()
		idem := idempotency.New(db, nil)
		if _, err := idem.Do(context.Background(), "checkout", "key-done", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
			return []byte("{}"), nil
		}); err != nil {
			t.Fatal(err)
		}
		var p page
		if _, err := idem.Do(context.Background(), "checkout", "key-in-flight", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
			p = visit(t, h, "GET", "/", "", nil, auth...) // while the request is in progress
			return []byte("{}"), nil
		}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p.body, "#2 at entry 2,") {
			t.Errorf("the audit scope's latest checkpoint is not its second: %s", p.body)
		}
		if !strings.Contains(p.body, `<th scope="row">key-in-flight</th>`) || strings.Contains(p.body, "key-done") {
			t.Errorf("the requests in progress: want key-in-flight and not the completed key-done: %s", p.body)
		}
		if !strings.Contains(p.body, `<th scope="row">long-lease</th><td class="holder">h</td><td class="num">1</td><td class="num">3h02m</td>`) {
			t.Errorf("a claim with 3h02m30s left does not read 3h02m: %s", p.body)
		}
	})
}

// TestOutside3RelayErrorsAreTheDatabaseErrors: racefree_outbox_relay_errors_total
// counts the database errors the watched relay met (here a relay of a
// closed database, whose every poll fails), and nothing else.
func TestOutside3RelayErrorsAreTheDatabaseErrors(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{})
		closed := testdb.Open(t, testdb.NewDSN(t, db.Engine()), nil)
		o, err := server.New(closed, server.Options{}).Outbox()
		if err != nil {
			t.Fatal(err)
		}
		r, err := o.NewRelay(func(context.Context, *outbox.Delivery) error { return nil }, &outbox.RelayOptions{PollInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := closed.Close(); err != nil {
			t.Fatal(err)
		}
		s.WatchRelay(r)
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		deadline := time.Now().Add(20 * time.Second)
		for r.Stats().Errors < 2 { // wait on the state: two polls failed
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("the relay of a closed database met no error: %+v", r.Stats())
			}
			time.Sleep(time.Millisecond)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		st := r.Stats()
		m := parseMetrics(t, scrape(t, s.Handler()))
		m.want(t, "a relay of a closed database", "racefree_outbox_relay_errors_total", float64(st.Errors))
		m.want(t, "a relay of a closed database", "racefree_outbox_deliveries_total", 0, "outcome", "stale")
	})
}
