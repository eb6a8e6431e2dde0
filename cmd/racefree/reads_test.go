package main

import (
	"context"
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/server"
)

// TestReadCommandsOnBothEngines drives the commands that read what the
// library's Get and Current read: events get (over HTTP), seq current and
// outbox get (in the database and over HTTP). Each prints one JSON object
// with the members of its API answer (--format json) or text; a
// fingerprint or message that does not exist exits 6 naming it, bad input
// exits 2; reading a counter creates nothing.
func TestReadCommandsOnBothEngines(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db := testdb.Open(t, dsn, nil)
		s := server.New(db, server.Options{})
		srv := httptest.NewServer(s.Handler())
		defer srv.Close()

		// events get
		fp := "card-declined"
		if _, err := dedup.New(db).Observe(ctx, db, dedup.Event{Source: "billing", Level: "error", Message: "declined", Fingerprint: fp}, time.Minute); err != nil {
			t.Fatal(err)
		}
		r := runCLI(t, "events", "get", fp, "--server", srv.URL, "--format", "json")
		if m := jsonOf(t, r, "GET /v1/events/{fingerprint}"); r.code != 0 || m["source"] != "billing" || m["message"] != "declined" || m["result_fence"] != 0.0 {
			t.Fatalf("events get before a result: %+v", r)
		}
		if err := dedup.New(db).Record(ctx, db, fp, 1, dedup.Result{Classification: "card", ExternalID: "T-1"}); err != nil {
			t.Fatal(err)
		}
		r = runCLI(t, "events", "get", fp, "--server", srv.URL)
		if textOf(t, r, fp+": billing error \"declined\"; result at fence 1: classification \"card\", external id \"T-1\""); r.code != 0 {
			t.Fatalf("events get, text: %+v", r)
		}

		// seq current
		if r := runCLI(t, "seq", "next", "inv", "2026", "--n", "3", "--db", dsn); r.code != 0 {
			t.Fatalf("seq next: %+v", r)
		}
		for _, where := range [][]string{{"--db", dsn}, {"--server", srv.URL}} {
			r := runCLI(t, append([]string{"seq", "current", "inv", "2026", "--format", "json"}, where...)...)
			if m := jsonOf(t, r, "GET /v1/sequences/{scope}/{name}"); r.code != 0 || m["current"] != 3.0 || m["scope"] != "inv" || m["name"] != "2026" {
				t.Errorf("seq current %v: %+v; want 3", where, r)
			}
			r = runCLI(t, append([]string{"seq", "current", "inv", "2027"}, where...)...)
			if textOf(t, r, "inv/2027: 0\n"); r.code != 0 {
				t.Errorf("seq current of a counter that handed nothing out %v: %+v; want 0", where, r)
			}
		}
		if r := runCLI(t, "seq", "next", "inv", "2027", "--db", dsn); r.code != 0 || r.stdout != "inv/2027: 1\n" {
			t.Errorf("seq next after reading a new counter: %+v; want 1: reading created nothing", r)
		}
		if r := runCLI(t, "seq", "current", "inv", "2026", "--server", srv.URL, "--tenant", "acme"); r.code != exitUsage || !strings.Contains(r.stderr, "--tenant") {
			t.Errorf("seq current --server with --tenant: %+v; want exit 2", r)
		}

		// outbox get
		o, err := outbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		id, err := o.Enqueue(ctx, db, outbox.Message{Topic: "mail", Key: "u1", Payload: []byte(`{"to":"a"}`), MaxAttempts: 5})
		if err != nil {
			t.Fatal(err)
		}
		ds, err := o.Claim(ctx, "relay-1", 1, time.Minute)
		if err != nil || len(ds) != 1 {
			t.Fatalf("claim: %v, %v", ds, err)
		}
		if _, err := o.Fail(ctx, ds[0], errors.New("smtp 451")); err != nil {
			t.Fatal(err)
		}
		ids := strconv.FormatInt(id, 10)
		for _, where := range [][]string{{"--db", dsn}, {"--server", srv.URL}} {
			r := runCLI(t, append([]string{"outbox", "get", ids, "--format", "json"}, where...)...)
			m := jsonOf(t, r, "GET /v1/outbox/messages/{id}")
			hist, _ := m["history"].([]any)
			if r.code != 0 || m["state"] != "ready" || m["attempts"] != 1.0 || m["max_attempts"] != 5.0 || m["last_error"] != "smtp 451" || len(hist) != 1 ||
				hist[0].(map[string]any)["worker"] != "relay-1" || hist[0].(map[string]any)["outcome"] != "retry" {
				t.Errorf("outbox get %v: %+v; want ready after one failed attempt by relay-1", where, r)
			}
			r = runCLI(t, append([]string{"outbox", "get", ids}, where...)...)
			if r.code != 0 || !strings.Contains(r.stdout, "state") || !strings.Contains(r.stdout, "ready") || !strings.Contains(r.stdout, "due at") || !strings.Contains(r.stdout, "relay-1") || !strings.Contains(r.stdout, "smtp 451") {
				t.Errorf("outbox get %v, text: %+v", where, r)
			}
			r = runCLI(t, append([]string{"outbox", "get", "999999"}, where...)...)
			if r.code != exitNotFound || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "no outbox message 999999") || strings.Contains(r.stderr, "sql:") {
				t.Errorf("outbox get of no message %v: %+v; want exit 6, one line naming it", where, r)
			}
			r = runCLI(t, append([]string{"outbox", "get", "x"}, where...)...)
			if r.code != exitUsage || r.stdout != "" {
				t.Errorf("outbox get x %v: %+v; want exit 2", where, r)
			}
		}
		if r := runCLI(t, "outbox", "get", ids, "--db", dsn, "--tenant", "acme"); r.code != exitNotFound {
			t.Errorf("outbox get of the default tenant's message as acme: %+v; want exit 6", r)
		}
		if r := runCLI(t, "events", "get", "never-seen", "--server", srv.URL); r.code != exitNotFound || !strings.Contains(r.stderr, `no event with fingerprint "never-seen"`) {
			t.Errorf("events get of a fingerprint never observed: %+v; want exit 6 naming it", r)
		}
	})
}
