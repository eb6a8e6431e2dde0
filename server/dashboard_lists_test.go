package server_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// listRows returns the row keys (the row headers) of the dashboard's list
// name on the page body, and the address of its next page ("" for none).
func listRows(t *testing.T, body, name string) (rows []string, next string) {
	t.Helper()
	if i := strings.Index(body, `<table id="`+name+`-table">`); i >= 0 {
		table := body[i:]
		table = table[:strings.Index(table, "</table>")]
		for _, m := range regexp.MustCompile(`<th scope="row"[^>]*>(?:<a [^>]*>)?([^<]*)<`).FindAllStringSubmatch(table, -1) {
			rows = append(rows, html.UnescapeString(m[1]))
		}
	}
	if m := regexp.MustCompile(`<a id="` + name + `-next" href="([^"]*)"`).FindStringSubmatch(body); m != nil {
		next = html.UnescapeString(m[1])
	}
	return rows, next
}

// listPage GETs target with session and returns the list's rows and next page.
func listPage(t *testing.T, h http.Handler, session, target, name string) ([]string, string) {
	t.Helper()
	target, _, _ = strings.Cut(target, "#") // a browser keeps the fragment to itself
	p := visit(t, h, "GET", target, session, nil)
	if p.code != 200 {
		t.Fatalf("GET %s: %d %s", target, p.code, p.body)
	}
	return listRows(t, p.body, name)
}

// dashListCase is one list of the dashboard: how to add a row keyed key
// to tenant ctx's list, its page size and its key filter's parameter.
type dashListCase struct {
	name    string
	limit   int
	filter  string // the parameter that filters by the row key's beginning
	add     func(t *testing.T, ctx context.Context, key string)
	another func(t *testing.T, ctx context.Context) (param, value, key string) // a row another filter field isolates
}

// TestDashboardListPages: each list of the dashboard pages by its sort
// key: exactly a page of rows shows on one page, no next link; one row
// more and the page links the next, which shows that row, so every row
// shows once, none twice, though all share their time (a manual clock:
// the key breaks the tie); the filter isolates one key of a tenant's two,
// and of two tenants with the same key shows the caller's only; each
// other filter field isolates its row too.
func TestDashboardListPages(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		s := server.New(db, server.Options{RequireKey: true, AuditKeys: auditRing(t, true)})
		h := s.Handler()
		keyA, keyB := newKey(t, db, "acme", apikey.AllScopes), newKey(t, db, "globex", apikey.AllScopes)
		bearer := map[string]string{"acme": keyA, "globex": keyB}
		in, err := inbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		policy := quota.Policy{Kind: quota.FixedWindow, Rate: 100, Per: time.Hour}
		receive := func(t *testing.T, ctx context.Context, source, event string, fail bool) {
			t.Helper()
			if _, err := in.Receive(ctx, source, event, []byte(`{}`), func(*sql.Tx) error {
				if fail {
					return inbox.Permanent(errors.New("refused"))
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		cases := []dashListCase{
			{name: "claims", limit: 50, filter: "claims.key",
				add: func(t *testing.T, ctx context.Context, key string) {
					if _, err := claim.New(db).Acquire(ctx, db, key, "h-"+key, time.Hour); err != nil {
						t.Fatal(err)
					}
				},
				another: func(t *testing.T, ctx context.Context) (string, string, string) {
					if _, err := claim.New(db).Acquire(ctx, db, "by-holder", "the-only-holder", time.Hour); err != nil {
						t.Fatal(err)
					}
					return "claims.holder", "the-only", "by-holder"
				}},
			{name: "quotas", limit: 50, filter: "quotas.key",
				add: func(t *testing.T, ctx context.Context, key string) {
					l, err := quota.New(db, nil)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := l.Consume(ctx, db, key, 1, policy); err != nil {
						t.Fatal(err)
					}
				},
				another: func(t *testing.T, ctx context.Context) (string, string, string) {
					l, err := quota.New(db, &quota.Options{Scope: "uploads"})
					if err != nil {
						t.Fatal(err)
					}
					if _, err := l.Consume(ctx, db, "r000", 1, policy); err != nil { // the key of another limiter's counter too
						t.Fatal(err)
					}
					return "quotas.limiter", "uploads", "r000"
				}},
			{name: "sources", limit: 50, filter: "sources.source",
				add: func(t *testing.T, ctx context.Context, key string) { receive(t, ctx, key, "evt-1", false) }},
			{name: "failed", limit: 50, filter: "failed.event",
				add: func(t *testing.T, ctx context.Context, key string) { receive(t, ctx, "src", key, true) },
				another: func(t *testing.T, ctx context.Context) (string, string, string) {
					receive(t, ctx, "other-src", "r000", true) // the event id of another source's failure too
					return "failed.source", "other-src", "r000"
				}},
			{name: "audit", limit: 20, filter: "audit.scope",
				add: func(t *testing.T, ctx context.Context, key string) {
					if code, body, _ := do(t, h, "POST", "/v1/audit", `{"scope":"`+key+`","actor":"ops","action":"a","subject":"s"}`, bearerOf(bearer[tenant.From(ctx)])...); code != 200 {
						t.Fatalf("append to %s: %d %v", key, code, body)
					}
				}},
		}
		sessA, sessB := signIn(t, h, keyA), signIn(t, h, keyB)
		ctxA, _ := tenant.With(context.Background(), "acme")
		ctxB, _ := tenant.With(context.Background(), "globex")
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				var keys []string
				for i := range c.limit {
					keys = append(keys, fmt.Sprintf("r%03d", i))
					c.add(t, ctxA, keys[i])
				}
				checkPages(t, h, sessA, "/", c.name, c.limit, keys)
				keys = append(keys, fmt.Sprintf("r%03d", c.limit))
				c.add(t, ctxA, keys[c.limit])
				checkPages(t, h, sessA, "/", c.name, c.limit, keys)

				// The same key in another tenant; another key in this one.
				c.add(t, ctxB, "r000")
				c.add(t, ctxA, "x-other")
				for _, f := range []struct {
					session, value string
					want           []string
				}{{sessA, "r000", []string{"r000"}}, {sessA, "x", []string{"x-other"}}, {sessB, "r", []string{"r000"}}, {sessB, "x", nil}} {
					if got, next := listPage(t, h, f.session, "/?"+url.Values{c.filter: {f.value}}.Encode(), c.name); !slices.Equal(got, f.want) || next != "" {
						t.Fatalf("%s=%s: %v (next %q), want %v", c.filter, f.value, got, next, f.want)
					}
				}
				// A filter that keeps a page and one more keeps itself in the next link.
				got, next := listPage(t, h, sessA, "/?"+url.Values{c.filter: {"r"}}.Encode(), c.name)
				if len(got) != c.limit || !strings.Contains(next, url.Values{c.filter: {"r"}}.Encode()) {
					t.Fatalf("filtered by r: %d rows, next %q", len(got), next)
				}
				checkPages(t, h, sessA, "/?"+url.Values{c.filter: {"r"}}.Encode(), c.name, c.limit, keys)
				if c.another != nil {
					param, value, want := c.another(t, ctxA)
					if got, _ := listPage(t, h, sessA, "/?"+url.Values{param: {value}}.Encode(), c.name); !slices.Equal(got, []string{want}) {
						t.Fatalf("%s=%s: %v, want [%s]", param, value, got, want)
					}
				}
				if c.name == "quotas" {
					// The default limiter (quotas charged over HTTP, and
					// limiters without a scope) is selected by its checkbox,
					// alone or with a key: r000 is counted by the default
					// limiter and by "uploads"; without a limiter both show.
					for _, f := range []struct {
						query url.Values
						want  []string
					}{
						{url.Values{"quotas.key": {"r000"}}, []string{"r000", "r000"}},
						{url.Values{"quotas.key": {"r000"}, "quotas.default": {"on"}}, []string{"r000"}},
						{url.Values{"quotas.key": {"x"}, "quotas.default": {"on"}}, []string{"x-other"}},
						{url.Values{"quotas.limiter": {"uploads"}, "quotas.key": {"x"}}, nil},
					} {
						if got, next := listPage(t, h, sessA, "/?"+f.query.Encode(), c.name); !slices.Equal(got, f.want) || next != "" {
							t.Fatalf("%s: %v (next %q), want %v", f.query.Encode(), got, next, f.want)
						}
					}
					// Every default counter, a page and more: the checkbox stays in the next link.
					checkPages(t, h, sessA, "/?quotas.default=on", c.name, c.limit, append(slices.Clone(keys), "x-other"))
					p := visit(t, h, "GET", "/?quotas.default=on", sessA, nil)
					if !strings.Contains(p.body, `name="quotas.default" value="on" checked>`) {
						t.Fatalf("the default limiter's checkbox is not checked on its own page: %s", p.body)
					}
				}
			})
		}
		// A filter or sort key of a wrong kind: 400, a page that says so.
		for _, bad := range []string{"/?claims.after=x&claims.after=k", "/?claims.after=1", "/?quotas.after=-1&quotas.after=&quotas.after=k&quotas.after=fixed_window",
			"/?idem.key=" + strings.Repeat("k", 300), "/?failed.after=1.5", "/?sources.after=" + url.QueryEscape("a\x00b"), "/?audit.scope=%ff", "/?after=x",
			"/?quotas.default=yes", "/?quotas.default=on&quotas.limiter=uploads"} {
			if p := visit(t, h, "GET", bad, sessA, nil); p.code != 400 || !strings.Contains(p.body, "not valid") {
				t.Fatalf("GET %s: %d, want 400 and a page that says why: %s", bad, p.code, p.body)
			}
		}
	})
}

// checkPages pages through list name of session's page from target and checks it
// shows want (in any order), each row once, limit a page.
func checkPages(t *testing.T, h http.Handler, session, target, name string, limit int, want []string) {
	t.Helper()
	var seen []string
	for pages := 0; target != ""; pages++ {
		got, next := listPage(t, h, session, target, name)
		if len(got) > limit || (next != "" && len(got) != limit) || pages > len(want)/limit {
			t.Fatalf("%s, page %d: %d rows, next %q", name, pages+1, len(got), next)
		}
		seen = append(seen, got...)
		target = next
	}
	slices.Sort(seen)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(seen, want) {
		t.Fatalf("%s: paging showed %v, want each of %v once", name, seen, want)
	}
}

// TestDashboardIdempotencyPages: the requests in progress page like the
// other lists: a page of rows has no next link, one more links it, each
// request shows once; the filters isolate one scope's and one key's.
func TestDashboardIdempotencyPages(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{RequireKey: true}).Handler()
		sessA, sessB := signIn(t, h, newKey(t, db, "acme", apikey.Read)), signIn(t, h, newKey(t, db, "globex", apikey.Read))
		ctxA, _ := tenant.With(context.Background(), "acme")
		ctxB, _ := tenant.With(context.Background(), "globex")
		store := idempotency.New(db, nil)
		var keys []string
		for i := range 51 {
			keys = append(keys, fmt.Sprintf("r%03d", i))
		}
		// Each request runs inside the one before, so that all are in progress at once.
		var nest func(i int) error
		nest = func(i int) error {
			ctx, scope, key := ctxA, "checkout", ""
			switch {
			case i < len(keys):
				key = keys[i]
			case i == len(keys):
				ctx, key = ctxB, "r000" // the same key in another tenant
			case i == len(keys)+1:
				scope, key = "refund", "r000" // the same key in another scope
			default:
				checkPages(t, h, sessA, "/", "idem", 50, append(slices.Clone(keys), "r000")) // r000 twice: checkout and refund
				for _, f := range []struct {
					session, query string
					want           []string
				}{{sessA, "idem.key=r000&idem.scope=checkout", []string{"r000"}}, {sessA, "idem.scope=refund", []string{"r000"}},
					{sessA, "idem.key=r05", []string{"r050"}}, {sessB, "", []string{"r000"}}} {
					if got, next := listPage(t, h, f.session, "/?"+f.query, "idem"); !slices.Equal(got, f.want) || next != "" {
						t.Fatalf("%s: %v (next %q), want %v", f.query, got, next, f.want)
					}
				}
				return nil
			}
			_, err := store.Do(ctx, scope, key, "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
				if i == 49 { // exactly a page in progress: no next link
					if got, next := listPage(t, h, sessA, "/", "idem"); len(got) != 50 || next != "" {
						t.Fatalf("50 in progress: %d rows, next %q", len(got), next)
					}
				}
				return []byte("{}"), nest(i + 1)
			})
			return err
		}
		if err := nest(0); err != nil {
			t.Fatal(err)
		}
	})
}
