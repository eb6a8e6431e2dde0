package browser

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// chromium returns the path of Debian's chromium, or skips the test when
// it is missing outside CI (CI=true fails it instead: .ci/run installs it).
func chromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err == nil {
		return path
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("chromium is not installed (.ci/run installs it with apt-get install chromium): %v", err)
	}
	t.Skip("chromium is not installed (apt-get install chromium); the browser test needs it")
	return ""
}

// artifacts returns the directory screenshots go to: $RACEFREE_ARTIFACTS,
// or the test's temporary directory.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("RACEFREE_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// killOne enqueues a message on topic and fails it permanently, as a
// receiver that refuses it would: a dead letter.
func killOne(t *testing.T, o *outbox.Outbox, topic string) int64 {
	t.Helper()
	ctx := context.Background()
	id, err := o.Enqueue(ctx, o.DB(), outbox.Message{Topic: topic, Key: "k", Payload: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := o.Claim(ctx, "browser-test", 1, time.Minute, topic)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim: %v, %v", ds, err)
	}
	if _, err := o.Fail(ctx, ds[0], outbox.Permanent(errors.New("422 from the receiver"))); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestDashboardInABrowser: headless Chromium signs in to the dashboard of
// a server with data, sees the claim's holder and a dead letter, presses
// Redrive, and sees the dead letter gone and the message back in the
// backlog; filters the dead letters by topic, opens another one (payload,
// attempts) and discards it.
// Screenshots of each view are kept (their paths are logged).
func TestDashboardInABrowser(t *testing.T) {
	path := chromium(t)
	dir := artifacts(t)
	alloc, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1400))
	defer cancel()
	browser, cancel := chromedp.NewContext(alloc)
	defer cancel()
	if err := chromedp.Do(browser); err != nil { // starts Chromium once for both engines
		t.Fatalf("start chromium: %v", err)
	}
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		const token = "browser-test-token"
		s := server.New(db, server.Options{Token: token})
		srv := httptest.NewServer(s.Handler())
		defer srv.Close()
		// Through the API: worker-7 wins the claim, worker-8 is refused
		// (409), for the claims table and the last hour's charts.
		for _, c := range []struct {
			holder string
			want   int
		}{{"worker-7", 200}, {"worker-8", 409}} {
			holder, want := c.holder, c.want
			if got := post(t, srv.URL+"/v1/claims/nightly-report", token, `{"holder":"`+holder+`","ttl_ms":3600000}`); got != want {
				t.Fatalf("acquire for %s: %d, want %d", holder, got, want)
			}
		}
		if got := post(t, srv.URL+"/v1/claims/weekly-report", token, `{"holder":"worker-9","ttl_ms":3600000}`); got != 200 {
			t.Fatalf("acquire for worker-9: %d", got)
		}
		o, _ := s.Outbox()
		id := strconv.FormatInt(killOne(t, o, "invoices"), 10)
		gone := strconv.FormatInt(killOne(t, o, "receipts"), 10)

		tab, cancel := chromedp.NewContext(browser)
		defer cancel()
		if err := chromedp.Do(tab); err != nil { // opens the tab without a deadline
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(tab, 90*time.Second)
		defer cancel()
		text := func(sel string) string {
			t.Helper()
			v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
			if err != nil {
				t.Fatalf("read %s: %v", sel, err)
			}
			return v
		}
		screenshot := func(name string) {
			t.Helper()
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			if err != nil {
				t.Fatalf("screenshot: %v", err)
			}
			shot(t, dir, db.Engine()+"-"+name, png)
		}
		for i, a := range []chromedp.Action[chromedp.Void]{
			chromedp.Navigate(srv.URL + "/"),
			chromedp.WaitVisible(chromedp.ID("key")),
			chromedp.SendKeys(chromedp.ID("key"), token),
			navigating(chromedp.Click(chromedp.CSS(`button[type="submit"]`))),
			chromedp.WaitVisible(chromedp.ID("tenant")),
		} {
			if err := chromedp.Do(ctx, a); err != nil {
				dbg, cancel := context.WithTimeout(tab, 5*time.Second)
				defer cancel()
				loc, _ := chromedp.Run(dbg, chromedp.Location())
				body, _ := chromedp.Run(dbg, chromedp.OuterHTML(chromedp.CSS("html")))
				t.Fatalf("sign in, step %d: %v at %s: %s", i, err, loc, body)
			}
		}
		screenshot("dashboard.png")
		if holders := text("#claims tbody"); !strings.Contains(holders, "worker-7") || !strings.Contains(holders, "nightly-report") {
			t.Fatalf("the claims table reads %q, want worker-7 holding nightly-report", holders)
		}
		// Filtered by holder, the claims show worker-7's only.
		err := chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.ID("claims-holder-filter"), "worker-7"),
			navigating(chromedp.Click(chromedp.CSS(`#claims-filter button`))),
			chromedp.WaitVisible(chromedp.CSS(`#claims-filter a`)),
		)
		if err != nil {
			t.Fatalf("filter the claims: %v", err)
		}
		screenshot("dashboard-claims-filtered.png")
		if holders := text("#claims tbody"); !strings.Contains(holders, "worker-7") || strings.Contains(holders, "worker-9") {
			t.Fatalf("claims filtered by holder worker-7: %q", holders)
		}
		if err := chromedp.Do(ctx, navigating(chromedp.Click(chromedp.CSS(`#claims-filter a`))), chromedp.WaitNotPresent(chromedp.CSS(`#claims-filter a`))); err != nil {
			t.Fatalf("clear the claims' filter: %v", err)
		}
		if dead, table := text("#outbox-dead"), text("#outbox tbody"); dead != "2" || !strings.Contains(table, "invoices") || !strings.Contains(table, "422 from the receiver") {
			t.Fatalf("dead letters: %q, table %q; want message %s on invoices", dead, table, id)
		}
		// Filtered by topic, the dead letters show the second one only.
		err = chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.ID("dead-topic-filter"), "receipts"),
			navigating(chromedp.Click(chromedp.CSS(`#dead-filter button`))),
			chromedp.WaitVisible(chromedp.CSS(`#dead-filter a`)), // Clear: the filter is on
		)
		if err != nil {
			t.Fatalf("filter the dead letters: %v", err)
		}
		screenshot("dashboard-filtered.png")
		if table := text("#outbox tbody"); !strings.Contains(table, "receipts") || strings.Contains(table, "invoices") {
			t.Fatalf("dead letters filtered by topic receipts: %q", table)
		}
		// The second dead letter's page: its payload, headers and attempts;
		// Discard deletes it.
		err = chromedp.Do(ctx,
			navigating(chromedp.Click(chromedp.CSS(`a[href="/outbox/dead/`+gone+`"]`))),
			chromedp.WaitVisible(chromedp.ID("dead-payload")),
		)
		if err != nil {
			t.Fatalf("open the dead letter: %v", err)
		}
		screenshot("dead-letter.png")
		if topic, payload, attempts := text("#dead-topic"), text("#dead-payload"), text("#attempts tbody"); topic != "receipts" ||
			!strings.Contains(payload, `"n": 1`) || !strings.Contains(attempts, "browser-test") || !strings.Contains(attempts, "422 from the receiver") {
			t.Fatalf("the dead letter's page: topic %q, payload %q, attempts %q", topic, payload, attempts)
		}
		err = chromedp.Do(ctx,
			navigating(chromedp.Click(chromedp.CSS(`form[action="/outbox/dead/`+gone+`/discard"] button`))),
			chromedp.WaitVisible(chromedp.CSS("p.ok")),
		)
		if err != nil {
			t.Fatalf("discard: %v", err)
		}
		screenshot("dashboard-after-discard.png")
		if dead, notice := text("#outbox-dead"), text("p.ok"); dead != "1" || !strings.Contains(notice, "Message "+gone+" is discarded") {
			t.Fatalf("after Discard: dead %q, notice %q; want 1 and the notice", dead, notice)
		}
		err = chromedp.Do(ctx,
			navigating(chromedp.Click(chromedp.CSS(`button[aria-label="Redrive message `+id+`"]`))),
			chromedp.WaitVisible(chromedp.CSS("p.ok")),
		)
		if err != nil {
			t.Fatalf("redrive: %v", err)
		}
		screenshot("dashboard-after-redrive.png")
		if dead, backlog, notice := text("#outbox-dead"), text("#outbox-backlog"), text("p.ok"); dead != "0" || backlog != "1" ||
			!strings.Contains(notice, "Message "+id+" is back in the outbox backlog") {
			t.Fatalf("after Redrive: dead %q, backlog %q, notice %q; want 0, 1 and the notice", dead, backlog, notice)
		}

		// Another tenant's key added to the session: the page shows that
		// tenant's, and the switcher goes back.
		ctx, cancel = context.WithTimeout(tab, 90*time.Second) // a deadline of its own, as the steps above had
		defer cancel()
		keys, err := apikey.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		globex, err := keys.Create(context.Background(), "globex", apikey.Read, "browser")
		if err != nil {
			t.Fatal(err)
		}
		if got := post(t, srv.URL+"/v1/claims/globex-report", globex.Token, `{"holder":"worker-of-globex","ttl_ms":3600000}`); got != 403 {
			t.Fatalf("a read key acquires: %d, want 403", got)
		}
		gctx, _ := tenant.With(context.Background(), "globex")
		if _, err := claim.New(db).Acquire(gctx, db, "globex-report", "worker-of-globex", time.Hour); err != nil {
			t.Fatal(err)
		}
		err = chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(`details.add-key summary`)),
			chromedp.SendKeys(chromedp.ID("add-key-input"), globex.Token),
			navigating(chromedp.Click(chromedp.CSS(`#add-key button`))),
			chromedp.WaitVisible(chromedp.ID("switcher")),
		)
		if err != nil {
			t.Fatalf("add globex's key: %v", err)
		}
		screenshot("dashboard-switcher.png")
		if tn, holders := text("#tenant"), text("#claims tbody"); tn != "globex" || !strings.Contains(holders, "worker-of-globex") || strings.Contains(holders, "worker-7") {
			t.Fatalf("globex's page: tenant %q, claims %q", tn, holders)
		}
		err = chromedp.Do(ctx,
			chromedp.SetValue(chromedp.ID("switch-tenant"), tenant.Default),
			navigating(chromedp.Click(chromedp.CSS(`#switcher button`))),
			chromedp.WaitVisible(chromedp.CSS(`#claims tbody`)),
		)
		if err != nil {
			t.Fatalf("switch back: %v", err)
		}
		screenshot("dashboard-switched-back.png")
		if tn, holders := text("#tenant"), text("#claims tbody"); tn != tenant.Default || !strings.Contains(holders, "worker-7") || strings.Contains(holders, "worker-of-globex") {
			t.Fatalf("after switching back: tenant %q, claims %q", tn, holders)
		}
	})
}

// navigating runs click, which loads a new page (a link, a form's button),
// and returns once that page has replaced the one it was clicked on. A
// wait for an element both pages have (a notice, a table) would otherwise
// be met by the old page, and the reads after it would race the
// navigation: the old page's values, or a read that never returns.
func navigating(click chromedp.Action[chromedp.Void]) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[any](`document.documentElement.dataset.before = "1"`)(ctx, t)
			return err
		}),
		click,
		chromedp.WaitNotPresent(chromedp.CSS("html[data-before]")),
	)
}

// post POSTs body to url with the bearer token and returns the status.
func post(t *testing.T, url, token, body string) int {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// shot writes a screenshot to dir/name and logs its path.
func shot(t *testing.T, dir, name string, png []byte) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}
