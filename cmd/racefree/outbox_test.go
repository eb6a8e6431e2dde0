package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
)

func TestOutboxDeadLettersAndStats(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db := testdb.Open(t, dsn, nil)
		o, err := outbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		acme, _ := tenant.With(ctx, "acme")
		kill := func(ctx context.Context, topic string) int64 {
			t.Helper()
			payload := []byte("p") // not JSON: payload_base64, as over HTTP
			if topic == "sms" {
				payload = []byte(`{"n":1}`) // JSON: the payload's value, as over HTTP
			}
			id, err := o.Enqueue(ctx, db, outbox.Message{Topic: topic, Key: "k", Payload: payload})
			if err != nil {
				t.Fatal(err)
			}
			ds, err := o.Claim(ctx, "w", 1, time.Minute)
			if err != nil || len(ds) != 1 {
				t.Fatalf("claim: %v, %v", ds, err)
			}
			if _, err := o.Fail(ctx, ds[0], outbox.Permanent(errors.New("rejected\nby the receiver"))); err != nil {
				t.Fatal(err)
			}
			return id
		}
		a1, a2 := kill(acme, "mail"), kill(acme, "sms")
		d1 := kill(ctx, "mail")
		if _, err := o.Enqueue(acme, db, outbox.Message{Topic: "mail"}); err != nil {
			t.Fatal(err)
		}

		stats := func(tenantID string) map[string]float64 {
			t.Helper()
			r := runCLI(t, "outbox", "stats", "--db", dsn, "--tenant", tenantID, "--format", "json")
			var out map[string]any
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
				t.Fatalf("stats: exit %d, %q, %q", r.code, r.stdout, r.stderr)
			}
			m := map[string]float64{}
			for k, v := range out {
				if f, ok := v.(float64); ok {
					m[k] = f
				}
			}
			return m
		}
		if s := stats("acme"); s["dead"] != 2 || s["backlog"] != 1 || s["ready"] != 1 || s["due"] != 1 {
			t.Fatalf("acme's stats: %v", s)
		}
		if r := runCLI(t, "outbox", "stats", "--db", dsn, "--tenant", "acme"); r.code != 0 || !strings.Contains(r.stdout, "dead") || !strings.Contains(r.stdout, "backlog") {
			t.Fatalf("stats as text: %d %q %q", r.code, r.stdout, r.stderr)
		}

		r := runCLI(t, "outbox", "dead", "list", "--db", dsn, "--tenant", "acme")
		if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprint(a1)) || !strings.Contains(r.stdout, fmt.Sprint(a2)) || strings.Contains(r.stdout, "\trejected\n") ||
			!strings.Contains(r.stdout, "rejected; by the receiver") {
			t.Fatalf("dead list: %d %q %q", r.code, r.stdout, r.stderr)
		}
		r = runCLI(t, "outbox", "dead", "list", "--db", dsn, "--tenant", "acme", "--topic", "sms", "--format", "json")
		var rec map[string]any
		if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || json.Unmarshal([]byte(r.stdout), &rec) != nil || rec["id"] != float64(a2) ||
			fmt.Sprint(rec["payload"]) != "map[n:1]" || rec["payload_base64"] != nil {
			t.Fatalf("dead list --topic sms --format json: %d %q %q; want the JSON payload as its value", r.code, r.stdout, r.stderr)
		}
		r = runCLI(t, "outbox", "dead", "list", "--db", dsn, "--tenant", "acme", "--topic", "mail", "--format", "json")
		rec = nil
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rec) != nil || rec["payload_base64"] != "cA==" || rec["payload"] != nil {
			t.Fatalf("dead list --topic mail --format json: %d %q %q; want other bytes as payload_base64", r.code, r.stdout, r.stderr)
		}

		r = runCLI(t, "outbox", "dead", "redrive", fmt.Sprint(a1), fmt.Sprint(d1), "--db", dsn, "--tenant", "acme")
		if r.code != 0 || strings.TrimSpace(r.stdout) != fmt.Sprint(a1) {
			t.Fatalf("redrive: %d %q %q (the default tenant's message must be left alone)", r.code, r.stdout, r.stderr)
		}
		if rec, err := o.Get(acme, db, a1); err != nil || rec.State != outbox.Ready {
			t.Fatalf("after the redrive: %+v, %v", rec, err)
		}
		// --json still works, deprecated, with a warning on stderr.
		r = runCLI(t, "outbox", "dead", "discard", "--all", "--db", dsn, "--tenant", "acme", "--json")
		if r.code != 0 || strings.TrimSpace(r.stdout) != fmt.Sprintf(`{"discarded":[%d]}`, a2) || !strings.Contains(r.stderr, "--json is deprecated: use --format json") {
			t.Fatalf("discard --all: %d %q %q", r.code, r.stdout, r.stderr)
		}
		if s := stats("acme"); s["dead"] != 0 || s["ready"] != 2 {
			t.Fatalf("acme after: %v", s)
		}
		if s := stats(tenant.Default); s["dead"] != 1 {
			t.Fatalf("the default tenant: %v", s)
		}

		for _, bad := range [][]string{
			{"outbox", "dead", "redrive", "--db", dsn},          // no filter
			{"outbox", "dead", "discard", "x1", "--db", dsn},    // not an id
			{"outbox", "stats", "--db", dsn, "--tenant", "a b"}, // not a tenant
			{"outbox", "dead", "list", "--db", dsn, "--limit", "0"},
		} {
			if r := runCLI(t, bad...); r.code != exitUsage || !strings.Contains(r.stderr, "invalid") {
				t.Errorf("%v: exit %d, stderr %q; want 2 and an InputError", bad, r.code, r.stderr)
			}
		}
	})
}

// TestOutboxEnqueueRefusesRacefreeHeaders: `racefree outbox enqueue`
// stores a message of its tenant and prints its id; a header whose name
// starts with Racefree- (any case) exits 2 with one line and stores
// nothing, so tenant acme cannot send a message claiming to be globex's.
func TestOutboxEnqueueRefusesRacefreeHeaders(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		db := testdb.Open(t, dsn, nil)
		for _, h := range []string{"racefree-outbox-tenant=globex", "Racefree-Outbox-Fence=99", "X-Fine"} {
			r := runCLI(t, "outbox", "enqueue", "mail", "--db", dsn, "--tenant", "acme", "--header", "X-Trace=1", "--header", h)
			if r.code != 2 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, strings.SplitN(h, "=", 2)[0]) {
				t.Fatalf("--header %s: exit %d, %q, %q; want 2 and one line naming it", h, r.code, r.stdout, r.stderr)
			}
		}
		var n int
		if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM racefree_outbox`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d messages stored (%v), want none", n, err)
		}
		r := runCLI(t, "outbox", "enqueue", "mail", "--db", dsn, "--tenant", "acme", "--header", "X-Trace=1", "--payload", "hi", "--format", "json")
		var out map[string]any
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || out["tenant"] != "acme" || out["idempotency_key"] != fmt.Sprint(out["id"]) {
			t.Fatalf("enqueue: exit %d, %q, %q", r.code, r.stdout, r.stderr)
		}
		o, err := outbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		acme, _ := tenant.With(context.Background(), "acme")
		ds, err := o.Claim(acme, "w", 10, time.Minute)
		if err != nil || len(ds) != 1 || fmt.Sprint(ds[0].ID) != fmt.Sprint(out["id"]) || ds[0].Tenant != "acme" || ds[0].Headers["X-Trace"] != "1" || string(ds[0].Payload) != "hi" {
			t.Fatalf("claimed %+v, %v", ds, err)
		}
	})
}
