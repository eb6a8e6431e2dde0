package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestUsageErrorsExit2: an unknown command or flag, a flag's bad value, a
// missing or extra argument and a command given without its subcommand
// exit 2 with one line on stderr and nothing on stdout, on every command,
// serve and the top level included.
func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "r.db")
	for _, args := range [][]string{
		{},
		{"no-such-command"},
		{"--no-such-flag"},
		{"serve", "--no-such-flag"},
		{"serve", "extra-argument"},
		{"serve", "--addr"},
		{"migrate"},
		{"migrate", "sideways"},
		{"migrate", "up", "--to", "ten", "--db", db},
		{"keys"},
		{"keys", "revoke", "--tenant", "acme"},
		{"audit"},
		{"outbox"},
		{"outbox", "dead"},
		{"outbox", "stats", "--format", "yaml", "--db", db},
		{"quota", "consume"},
		{"quota", "consume", "k", "--n", "many"},
		{"claim"},
		{"claim", "get"},
		{"claim", "get", "k", "--format", "yaml", "--server", "http://127.0.0.1:1"},
		{"quota", "consume", "k", "--rate", "1", "--burst", "1", "--format", "yaml", "--db", db},
		{"seq", "next", "a", "b", "--format", "yaml", "--db", db},
		{"audit", "append", "--scope", "s", "--actor", "a", "--action", "x", "--format", "yaml", "--db", db},
		{"audit", "append", "--scope", "s", "--actor", "a", "--action", "x", "--no-such-flag"},
		{"token", "rotate", "t", "--format", "xml", "--server", "http://127.0.0.1:1"},
		{"seq", "next", "only-scope"},
		{"token", "consume"},
		{"token", "consume", "-", "--purpose", "p", "--server", "http://127.0.0.1:1"}, // stdin is empty
		{"events"},
		{"events", "record"},
		{"events", "observe", "extra-argument"},
		{"events", "observe", "--source", "s", "--format", "yaml", "--server", "http://127.0.0.1:1"},
		{"inbox"},
		{"inbox", "list"},
		{"inbox", "list", "s", "--limit", "many"},
		{"inbox", "deliver", "s", "--webhook-id", "i", "--webhook-timestamp", "1", "--webhook-signature", "v1,x", "--format", "yaml", "--server", "http://127.0.0.1:1"},
		{"token", "issue", "--ttl", "soon"},
		{"version", "extra"},
		{"version", "--format", "xml"},
		{"unique-check", "--no-such-flag"},
		{"doctor", "--no-such-flag"},
	} {
		r := runCLI(t, args...)
		if r.code != exitUsage || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "racefree: ") {
			t.Errorf("racefree %s: exit %d, stdout %q, stderr %q; want exit 2 and one line", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("usage errors created %d files, want none", len(entries))
	}
}

// TestVersion: version and --version print the same line, with the
// module version, the revision and the modified flag of a -buildvcs
// build, and say that there is none without it (CI builds with
// -buildvcs=false).
func TestVersion(t *testing.T) {
	t.Parallel()
	a, b := runCLI(t, "version"), runCLI(t, "--version")
	if a.code != 0 || b.code != 0 || a.stdout != b.stdout || !strings.HasPrefix(a.stdout, "racefree ") {
		t.Fatalf("version: %+v, --version: %+v; want the same line", a, b)
	}
	j := runCLI(t, "version", "--format", "json")
	var v versionInfo
	if err := json.Unmarshal([]byte(j.stdout), &v); err != nil || j.code != 0 || v.Module != "github.com/racefree/racefree" || v.Go == "" {
		t.Fatalf("version --format json: %+v (%v)", j, err)
	}
	if a.stdout != v.String()+"\n" {
		t.Fatalf("text %q and JSON %+v disagree", a.stdout, v)
	}

	vcs := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/racefree/racefree", Version: "v0.3.1-0.20261202032305-4d217e399318+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "4d217e399318e2c4b1e67e7c5876b96b606df18d"},
			{Key: "vcs.time", Value: "2026-12-02T03:23:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := buildVersion(vcs).String(), "racefree v0.3.1-0.20261202032305-4d217e399318+dirty (revision 4d217e399318e2c4b1e67e7c5876b96b606df18d, modified, 2026-12-02T03:23:05Z; go1.26.8)"; got != want {
		t.Errorf("with -buildvcs: %q, want %q", got, want)
	}
	vcs.Settings[3].Value = "false"
	if got := buildVersion(vcs).String(); strings.Contains(got, "modified") {
		t.Errorf("a clean tree: %q says modified", got)
	}
	novcs := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/racefree/racefree", Version: "(devel)"}}
	if got, want := buildVersion(novcs).String(), "racefree (devel) (no VCS revision: built without -buildvcs; go1.26.8)"; got != want {
		t.Errorf("with -buildvcs=false: %q, want %q", got, want)
	}
	if got := buildVersion(nil); got.Version != "unknown" {
		t.Errorf("no build information: %+v", got)
	}
}

// TestCommandsCreateNoDatabase: every command that opens a SQLite path,
// but serve and migrate up, refuses a path that names no file with one
// line saying so, and leaves no file behind.
func TestCommandsCreateNoDatabase(t *testing.T) {
	t.Parallel()
	keys, _ := writeKeyring(t, t.TempDir())
	dir := t.TempDir()
	path := filepath.Join(dir, "racefree.db")
	db := "sqlite:" + path
	for _, args := range [][]string{
		{"quota", "consume", "k", "--rate", "1", "--burst", "1", "--db", db},
		{"seq", "next", "invoices", "2026", "--db", db},
		{"outbox", "stats", "--db", db},
		{"outbox", "dead", "list", "--db", db},
		{"outbox", "dead", "redrive", "--all", "--db", db},
		{"outbox", "enqueue", "mail", "--db", db},
		{"keys", "list", "--db", db},
		{"keys", "create", "--tenant", "acme", "--db", db},
		{"audit", "verify", "--keys", keys, "--db", db},
		{"audit", "checkpoint", "--keys", keys, "--db", db},
		{"doctor", "--db", db},
		{"migrate", "status", "--db", db},
		{"unique-check", "--table", "users", "--key", "email", "--db", db},
	} {
		r := runCLI(t, args...)
		if r.code == 0 || r.stdout != "" || r.stderr != "racefree: no database at "+path+" (run racefree serve or racefree migrate up first)\n" {
			t.Errorf("racefree %s: exit %d, stdout %q, stderr %q; want one line saying there is no database", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("racefree %s created %d files, want none", strings.Join(args, " "), len(entries))
		}
	}
}

// TestClientCommandsOnBothEngines drives claim, quota, seq, token, audit
// append and outbox with --server against a live server per engine: with
// --format json each prints one JSON object whose members are those the
// OpenAPI document gives the route's answer (the same names as the HTTP
// body), and without it one line of text.
func TestClientCommandsOnBothEngines(t *testing.T) {
	t.Parallel()
	_, ring := writeKeyring(t, t.TempDir())
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		srv := httptest.NewServer(server.New(db, server.Options{AuditKeys: ring}).Handler())
		defer srv.Close()
		url := srv.URL
		r := runCLI(t, "seq", "next", "invoices", "2026", "--n", "3", "--server", url, "--format", "json")
		if m := jsonOf(t, r, "POST /v1/sequences/{scope}/{name}/next"); r.code != 0 || m["first"] != float64(1) || m["last"] != float64(3) || m["scope"] != "invoices" || m["name"] != "2026" {
			t.Fatalf("seq next --n 3: %+v", r)
		}
		r = runCLI(t, "seq", "next", "invoices", "2026", "--server", url)
		if textOf(t, r, "invoices/2026: 4\n"); r.code != 0 {
			t.Fatalf("seq next: %+v", r)
		}
		if r := runCLI(t, "seq", "next", "invoices", "2026", "--n", "2", "--server", url); r.code != 0 || r.stdout != "invoices/2026: 5..6\n" {
			t.Fatalf("seq next --n 2: %+v", r)
		}
		if r := runCLI(t, "seq", "next", "invoices", "2026", "--n", "0", "--server", url); r.code != exitUsage {
			t.Fatalf("seq next --n 0: %+v, want exit 2", r)
		}

		r = runCLI(t, "claim", "acquire", "job", "--holder", "w1", "--ttl", "1m", "--server", url, "--format", "json")
		if m := jsonOf(t, r, "POST /v1/claims/{key}"); r.code != 0 || m["key"] != "job" || m["holder"] != "w1" || m["fence"] != float64(1) || m["live"] != true {
			t.Fatalf("claim acquire: %+v", r)
		}
		r = runCLI(t, "claim", "acquire", "job", "--holder", "w2", "--ttl", "1m", "--server", url, "--format", "json")
		if m := jsonOf(t, r, "POST /v1/claims/{key}"); r.code != exitHeld || m["holder"] != "w1" || m["fence"] != float64(1) {
			t.Fatalf("claim acquire of a held key: %+v, want exit 3 and the holder's claim", r)
		}
		r = runCLI(t, "claim", "renew", "job", "--holder", "w1", "--fence", "1", "--ttl", "1m", "--server", url, "--format", "json")
		if m := jsonOf(t, r, "POST /v1/claims/{key}/renew"); r.code != 0 || m["fence"] != float64(1) || m["count"] == nil {
			t.Fatalf("claim renew: %+v", r)
		}
		r = runCLI(t, "claim", "get", "job", "--server", url, "--format", "json")
		if m := jsonOf(t, r, "GET /v1/claims/{key}"); r.code != 0 || m["holder"] != "w1" || m["expires_at"] == "" {
			t.Fatalf("claim get: %+v", r)
		}
		textOf(t, runCLI(t, "claim", "get", "job", "--server", url), "job: held by w1, fence 1, until ")
		r = runCLI(t, "claim", "release", "job", "--holder", "w1", "--fence", "1", "--server", url, "--format", "json")
		if m := jsonOf(t, r, "DELETE /v1/claims/{key}"); r.code != 0 || m["key"] != "job" || m["holder"] != "w1" || m["fence"] != float64(1) {
			t.Fatalf("claim release: %+v", r)
		}
		textOf(t, runCLI(t, "claim", "get", "job", "--server", url), "job: free; last held by w1, fence 1, until ")

		consume := []string{"quota", "consume", "u1", "--rate", "1", "--per", "1h", "--burst", "1", "--server", url}
		r = runCLI(t, append(consume, "--format", "json")...)
		if m := jsonOf(t, r, "POST /v1/quotas/{key}/consume"); r.code != 0 || m["allowed"] != true || m["remaining"] != float64(0) || m["reset_at"] == nil {
			t.Fatalf("quota consume: %+v", r)
		}
		r = runCLI(t, append(consume, "--format", "json")...)
		if m := jsonOf(t, r, "POST /v1/quotas/{key}/consume"); r.code != exitHeld || m["allowed"] != false || m["retry_after_ms"] == nil {
			t.Fatalf("quota consume over the limit: %+v, want exit 3 with retry_after_ms", r)
		}
		textOf(t, runCLI(t, consume...), "refused: retry after ")

		r = runCLI(t, "token", "issue", "--purpose", "email-verify", "--subject", "u1", "--ttl", "1h", "--server", url, "--format", "json")
		code := jsonOf(t, r, "POST /v1/tokens")
		token, _ := code["token"].(string)
		if r.code != 0 || token == "" || code["subject"] != "u1" || code["kind"] != "code" {
			t.Fatalf("token issue: %+v", r)
		}
		r = runCLI(t, "token", "consume", "--purpose", "email-verify", "--server", url, "--format", "json", "--", token)
		if m := jsonOf(t, r, "POST /v1/tokens/consume"); r.code != 0 || m["outcome"] != "consumed" || m["subject"] != "u1" {
			t.Fatalf("token consume: %+v", r)
		}
		r = runCLI(t, "token", "consume", "--purpose", "email-verify", "--server", url, "--format", "json", "--", token)
		if m := jsonOf(t, r, "POST /v1/tokens/consume"); r.code != exitRefused || m["outcome"] != "already_used" {
			t.Fatalf("token consume again: %+v, want exit 3, already_used", r)
		}
		if r := runCLI(t, "token", "consume", "--purpose", "email-verify", "--server", url, "--", token); r.code != exitRefused || r.stdout != "refused: already_used\n" {
			t.Fatalf("token consume again, text: %+v", r)
		}
		r = runCLI(t, "token", "issue", "--purpose", "email-verify", "--subject", "u2", "--server", url)
		textOf(t, r, "code for u2 (purpose email-verify), expires ")
		fields := strings.Fields(r.stdout)
		r = runCLI(t, "token", "consume", "--purpose", "email-verify", "--server", url, "--", fields[len(fields)-1]) // a token may begin with -
		textOf(t, r, "consumed: code for u2 (purpose email-verify), used at ")
		r = runCLI(t, "token", "issue", "--refresh", "--subject", "u1", "--server", url, "--format", "json")
		first := jsonOf(t, r, "POST /v1/tokens")
		if r.code != 0 || first["generation"] != float64(1) {
			t.Fatalf("token issue --refresh: %+v", r)
		}
		r = runCLI(t, "token", "rotate", "--server", url, "--format", "json", "--", first["token"].(string))
		if m := jsonOf(t, r, "POST /v1/tokens/rotate"); r.code != 0 || m["outcome"] != "rotated" || m["generation"] != float64(2) {
			t.Fatalf("token rotate: %+v", r)
		}
		r = runCLI(t, "token", "rotate", "--server", url, "--format", "json", "--", first["token"].(string))
		if m := jsonOf(t, r, "POST /v1/tokens/rotate"); r.code != exitRefused || m["outcome"] != "reused" {
			t.Fatalf("token rotate of a retired token: %+v, want exit 3, reused", r)
		}
		textOf(t, runCLI(t, "token", "issue", "--refresh", "--subject", "u3", "--server", url), "issued: refresh token for u3 (generation 1), expires ")

		r = runCLI(t, "audit", "append", "--scope", "orders", "--actor", "alice", "--action", "refund", "--subject", "order-1", "--data", `{"amount":5}`, "--server", url, "--format", "json")
		entry := jsonOf(t, r, "POST /v1/audit")
		if data, _ := json.Marshal(entry["data"]); r.code != 0 || entry["seq"] != float64(1) || entry["scope"] != "orders" || entry["actor"] != "alice" || entry["mac"] == "" || string(data) != `{"amount":5}` {
			t.Fatalf("audit append: %+v", r)
		}
		textOf(t, runCLI(t, "audit", "append", "--scope", "orders", "--actor", "bob", "--action", "cancel", "--server", url), "orders: entry 2 at ")
		if r := runCLI(t, "audit", "append", "--scope", "orders", "--actor", "bob", "--action", "cancel", "--data", "not json", "--server", url); r.code != exitUsage || r.stdout != "" {
			t.Fatalf("audit append of data that is not JSON: %+v, want exit 2, nothing printed", r)
		}
		if r := runCLI(t, "audit", "verify", "--scope", "orders", "--server", url); r.code != 0 || !strings.Contains(r.stdout, "orders: intact") {
			t.Fatalf("audit verify after the appends: %+v", r)
		}

		r = runCLI(t, "outbox", "enqueue", "mail", "--key", "u1", "--payload", `{"to":"a@example.com"}`, "--format", "json", "--server", url)
		m := jsonOf(t, r, "POST /v1/outbox")
		if r.code != 0 || m["id"] == nil || m["topic"] != "mail" || m["key"] != "u1" {
			t.Fatalf("outbox enqueue --server: %+v", r)
		}
		r = runCLI(t, "outbox", "stats", "--format", "json", "--server", url)
		if m := jsonOf(t, r, "GET /v1/outbox/stats"); r.code != 0 || m["ready"] != float64(1) {
			t.Fatalf("outbox stats --server: %+v", r)
		}
		if r := runCLI(t, "outbox", "stats", "--tenant", "acme", "--server", url); r.code == 0 || !strings.Contains(r.stderr, "with --server") {
			t.Fatalf("outbox stats --server --tenant: %+v, want refused", r)
		}
		r = runCLI(t, "outbox", "dead", "redrive", "424242", "--server", url)
		if r.code == 0 || !strings.Contains(r.stderr, "no dead outbox message 424242") {
			t.Fatalf("redrive of no dead message: %+v, want a refusal saying which", r)
		}
	})
}

// jsonOf decodes r's stdout as one JSON object on one line whose every
// member is a member the OpenAPI document gives the answer of op ("POST
// /v1/audit"; see documentedMembers), and fails t otherwise.
func jsonOf(t *testing.T, r result, op string) map[string]any {
	t.Helper()
	if strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("stdout %q is not one JSON object on one line (exit %d, stderr %q)", r.stdout, r.code, r.stderr)
	}
	return jsonLinesOf(t, r, op)[0]
}

// textOf checks r's stdout is one line of text, not JSON, starting with
// prefix.
func textOf(t *testing.T, r result, prefix string) {
	t.Helper()
	if !strings.HasPrefix(r.stdout, prefix) || strings.Count(r.stdout, "\n") != 1 || json.Valid([]byte(r.stdout)) {
		t.Fatalf("stdout %q (exit %d, stderr %q): want one line of text starting %q", r.stdout, r.code, r.stderr, prefix)
	}
}

// jsonLinesOf decodes r's stdout as JSON objects, one per line, whose
// every member is a member the OpenAPI document gives the answer of op,
// and fails t otherwise.
func jsonLinesOf(t *testing.T, r result, op string) []map[string]any {
	t.Helper()
	doc, ok := documentedMembers(t)[op]
	if !ok {
		t.Fatalf("the document has no operation %s", op)
	}
	var out []map[string]any
	for _, line := range strings.SplitAfter(r.stdout, "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || !strings.HasSuffix(line, "\n") {
			t.Fatalf("stdout %q is not JSON objects, one per line (exit %d, stderr %q)", r.stdout, r.code, r.stderr)
		}
		for name := range m {
			if !doc[name] {
				t.Fatalf("%s: member %q of %s is not a member of the API's answer (%v)", op, name, line, doc)
			}
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		t.Fatalf("stdout is empty, want JSON (exit %d, stderr %q)", r.code, r.stderr)
	}
	return out
}

// documentedMembers returns, for each operation of the OpenAPI document
// serve answers at /openapi.json ("POST /v1/claims/{key}"), the members its
// answer may have: the properties of its 200 response, or, for one that
// answers without a body, the names of its parameters; a quota refusal's
// retry_after_ms (a member of its 429 problem) too. A property that is an
// array of objects gives the members of its items under the operation and
// its name ("GET /v1/inbox/{source} events"), for a command that prints
// them one per line.
func documentedMembers(t *testing.T) map[string]map[string]bool {
	t.Helper()
	members, err := openAPIMembers()
	if err != nil {
		t.Fatal(err)
	}
	return members
}

var openAPIMembers = sync.OnceValues(func() (map[string]map[string]bool, error) {
	b, err := server.OpenAPIJSON()
	if err != nil {
		return nil, err
	}
	type schema struct {
		Ref        string             `json:"$ref"`
		Properties map[string]*schema `json:"properties"`
		Items      *schema            `json:"items"`
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name string `json:"name"`
			} `json:"parameters"`
			Responses map[string]struct {
				Content map[string]struct {
					Schema schema `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	out := map[string]map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			names := map[string]bool{}
			if ok, found := op.Responses["200"]; found {
				for _, c := range ok.Content {
					s := c.Schema
					if s.Ref != "" {
						s = doc.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
					}
					for name, p := range s.Properties {
						names[name] = true
						if p != nil && p.Items != nil && len(p.Items.Properties) > 0 {
							items := map[string]bool{}
							for item := range p.Items.Properties {
								items[item] = true
							}
							out[strings.ToUpper(method)+" "+path+" "+name] = items
						}
					}
				}
			} else {
				for _, p := range op.Parameters {
					if p.Name != "" {
						names[p.Name] = true
					}
				}
			}
			out[strings.ToUpper(method)+" "+path] = names
		}
	}
	if q := out["POST /v1/quotas/{key}/consume"]; q != nil {
		q["retry_after_ms"] = true
	}
	return out, nil
})

// TestAnUnreachableServerIsNotADatabaseOutage: a client command whose
// server does not answer says so, and not "database unavailable".
func TestAnUnreachableServerIsNotADatabaseOutage(t *testing.T) {
	t.Parallel()
	gone := httptest.NewServer(nil)
	url := gone.URL
	gone.Close()
	for _, args := range [][]string{
		{"claim", "get", "k"},
		{"quota", "consume", "k", "--rate", "1", "--burst", "1"},
		{"seq", "next", "a", "b"},
		{"events", "observe", "--source", "s", "--level", "l"},
		{"inbox", "list", "s"},
	} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel() // each retries for 1.5s
			r := runCLI(t, append(args, "--server", url)...)
			if r.code != exitUnreached || !strings.Contains(r.stderr, "server unreachable at "+url) || strings.Contains(r.stderr, "database") {
				t.Errorf("%v against a closed port: exit %d, stderr %q; want exit 1, server unreachable", args, r.code, r.stderr)
			}
		})
	}
}
