package server_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// page is one dashboard answer.
type page struct {
	code   int
	body   string
	header http.Header
}

// visit sends one dashboard request to h with the session cookie (when
// not empty) and, for a POST, form as its body.
func visit(t *testing.T, h http.Handler, method, target, session string, form url.Values, header ...string) page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req := httptest.NewRequest(method, target, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if session != "" {
		req.AddCookie(&http.Cookie{Name: "racefree_session", Value: session})
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return page{code: rec.Code, body: rec.Body.String(), header: rec.Result().Header}
}

// signIn posts key to the sign-in form and returns the session cookie.
func signIn(t *testing.T, h http.Handler, key string) string {
	t.Helper()
	p := visit(t, h, "POST", "/login", "", url.Values{"key": {key}})
	if p.code != http.StatusSeeOther {
		t.Fatalf("sign in: %d %s", p.code, p.body)
	}
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if c.Name == "racefree_session" {
			return c.Value
		}
	}
	t.Fatalf("sign in set no session cookie: %v", p.header)
	return ""
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrfOf returns the CSRF token of the page's forms.
func csrfOf(t *testing.T, p page) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no CSRF token on the page: %s", p.body)
	}
	return m[1]
}

// acquire takes key for holder in tenant t.
func acquire(t *testing.T, db *racefree.DB, tenantID, key, holder string) {
	t.Helper()
	ctx, err := tenant.With(context.Background(), tenantID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := claim.New(db).Acquire(ctx, db, key, holder, time.Hour); err != nil {
		t.Fatal(err)
	}
}

// TestDashboardNeedsACredential: with a token, the dashboard shows the
// sign-in form (401) and nothing of the data to a request without a
// session, with a forged or expired cookie, or after a wrong key; the
// right key starts a session in an HttpOnly, SameSite=Strict cookie,
// Secure over TLS, and the page then shows the data; no key ever appears
// in a URL.
func TestDashboardNeedsACredential(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{Token: "s3cret-token"}).Handler()
		acquire(t, db, tenant.Default, "nightly", "worker-visible-only-signed-in")
		for _, p := range []page{
			visit(t, h, "GET", "/", "", nil),
			visit(t, h, "GET", "/", "forged-cookie", nil),
			visit(t, h, "GET", "/", strings.Repeat("A", 60), nil),
			visit(t, h, "POST", "/login", "", url.Values{"key": {"wrong"}}),
			visit(t, h, "POST", "/login", "", url.Values{"key": {""}}),
		} {
			if p.code != 401 || !strings.Contains(p.body, `action="/login"`) || strings.Contains(p.body, "worker-visible-only-signed-in") {
				t.Fatalf("without a credential: %d, want 401 and the sign-in form only: %s", p.code, p.body)
			}
		}
		if p := visit(t, h, "POST", "/login", "", url.Values{"key": {"s3cret-token"}}, "Origin", "https://evil.example"); p.code != 403 {
			t.Fatalf("a cross-site sign-in: %d, want 403", p.code)
		}
		p := visit(t, h, "POST", "https://racefree.example/login", "", url.Values{"key": {"s3cret-token"}})
		ck := p.header.Get("Set-Cookie")
		for _, want := range []string{"racefree_session=", "HttpOnly", "SameSite=Strict", "Secure", "Path=/"} {
			if !strings.Contains(ck, want) {
				t.Errorf("Set-Cookie %q lacks %s", ck, want)
			}
		}
		if strings.Contains(ck, "s3cret-token") || strings.Contains(p.header.Get("Location"), "s3cret") {
			t.Fatalf("the key is in the cookie or the URL: %q %q", ck, p.header.Get("Location"))
		}
		session := signIn(t, h, "s3cret-token")
		if ck := visit(t, h, "POST", "/login", "", url.Values{"key": {"s3cret-token"}}).header.Get("Set-Cookie"); strings.Contains(ck, "Secure") {
			t.Errorf("Set-Cookie %q is Secure over plain HTTP: the browser would never send it back", ck)
		}
		p = visit(t, h, "GET", "/", session, nil)
		if p.code != 200 || !strings.Contains(p.body, "worker-visible-only-signed-in") {
			t.Fatalf("signed in: %d %s", p.code, p.body)
		}
		for _, hd := range []string{"Content-Security-Policy", "Cache-Control"} {
			if p.header.Get(hd) == "" {
				t.Errorf("the page lacks %s", hd)
			}
		}
		// Signing out ends the session's cookie.
		p = visit(t, h, "POST", "/logout", session, url.Values{"csrf": {csrfOf(t, p)}})
		if p.code != 303 || !strings.Contains(p.header.Get("Set-Cookie"), "Max-Age=0") {
			t.Fatalf("sign out: %d %v", p.code, p.header)
		}
	})
}

// TestDashboardShowsOnlyTheKeysTenant: signed in with a key of tenant A,
// the page shows A's claims, dead letters and request rates, never B's,
// though both hold the same claim key; a key without the read scope sees
// nothing. A holder or key with HTML in it is shown as text, never as
// markup.
func TestDashboardShowsOnlyTheKeysTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{RequireKey: true})
		h := s.Handler()
		keyA, keyB := newKey(t, db, "acme", apikey.Read), newKey(t, db, "globex", apikey.AllScopes)
		acquire(t, db, "acme", "report", "holder-of-acme")
		acquire(t, db, "acme", `k"><b>key</b>`, `<script>alert("holder")</script>`)
		acquire(t, db, "globex", "report", "holder-of-globex")
		o, _ := s.Outbox()
		ctxB, _ := tenant.With(context.Background(), "globex")
		killOne(t, o, ctxB, "topic-of-globex")

		for range 3 { // globex's API requests, for its chart of the last hour
			if code, _, _ := do(t, h, "GET", "/v1/claims/report", "", bearerOf(keyB)...); code != 200 {
				t.Fatalf("globex reads its claim: %d", code)
			}
		}

		p := visit(t, h, "GET", "/", signIn(t, h, keyA), nil)
		if p.code != 200 || !strings.Contains(p.body, "holder-of-acme") || !strings.Contains(p.body, `<strong id="tenant">acme</strong>`) {
			t.Fatalf("acme's page: %d %s", p.code, p.body)
		}
		if !strings.Contains(p.body, "requests: <strong>0</strong>") {
			t.Fatalf("acme's chart counts another tenant's requests: %s", p.body)
		}
		// What the page shows is text, never markup.
		if strings.Contains(p.body, "<script>") || strings.Contains(p.body, "<b>key</b>") ||
			!strings.Contains(p.body, "&lt;script&gt;alert(&#34;holder&#34;)&lt;/script&gt;") {
			t.Fatalf("a hostile holder or key is not escaped: %s", p.body)
		}
		for _, other := range []string{"holder-of-globex", "topic-of-globex", "globex"} {
			if strings.Contains(p.body, other) {
				t.Fatalf("acme's page shows %q of another tenant", other)
			}
		}
		p = visit(t, h, "GET", "/", signIn(t, h, keyB), nil)
		if !strings.Contains(p.body, "holder-of-globex") || !strings.Contains(p.body, "topic-of-globex") || strings.Contains(p.body, "holder-of-acme") ||
			!strings.Contains(p.body, "requests: <strong>3</strong>") {
			t.Fatalf("globex's page: %s", p.body)
		}
		if p := visit(t, h, "GET", "/", signIn(t, h, newKey(t, db, "acme", apikey.Write)), nil); p.code != 403 || strings.Contains(p.body, "holder-of-acme") {
			t.Fatalf("a key without the read scope: %d %s", p.code, p.body)
		}
	})
}

// showsEverySection fills every section of the default tenant's page
// (a quota, an audit chain with a checkpoint, a failed webhook, a request
// in progress) and checks the page shows each.
func showsEverySection(t *testing.T, db *racefree.DB, h http.Handler) {
	t.Helper()
	auth := []string{"Authorization", "Bearer s3cret-token"}
	for _, c := range []struct{ path, body string }{
		{"/v1/quotas/user-42/consume", `{"n":3,"policy":{"kind":"sliding_window","rate":10,"per_ms":60000}}`},
		{"/v1/audit", `{"scope":"billing","actor":"ops","action":"refund","subject":"order-1"}`},
		{"/v1/audit/checkpoints", `{"scope":"billing"}`},
	} {
		if code, body, _ := do(t, h, "POST", c.path, c.body, auth...); code != 200 {
			t.Fatalf("POST %s: %d %v", c.path, code, body)
		}
	}
	in, err := inbox.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Receive(context.Background(), "stripe", "evt_refused", []byte(`{}`), func(*sql.Tx) error {
		return inbox.Permanent(errors.New("unknown event type"))
	}); err != nil {
		t.Fatal(err)
	}
	var p page
	_, err = idempotency.New(db, nil).Do(context.Background(), "checkout", "key-in-flight", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
		p = visit(t, h, "GET", "/", "", nil, auth...) // while the request is in progress
		return []byte("{}"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"<td>sliding_window</td><td class=\"num\">3</td>",                                       // the quota's units this window
		"<tr><td><em>default</em> (<code>/v1/quotas</code>)</td><th scope=\"row\">user-42</th>", // charged over HTTP: the default limiter, named
		"<th scope=\"row\">billing</th><td><span class=\"ok\">intact</span>, anchored</td><td class=\"num\">1</td><td>#1 at entry 1,",
		"<th scope=\"row\">evt_refused</th>", "unknown event type",
		"<th scope=\"row\">key-in-flight</th>",
	} {
		if !strings.Contains(p.body, want) {
			t.Fatalf("the page lacks %s: %s", want, p.body)
		}
	}
}

// TestDashboardRedrive: the page shows every section's data; the redrive
// button makes a dead letter due again (back in the backlog), but only
// with the page's CSRF token, from this origin, and with the admin scope;
// anything else is 403 and changes nothing.
func TestDashboardRedrive(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{Token: "s3cret-token", AuditKeys: auditRing(t, true)})
		h := s.Handler()
		o, _ := s.Outbox()
		id := killOne(t, o, context.Background(), "mail")
		showsEverySection(t, db, h)
		target := "/outbox/dead/" + fmtID(id) + "/redrive"
		session := signIn(t, h, "s3cret-token")
		p := visit(t, h, "GET", "/", session, nil)
		token := csrfOf(t, p)
		if !strings.Contains(p.body, `action="`+target+`"`) || !strings.Contains(p.body, `<dd id="outbox-dead">1</dd>`) {
			t.Fatalf("no redrive button for message %d: %s", id, p.body)
		}
		other := signIn(t, h, "s3cret-token") // another session: another token
		readOnly := signIn(t, h, newKey(t, db, tenant.Default, apikey.Read|apikey.Write))
		for _, c := range []struct {
			name, session string
			form          url.Values
			header        []string
			want          int
		}{
			{"no token", session, url.Values{}, nil, 403},
			{"a wrong token", session, url.Values{"csrf": {"x" + token}}, nil, 403},
			{"another session's token", other, url.Values{"csrf": {token}}, nil, 403},
			{"another origin", session, url.Values{"csrf": {token}}, []string{"Origin", "https://evil.example"}, 403},
			{"an opaque origin", session, url.Values{"csrf": {token}}, []string{"Origin", "null"}, 403},
			{"no session", "", url.Values{"csrf": {token}}, nil, 401},
			{"no admin scope", readOnly, url.Values{"csrf": {csrfOf(t, visit(t, h, "GET", "/", readOnly, nil))}}, nil, 403},
		} {
			if p := visit(t, h, "POST", target, c.session, c.form, c.header...); p.code != c.want {
				t.Fatalf("%s: %d, want %d", c.name, p.code, c.want)
			}
			if st := outboxStats(t, h); st["dead"] != float64(1) {
				t.Fatalf("%s changed the outbox: %v", c.name, st)
			}
		}
		p = visit(t, h, "POST", target, session, url.Values{"csrf": {token}})
		if p.code != 303 || p.header.Get("Location") != "/?redriven="+fmtID(id)+"#outbox" {
			t.Fatalf("redrive: %d %v %s", p.code, p.header, p.body)
		}
		if st := outboxStats(t, h); st["dead"] != float64(0) || st["backlog"] != float64(1) {
			t.Fatalf("after the redrive: %v, want no dead letter and one message in the backlog", st)
		}
		p = visit(t, h, "GET", "/?redriven="+fmtID(id), session, nil)
		if !strings.Contains(p.body, "Message "+fmtID(id)+" is back in the outbox backlog") || !strings.Contains(p.body, `<dd id="outbox-backlog">1</dd>`) {
			t.Fatalf("the page after the redrive: %s", p.body)
		}
		if p := visit(t, h, "POST", target, session, url.Values{"csrf": {token}}); p.code != 404 {
			t.Fatalf("a second redrive: %d, want 404", p.code)
		}
	})
}

func outboxStats(t *testing.T, h http.Handler) map[string]any {
	t.Helper()
	code, st, _ := do(t, h, "GET", "/v1/outbox/stats", "", "Authorization", "Bearer s3cret-token")
	if code != 200 {
		t.Fatalf("stats: %d %v", code, st)
	}
	return st
}

func fmtID(id int64) string { return strconv.FormatInt(id, 10) }
