package server_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// killWith enqueues a message of tenant ctx with payload and headers,
// fails it once for a retry and once for good, and returns its id.
func killWith(t *testing.T, o *outbox.Outbox, ctx context.Context, topic string, payload []byte, headers map[string]string) int64 {
	t.Helper()
	id, err := o.Enqueue(ctx, o.DB(), outbox.Message{Topic: topic, Key: "k", Payload: payload, Headers: headers})
	if err != nil {
		t.Fatal(err)
	}
	for i, cause := range []error{errors.New("receiver answered 503"), outbox.Permanent(errors.New("receiver answered 410 <gone>"))} {
		ds, err := o.Claim(ctx, "worker-"+string(rune('a'+i)), 1, time.Minute, topic)
		for err == nil && len(ds) == 0 { // the retry's back-off: redrive-free, claim again once it is due
			if _, err = o.Redrive(ctx, o.DB(), outbox.Filter{IDs: []int64{id}}); err != nil {
				break
			}
			ds, err = o.Claim(ctx, "worker-"+string(rune('a'+i)), 1, time.Minute, topic)
		}
		if err != nil || len(ds) != 1 || ds[0].ID != id {
			t.Fatalf("claim: %v, %v", ds, err)
		}
		if _, err := o.Fail(ctx, ds[0], cause); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// deadCount is tenant ctx's dead-letter depth.
func deadCount(t *testing.T, o *outbox.Outbox, ctx context.Context) int64 {
	t.Helper()
	st, err := o.Stats(ctx, o.DB())
	if err != nil {
		t.Fatal(err)
	}
	return st.Dead
}

// TestDashboardDeadLetter: a dead letter's page shows its payload (as
// text), headers and each recorded attempt with its error, with Redrive
// and Discard for an admin; another tenant's dead letter, or a message
// that is not dead, is 404 and shows nothing of it; Discard deletes the
// message only with the page's CSRF token, from this origin, with the
// admin scope and of the caller's tenant; anything else changes nothing.
func TestDashboardDeadLetter(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{RequireKey: true})
		h := s.Handler()
		o, _ := s.Outbox()
		ctxA, _ := tenant.With(context.Background(), "acme")
		ctxB, _ := tenant.With(context.Background(), "globex")
		id := killWith(t, o, ctxA, "mail", []byte(`{"to":"<b>ann</b>"}`), map[string]string{"X-Trace": "trace-of-acme"})
		other := killWith(t, o, ctxB, "topic-of-globex", []byte(`secret-of-globex`), map[string]string{"X-Trace": "trace-of-globex"})
		live, err := o.Enqueue(ctxA, db, outbox.Message{Topic: "mail", Key: "live", Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		admin := signIn(t, h, newKey(t, db, "acme", apikey.AllScopes))
		reader := signIn(t, h, newKey(t, db, "acme", apikey.Read))

		page := "/outbox/dead/" + fmtID(id)
		p := visit(t, h, "GET", page, admin, nil)
		if p.code != 200 {
			t.Fatalf("the dead letter's page: %d %s", p.code, p.body)
		}
		for _, want := range []string{
			`<dd id="dead-topic">mail</dd>`, "&#34;to&#34;: &#34;&lt;b&gt;ann&lt;/b&gt;&#34;", // the payload, indented and escaped
			`<th scope="row">X-Trace</th><td>trace-of-acme</td>`,
			"<td>worker-a</td>", "<td>retry</td><td class=\"error\">receiver answered 503</td>",
			"<td>worker-b</td>", "<td>dead</td><td class=\"error\">permanent: receiver answered 410 &lt;gone&gt;</td>",
			`action="` + page + `/redrive"`, `action="` + page + `/discard"`,
		} {
			if !strings.Contains(p.body, want) {
				t.Fatalf("the dead letter's page lacks %s: %s", want, p.body)
			}
		}
		if p.header.Get("Content-Security-Policy") == "" || p.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("the dead letter's page lacks the dashboard's headers: %v", p.header)
		}
		if strings.Contains(p.body, "<b>ann</b>") {
			t.Fatalf("the payload is markup: %s", p.body)
		}
		if list := visit(t, h, "GET", "/", admin, nil); !strings.Contains(list.body, `href="`+page+`"`) || !strings.Contains(list.body, `action="`+page+`/discard"`) {
			t.Fatalf("the list links no detail or has no Discard: %s", list.body)
		}
		token := csrfOf(t, p)

		// Another tenant's dead letter, a live message, a message that never
		// was: 404, and nothing of them.
		for _, target := range []string{"/outbox/dead/" + fmtID(other), "/outbox/dead/" + fmtID(live), "/outbox/dead/999999"} {
			p := visit(t, h, "GET", target, admin, nil)
			if p.code != 404 || strings.Contains(p.body, "globex") {
				t.Fatalf("GET %s: %d, want 404 and nothing of it: %s", target, p.code, p.body)
			}
		}
		if p := visit(t, h, "GET", "/outbox/dead/x", admin, nil); p.code != 400 {
			t.Fatalf("a malformed id: %d, want 400", p.code)
		}
		if p := visit(t, h, "GET", page, "", nil); p.code != 401 || strings.Contains(p.body, "trace-of-acme") {
			t.Fatalf("without a session: %d %s", p.code, p.body)
		}
		rp := visit(t, h, "GET", page, reader, nil)
		if rp.code != 200 || strings.Contains(rp.body, "/discard") || strings.Contains(rp.body, "/redrive") {
			t.Fatalf("a read key sees the page without its buttons: %d %s", rp.code, rp.body)
		}

		for _, c := range []struct {
			name, target, session string
			form                  url.Values
			header                []string
			want                  int
		}{
			{"no token", page + "/discard", admin, url.Values{}, nil, 403},
			{"a wrong token", page + "/discard", admin, url.Values{"csrf": {"x" + token}}, nil, 403},
			{"another origin", page + "/discard", admin, url.Values{"csrf": {token}}, []string{"Origin", "https://evil.example"}, 403},
			{"no session", page + "/discard", "", url.Values{"csrf": {token}}, nil, 401},
			{"no admin scope", page + "/discard", reader, url.Values{"csrf": {csrfOf(t, rp)}}, nil, 403},
			{"another tenant's", "/outbox/dead/" + fmtID(other) + "/discard", admin, url.Values{"csrf": {token}}, nil, 404},
			{"a live message", "/outbox/dead/" + fmtID(live) + "/discard", admin, url.Values{"csrf": {token}}, nil, 404},
		} {
			if p := visit(t, h, "POST", c.target, c.session, c.form, c.header...); p.code != c.want {
				t.Fatalf("discard, %s: %d, want %d", c.name, p.code, c.want)
			}
			if a, b := deadCount(t, o, ctxA), deadCount(t, o, ctxB); a != 1 || b != 1 {
				t.Fatalf("discard, %s, changed the outbox: acme %d dead, globex %d", c.name, a, b)
			}
		}
		p = visit(t, h, "POST", page+"/discard", admin, url.Values{"csrf": {token}})
		if p.code != http.StatusSeeOther || p.header.Get("Location") != "/?discarded="+fmtID(id)+"#outbox" {
			t.Fatalf("discard: %d %v %s", p.code, p.header, p.body)
		}
		if a, b := deadCount(t, o, ctxA), deadCount(t, o, ctxB); a != 0 || b != 1 {
			t.Fatalf("after the discard: acme %d dead, globex %d; want 0 and 1", a, b)
		}
		if _, err := o.Get(ctxA, db, id); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("the discarded message is still stored: %v", err)
		}
		if p := visit(t, h, "GET", "/?discarded="+fmtID(id), admin, nil); !strings.Contains(p.body, "Message "+fmtID(id)+" is discarded") {
			t.Fatalf("the page after the discard: %s", p.body)
		}
		if p := visit(t, h, "GET", page, admin, nil); p.code != 404 {
			t.Fatalf("the discarded message's page: %d, want 404", p.code)
		}
		if p := visit(t, h, "POST", page+"/discard", admin, url.Values{"csrf": {token}}); p.code != 404 {
			t.Fatalf("a second discard: %d, want 404", p.code)
		}
	})
}

// TestDashboardOldestDue: the outbox's "Oldest due" is how long the
// message due the longest has waited since it became due: a message
// delayed on purpose reads 0 until its time comes, then counts from then,
// not from when it was enqueued.
func TestDashboardOldestDue(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		h := server.New(db, server.Options{}).Handler()
		oldestDue := func(when string) string {
			t.Helper()
			p := visit(t, h, "GET", "/", "", nil)
			m := regexp.MustCompile(`<dd id="outbox-oldest-due">([^<]*)</dd>`).FindStringSubmatch(p.body)
			if p.code != 200 || m == nil {
				t.Fatalf("%s: %d, no oldest due: %s", when, p.code, p.body)
			}
			return m[1]
		}
		if got := oldestDue("empty"); got != "0 ms" {
			t.Fatalf("an empty outbox: oldest due %q, want 0 ms", got)
		}
		if code, body, _ := do(t, h, "POST", "/v1/outbox", `{"topic":"later","payload":{},"delay_ms":60000}`, "Content-Type", "application/json"); code != 200 {
			t.Fatalf("enqueue: %d %v", code, body)
		}
		clock.Advance(30 * time.Second)
		if got := oldestDue("a delayed message, 30 s on"); got != "0 ms" {
			t.Fatalf("a message delayed a minute, 30 s on: oldest due %q, want 0 ms (it is not due)", got)
		}
		clock.Advance(45 * time.Second)
		if got := oldestDue("75 s on"); got != "15.0 s" {
			t.Fatalf("75 s after enqueueing a message delayed 60 s: oldest due %q, want 15.0 s", got)
		}
	})
}

// TestDashboardDeadLetterFilters: the dead letters are filtered by topic
// and key and paged by id, a page at a time, with a link to the next page
// that keeps the filter; a malformed filter is 400.
func TestDashboardDeadLetterFilters(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{})
		h := s.Handler()
		o, _ := s.Outbox()
		ctx := context.Background()
		var ids []int64
		for i := range 52 {
			topic := "alpha"
			if i == 51 {
				topic = "beta"
			}
			id, err := o.Enqueue(ctx, db, outbox.Message{Topic: topic, Key: "k" + fmtID(int64(i)), Payload: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		ds, err := o.Claim(ctx, "w", 100, time.Minute)
		if err != nil || len(ds) != 52 {
			t.Fatalf("claim: %d, %v", len(ds), err)
		}
		for _, d := range ds {
			if _, err := o.Fail(ctx, d, outbox.Permanent(errors.New("refused"))); err != nil {
				t.Fatal(err)
			}
		}
		rows := regexp.MustCompile(`<a href="/outbox/dead/(\d+)"`)
		shown := func(target string) (got []string, body string) {
			t.Helper()
			p := visit(t, h, "GET", target, "", nil)
			if p.code != 200 {
				t.Fatalf("GET %s: %d %s", target, p.code, p.body)
			}
			for _, m := range rows.FindAllStringSubmatch(p.body, -1) {
				got = append(got, m[1])
			}
			return got, p.body
		}
		first, body := shown("/")
		if len(first) != 50 || first[0] != fmtID(ids[0]) || first[49] != fmtID(ids[49]) {
			t.Fatalf("the first page: %v, want the first 50 ids", first)
		}
		next := `href="/?after=` + fmtID(ids[49]) + `#outbox"`
		if !strings.Contains(body, next) {
			t.Fatalf("the first page has no link to the next: %s", body)
		}
		if second, body := shown("/?after=" + fmtID(ids[49])); len(second) != 2 || second[0] != fmtID(ids[50]) || strings.Contains(body, `id="dead-next"`) {
			t.Fatalf("the second page: %v, want %d and %d, no next link", second, ids[50], ids[51])
		}
		if beta, _ := shown("/?topic=beta"); len(beta) != 1 || beta[0] != fmtID(ids[51]) {
			t.Fatalf("topic beta: %v, want %d", beta, ids[51])
		}
		if k7, _ := shown("/?topic=alpha&key=k7"); len(k7) != 1 || k7[0] != fmtID(ids[7]) {
			t.Fatalf("key k7: %v, want %d", k7, ids[7])
		}
		if none, body := shown("/?topic=" + url.QueryEscape(`<b>x</b>`)); len(none) != 0 || !strings.Contains(body, "No dead letter matches") ||
			!strings.Contains(body, `value="&lt;b&gt;x&lt;/b&gt;"`) {
			t.Fatalf("a topic no message has: %v %s", none, body)
		}
		for _, bad := range []string{"/?after=x", "/?after=-1", "/?topic=" + strings.Repeat("t", 1000)} {
			if p := visit(t, h, "GET", bad, "", nil); p.code != 400 {
				t.Fatalf("GET %s: %d, want 400", bad, p.code)
			}
		}
	})
}
