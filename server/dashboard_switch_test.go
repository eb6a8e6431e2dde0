package server_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// newSession returns the session cookie an answer sets ("" for none).
func newSession(p page) string {
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if c.Name == "racefree_session" {
			return c.Value
		}
	}
	return ""
}

// TestDashboardTenantSwitcher: a session holds the keys its person
// signed in with, one a tenant; the page shows the tenant of one of them
// and nothing of any other, the switcher (shown with two keys or more)
// chooses among them only, with the session's CSRF token and from this
// origin; a revoked key leaves the session and its tenant with it; a
// cookie sealed under another secret, holding both keys, opens nothing;
// a session holds at most 8 keys.
func TestDashboardTenantSwitcher(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{RequireKey: true}).Handler()
		ctx := context.Background()
		keyA, keyB := createKey(t, db, "acme", apikey.Read), createKey(t, db, "globex", apikey.Read)
		acquire(t, db, "acme", "report", "holder-of-acme")
		acquire(t, db, "globex", "report", "holder-of-globex")
		// shows checks session's page shows tenant want's data only, and
		// the switcher when more than one key is held.
		shows := func(session, want string, switcher bool) page {
			t.Helper()
			p := visit(t, h, "GET", "/", session, nil)
			other := map[string]string{"acme": "globex", "globex": "acme"}[want]
			if p.code != 200 || !strings.Contains(p.body, `<strong id="tenant">`+want+`</strong>`) || !strings.Contains(p.body, "holder-of-"+want) ||
				strings.Contains(p.body, "holder-of-"+other) {
				t.Fatalf("want %s's page only: %d %s", want, p.code, p.body)
			}
			if got := strings.Contains(p.body, `id="switcher"`); got != switcher {
				t.Fatalf("the switcher shown: %v, want %v: %s", got, switcher, p.body)
			}
			return p
		}
		one := signIn(t, h, keyA.Token)
		p := shows(one, "acme", false)

		// Adding a key takes the session's CSRF token, from this origin.
		for _, c := range []struct {
			name   string
			form   url.Values
			header []string
		}{
			{"no token", url.Values{"key": {keyB.Token}}, nil},
			{"another origin", url.Values{"key": {keyB.Token}, "csrf": {csrfOf(t, p)}}, []string{"Origin", "https://evil.example"}},
		} {
			if q := visit(t, h, "POST", "/login", one, c.form, c.header...); q.code != 403 || newSession(q) != "" {
				t.Fatalf("add a key, %s: %d %v, want 403 and no new session", c.name, q.code, q.header)
			}
		}
		if q := visit(t, h, "POST", "/login", one, url.Values{"key": {"rfk_not_a_key"}, "csrf": {csrfOf(t, p)}}); q.code != 401 || newSession(q) != "" {
			t.Fatalf("add a wrong key: %d %v, want 401 and the session as it was", q.code, q.header)
		}
		q := visit(t, h, "POST", "/login", one, url.Values{"key": {keyB.Token}, "csrf": {csrfOf(t, p)}})
		two := newSession(q)
		if q.code != 303 || two == "" {
			t.Fatalf("add globex's key: %d %v", q.code, q.header)
		}
		p = shows(two, "globex", true)
		if !strings.Contains(p.body, `<option value="acme">acme</option>`) || !strings.Contains(p.body, `<option value="globex" selected>globex</option>`) {
			t.Fatalf("the switcher lacks a held tenant: %s", p.body)
		}
		shows(one, "acme", false) // the first session is as it was

		// The switcher: only a held tenant, only with the token, only from here.
		token := csrfOf(t, p)
		for _, c := range []struct {
			name   string
			form   url.Values
			header []string
			want   int
		}{
			{"no token", url.Values{"tenant": {"acme"}}, nil, 403},
			{"another session's token", url.Values{"tenant": {"acme"}, "csrf": {csrfOf(t, shows(one, "acme", false))}}, nil, 403},
			{"another origin", url.Values{"tenant": {"acme"}, "csrf": {token}}, []string{"Origin", "https://evil.example"}, 403},
			{"a tenant not held", url.Values{"tenant": {"initech"}, "csrf": {token}}, nil, 404},
			{"no tenant", url.Values{"csrf": {token}}, nil, 404},
		} {
			if q := visit(t, h, "POST", "/switch", two, c.form, c.header...); q.code != c.want || newSession(q) != "" {
				t.Fatalf("switch, %s: %d %v, want %d and the session as it was", c.name, q.code, q.header, c.want)
			}
		}
		if q := visit(t, h, "POST", "/switch", "", url.Values{"tenant": {"acme"}, "csrf": {token}}); q.code != 401 {
			t.Fatalf("switch without a session: %d, want 401", q.code)
		}
		q = visit(t, h, "POST", "/switch", two, url.Values{"tenant": {"acme"}, "csrf": {token}})
		toA := newSession(q)
		if q.code != 303 || toA == "" {
			t.Fatalf("switch to acme: %d %v", q.code, q.header)
		}
		shows(toA, "acme", true)
		if p := visit(t, h, "GET", "/?tenant=globex", toA, nil); strings.Contains(p.body, "holder-of-globex") {
			t.Fatalf("a tenant in the URL chose the page: %s", p.body)
		}

		// A cookie sealed under another secret, holding both keys, opens nothing.
		forger := server.New(db, server.Options{RequireKey: true, DashboardSecret: []byte(strings.Repeat("f", 32))}).Handler()
		f1 := signIn(t, forger, keyA.Token)
		fp := visit(t, forger, "GET", "/", f1, nil)
		forged := newSession(visit(t, forger, "POST", "/login", f1, url.Values{"key": {keyB.Token}, "csrf": {csrfOf(t, fp)}}))
		if forged == "" {
			t.Fatal("no session from the other server")
		}
		for _, c := range []string{forged, toA + forged, toA[:len(toA)/2] + forged[len(forged)/2:]} {
			if p := visit(t, h, "GET", "/", c, nil); p.code != 401 || strings.Contains(p.body, "holder-of-") {
				t.Fatalf("a cookie this server did not seal: %d %s", p.code, p.body)
			}
		}

		// Revoke globex's key while the session shows globex: the page shows
		// acme's, says so, and the cookie holds acme's key only.
		toB := newSession(visit(t, h, "POST", "/switch", toA, url.Values{"tenant": {"globex"}, "csrf": {csrfOf(t, shows(toA, "acme", true))}}))
		shows(toB, "globex", true)
		store, err := apikey.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Revoke(ctx, "globex", keyB.ID); err != nil {
			t.Fatal(err)
		}
		revoked := time.Now()
		for {
			p = visit(t, h, "GET", "/", toB, nil)
			if !strings.Contains(p.body, "holder-of-globex") {
				break
			}
			if time.Since(revoked) > 10*time.Second {
				t.Fatalf("the revoked key's tenant still shows: %s", p.body)
			}
			time.Sleep(5 * time.Millisecond) // poll the state: the key cache lets a key live half a second
		}
		left := newSession(p)
		if p.code != 200 || left == "" || !strings.Contains(p.body, "was revoked or expired") {
			t.Fatalf("after the revocation: %d %v %s", p.code, p.header, p.body)
		}
		shows(toB, "acme", false)
		shows(left, "acme", false)
		if q := visit(t, h, "POST", "/switch", left, url.Values{"tenant": {"globex"}, "csrf": {csrfOf(t, p)}}); q.code != 404 {
			t.Fatalf("switch to the revoked key's tenant: %d, want 404", q.code)
		}

		// At most 8 keys: the ninth drops the first; a key of a tenant held
		// replaces that tenant's.
		s := signIn(t, h, keyA.Token)
		for i := range 8 {
			tn := "t" + string(rune('a'+i))
			s = newSession(visit(t, h, "POST", "/login", s, url.Values{"key": {newKey(t, db, tn, apikey.Read)}, "csrf": {csrfOf(t, visit(t, h, "GET", "/", s, nil))}}))
		}
		p = visit(t, h, "GET", "/", s, nil)
		if n := strings.Count(p.body, "<option "); n != 8 || strings.Contains(p.body, `<option value="acme"`) || !strings.Contains(p.body, `<option value="th" selected>`) {
			t.Fatalf("nine keys signed in: %d held, want the last 8: %s", n, p.body)
		}
		s = newSession(visit(t, h, "POST", "/login", s, url.Values{"key": {newKey(t, db, "tc", apikey.Read)}, "csrf": {csrfOf(t, p)}}))
		if p := visit(t, h, "GET", "/", s, nil); strings.Count(p.body, "<option ") != 8 || !strings.Contains(p.body, `<option value="tc" selected>`) {
			t.Fatalf("a second key of tenant tc: %s", p.body)
		}
	})
}
