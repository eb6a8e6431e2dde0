package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// countingServer serves h and counts the requests it was sent.
func countingServer(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// refusedAsUsage fails t unless r is a usage error: exit 2, nothing on
// stdout, one line on stderr naming what.
func refusedAsUsage(t *testing.T, r result, what string, args []string) {
	t.Helper()
	if r.code != exitUsage || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, what) {
		t.Errorf("%v: %+v; want exit 2, nothing on stdout, one line naming %s", args, r, what)
	}
}

// TestEdgesAuditCheckpointFileOfAnotherTenant: audit verify --tenant acme
// --checkpoint FILE leaves out the checkpoints FILE holds without a tenant
// (exported before tenancy: the default tenant's), so acme's chain of the
// same scope name is not held to the default tenant's head, and a scope
// only the default tenant has is not verified for acme. The default
// tenant's chains are still anchored by them.
func TestEdgesAuditCheckpointFileOfAnotherTenant(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		dir := t.TempDir()
		keys, ring := writeKeyring(t, dir)
		db := testdb.Open(t, d, nil)
		l, _ := audit.New(db, ring)
		appendLogins(t, l, db, "orders", "orders", "orders", "billing")
		acme, _ := tenant.With(context.Background(), "acme")
		if _, err := l.Append(acme, db, "orders", audit.Entry{Actor: "bob", Action: "login"}); err != nil {
			t.Fatal(err)
		}
		cpFile := oldCheckpointFile(t, d, keys, dir, 2)
		r := runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--tenant", "acme", "--checkpoint", cpFile)
		if want := "orders: intact, 1 entries, no checkpoint (a cut tail or a restored older copy would go unnoticed)\n"; r.code != 0 || r.stdout != want {
			t.Fatalf("verify --tenant acme against the default tenant's old checkpoints: %+v; want exactly %q, exit 0", r, want)
		}
		r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--checkpoint", cpFile)
		if r.code != 0 || strings.Count(r.stdout, "anchored by a checkpoint") != 2 {
			t.Fatalf("verify of the default tenant against its old checkpoints: %+v; want both scopes anchored", r)
		}
	})
}

// TestEdgesAuditAppendMACsAsTheAPIGivesThem: audit append --format json
// gives mac and prev_mac in standard, padded base64 (as GET /v1/audit
// does), decoding to the MACs stored.
func TestEdgesAuditAppendMACsAsTheAPIGivesThem(t *testing.T) {
	t.Parallel()
	keys, ring := writeKeyring(t, t.TempDir())
	testdb.EachDSN(t, func(t *testing.T, d string) {
		db := testdb.Open(t, d, nil)
		l, _ := audit.New(db, ring)
		base := []string{"audit", "append", "--db", d, "--keys", keys, "--scope", "orders", "--actor", "alice", "--action", "refund", "--format", "json"}
		var printed []map[string]any
		for range 2 {
			r := runCLI(t, base...)
			if r.code != 0 {
				t.Fatalf("append: %+v", r)
			}
			printed = append(printed, jsonOf(t, r, "POST /v1/audit"))
		}
		stored, err := l.List(context.Background(), "orders", 0, 10)
		if err != nil || len(stored) != 2 {
			t.Fatalf("stored: %v, %v", stored, err)
		}
		for i, m := range printed {
			for name, want := range map[string][]byte{"mac": stored[i].MAC, "prev_mac": stored[i].PrevMAC} {
				s, _ := m[name].(string)
				got, err := base64.StdEncoding.DecodeString(s)
				if err != nil || !bytes.Equal(got, want) || s != base64.StdEncoding.EncodeToString(want) {
					t.Errorf("entry %d: %s %q (%v); want %q, the stored MAC in standard base64", i+1, name, s, err, base64.StdEncoding.EncodeToString(want))
				}
			}
		}
	})
}

// TestEdgesAuditVerifyServerRefusesABadFormat: audit verify --server
// with a --format other than text or json is a usage error (exit 2, one
// line) and sends nothing.
func TestEdgesAuditVerifyServerRefusesABadFormat(t *testing.T) {
	t.Parallel()
	_, ring := writeKeyring(t, t.TempDir())
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		srv, sent := countingServer(t, server.New(db, server.Options{AuditKeys: ring}).Handler())
		args := []string{"audit", "verify", "--server", srv.URL, "--scope", "orders", "--format", "yaml"}
		refusedAsUsage(t, runCLI(t, args...), "format", args)
		if n := sent.Load(); n != 0 {
			t.Errorf("%d requests sent for a refused --format; want none", n)
		}
		if r := runCLI(t, "audit", "verify", "--server", srv.URL, "--scope", "orders", "--format", "json"); r.code != 0 || sent.Load() != 1 {
			t.Fatalf("verify --server --format json: %+v (%d requests)", r, sent.Load())
		}
	})
}

// killOutbox enqueues n messages of topic in ctx's tenant and makes them
// dead: each claimed and failed for good.
func killOutbox(t *testing.T, ctx context.Context, db *racefree.DB, o *outbox.Outbox, topic string, n int) []int64 {
	t.Helper()
	var ids []int64
	for range n {
		id, err := o.Enqueue(ctx, db, outbox.Message{Topic: topic, Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	ds, err := o.Claim(ctx, "w", n, time.Minute, topic)
	if err != nil || len(ds) != n {
		t.Fatalf("claim: %d of %d, %v", len(ds), n, err)
	}
	for _, d := range ds {
		if _, err := o.Fail(ctx, d, outbox.Permanent(errors.New("rejected"))); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// TestEdgesOutboxServerRefusesWhatItCannotDo: with --server, --tenant
// (the key names the tenant) is bad input for stats and enqueue, and a
// redrive or discard that names ids and also --all, --topic or --key (the
// HTTP API repairs one id at a time) is bad input too: exit 2, one line,
// nothing stored, the dead message still dead, nothing sent.
func TestEdgesOutboxServerRefusesWhatItCannotDo(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o, err := outbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprint(killOutbox(t, ctx, db, o, "mail", 1)[0])
		srv, sent := countingServer(t, server.New(db, server.Options{}).Handler())
		for _, c := range []struct {
			args []string
			what string
		}{
			{[]string{"outbox", "stats", "--tenant", "acme"}, "tenant"},
			{[]string{"outbox", "enqueue", "mail", "--tenant", "acme"}, "tenant"},
			{[]string{"outbox", "dead", "redrive", id, "--all"}, "id"},
			{[]string{"outbox", "dead", "discard", id, "--all"}, "id"},
			{[]string{"outbox", "dead", "redrive", id, "--topic", "mail"}, "id"},
			{[]string{"outbox", "dead", "discard", id, "--key", "k"}, "id"},
		} {
			args := append(c.args, "--server", srv.URL)
			refusedAsUsage(t, runCLI(t, args...), c.what, args)
		}
		if n := sent.Load(); n != 0 {
			t.Errorf("%d requests sent for refused commands; want none", n)
		}
		s, err := o.Stats(ctx, db)
		if err != nil || s.Dead != 1 || s.Ready+s.Leased != 0 {
			t.Fatalf("stats after the refusals: %+v, %v; want the one dead message, nothing enqueued", s, err)
		}
		acme, _ := tenant.With(ctx, "acme")
		if s, err := o.Stats(acme, db); err != nil || s.Ready != 0 {
			t.Fatalf("acme after the refusals: %+v, %v; want nothing enqueued", s, err)
		}
	})
}

// TestEdgesOutboxCommandsPrintAsDocumented: outbox dead list lists 100
// dead messages without --limit (the documented default) and the 101st
// after them; its JSON gives died_at, when the message died, apart from
// created_at; a redrive or discard that matched nothing prints an empty
// list with --format json, not null; stats' backlog counts the leased
// messages with the ready ones, in JSON as in text; enqueue --ordered
// stores an ordered message; and get --format json of a message with no
// failed attempt gives an empty history, not null.
func TestEdgesOutboxCommandsPrintAsDocumented(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		created := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
		clk := racefree.NewManualClock(created)
		db := testdb.Open(t, d, &racefree.Config{Clock: clk})
		o, err := outbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for range 101 {
			id, err := o.Enqueue(ctx, db, outbox.Message{Topic: "mail", Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		clk.Advance(time.Hour)
		ds, err := o.Claim(ctx, "w", 101, time.Minute)
		if err != nil || len(ds) != 101 {
			t.Fatalf("claim: %d, %v", len(ds), err)
		}
		for _, dl := range ds {
			if _, err := o.Fail(ctx, dl, outbox.Permanent(errors.New("rejected"))); err != nil {
				t.Fatal(err)
			}
		}

		r := runCLI(t, "outbox", "dead", "list", "--db", d)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if r.code != 0 || len(lines) != 101 || !strings.HasPrefix(lines[100], fmt.Sprint(ids[99])+" ") {
			t.Fatalf("dead list without --limit: exit %d, %d lines (%q…); want a header and 100 messages", r.code, len(lines), lines[len(lines)-1])
		}
		r = runCLI(t, "outbox", "dead", "list", "--db", d, "--after", fmt.Sprint(ids[99]), "--format", "json")
		var page []map[string]any
		for _, line := range strings.SplitAfter(r.stdout, "\n") {
			var m map[string]any
			if line != "" && json.Unmarshal([]byte(line), &m) == nil {
				page = append(page, m)
			}
		}
		if r.code != 0 || len(page) != 1 || page[0]["id"] != float64(ids[100]) {
			t.Fatalf("dead list --after the 100th: %+v; want the 101st only", r)
		}
		if page[0]["created_at"] != fmtTime(created) || page[0]["died_at"] != fmtTime(created.Add(time.Hour)) {
			t.Errorf("dead list --format json: created_at %v, died_at %v; want %s and %s", page[0]["created_at"], page[0]["died_at"], fmtTime(created), fmtTime(created.Add(time.Hour)))
		}

		for verb, done := range map[string]string{"redrive": "redriven", "discard": "discarded"} {
			r := runCLI(t, "outbox", "dead", verb, "--all", "--tenant", "acme", "--db", d, "--format", "json")
			want := fmt.Sprintf(`{"%s":[]}`+"\n", done)
			if r.code != 0 || r.stdout != want {
				t.Errorf("dead %s --all of a tenant with no dead message: %+v; want %q", verb, r, want)
			}
		}

		// acme: one message ready, one leased.
		now := testdb.Open(t, d, nil)
		on, err := outbox.New(now, nil)
		if err != nil {
			t.Fatal(err)
		}
		acme, _ := tenant.With(ctx, "acme")
		r = runCLI(t, "outbox", "enqueue", "sms", "--key", "u1", "--ordered", "--tenant", "acme", "--db", d, "--format", "json")
		var m map[string]any
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &m) != nil {
			t.Fatalf("enqueue --ordered: %+v", r)
		}
		if _, err := on.Enqueue(acme, now, outbox.Message{Topic: "sms", Key: "u2"}); err != nil {
			t.Fatal(err)
		}
		id := int64(m["id"].(float64))
		if rec, err := on.Get(acme, now, id); err != nil || !rec.Ordered {
			t.Fatalf("enqueue --ordered stored %+v, %v; want an ordered message", rec, err)
		}
		r = runCLI(t, "outbox", "get", fmt.Sprint(id), "--tenant", "acme", "--db", d, "--format", "json")
		got := jsonOf(t, r, "GET /v1/outbox/messages/{id}")
		if h, ok := got["history"].([]any); r.code != 0 || got["ordered"] != true || !ok || len(h) != 0 {
			t.Fatalf("get --format json of a new ordered message: %+v; want ordered true and an empty history", r)
		}
		if ds, err := on.Claim(acme, "w", 1, time.Minute); err != nil || len(ds) != 1 {
			t.Fatalf("claim: %v, %v", ds, err)
		}
		r = runCLI(t, "outbox", "stats", "--tenant", "acme", "--db", d, "--format", "json")
		var st map[string]any
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil || st["backlog"] != float64(2) || st["ready"] != float64(1) || st["leased"] != float64(1) {
			t.Errorf("stats --format json with one message ready and one leased: %+v; want backlog 2", r)
		}
		r = runCLI(t, "outbox", "stats", "--tenant", "acme", "--db", d)
		if r.code != 0 || !regexp.MustCompile(`(?m)^backlog +2 +\(ready 1, of which due 1; leased 1\)$`).MatchString(r.stdout) {
			t.Errorf("stats as text with one message ready and one leased: %+v; want backlog 2", r)
		}
	})
}

// TestEdgesKeysDefaultsAndEarlyRefusals: keys create without --scope makes
// a key of exactly read,write (never admin); keys list --tenant with a
// tenant id that is not one (a leading space) is bad input, exit 2 naming
// the tenant, before the database is opened: a mistyped --db is not
// reported instead, and no file is created.
func TestEdgesKeysDefaultsAndEarlyRefusals(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		testdb.Open(t, d, nil)
		var created map[string]any
		if r := runCLI(t, "keys", "create", "--db", d, "--tenant", "acme", "--format", "json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &created) != nil {
			t.Fatalf("create: %+v", r)
		} else if created["scopes"] != "read,write" {
			t.Fatalf("create without --scope: scopes %v; want read,write", created["scopes"])
		}
		r := runCLI(t, "keys", "list", "--db", d, "--tenant", "acme", "--format", "json")
		if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stdout, `"scopes":"read,write"`) {
			t.Fatalf("list: %+v; want one key of read,write", r)
		}
	})
	missing := filepath.Join(t.TempDir(), "typo.db")
	args := []string{"keys", "list", "--db", "sqlite:" + missing, "--tenant", " acme"}
	refusedAsUsage(t, runCLI(t, args...), "tenant", args)
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("keys list with a bad tenant created %s (%v)", missing, err)
	}
}

// TestEdgesServeWaitForDBFlagOverEnvironment: serve --wait-for-db D is
// what serve waits, whatever RACEFREE_WAIT_FOR_DB says: with the flag
// given, a value of the variable that is no duration is not read, and 0
// (one attempt) ends serve after one failed attempt at an unreachable
// database, exit 1.
func TestEdgesServeWaitForDBFlagOverEnvironment(t *testing.T) {
	t.Parallel()
	r := runIn(t, t.TempDir(), []string{"RACEFREE_WAIT_FOR_DB=soon"},
		"serve", "--db", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2", "--addr", "127.0.0.1:0", "--wait-for-db", "0")
	if r.code != 1 || strings.Contains(r.stderr, "RACEFREE_WAIT_FOR_DB") {
		t.Fatalf("serve --wait-for-db 0 with RACEFREE_WAIT_FOR_DB=soon: exit %d, stderr %q; want one attempt, exit 1, the variable not read", r.code, r.stderr)
	}
	r = runIn(t, t.TempDir(), []string{"RACEFREE_WAIT_FOR_DB=soon"},
		"serve", "--db", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2", "--addr", "127.0.0.1:0")
	if r.code != exitUsage || !strings.Contains(r.stderr, "RACEFREE_WAIT_FOR_DB") {
		t.Fatalf("serve with RACEFREE_WAIT_FOR_DB=soon and no flag: exit %d, stderr %q; want exit 2 naming the variable", r.code, r.stderr)
	}
}
