package reliability

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/server"
)

// The fuzz targets send hostile input to every entry point: JSON bodies,
// the Idempotency-Key and webhook headers, DSNs, unique-check and
// rls-check arguments and migration files. go test runs their seed corpus
// (the f.Add calls and testdata/fuzz); go test -fuzz=FuzzXxx explores.
// Each checks that nothing panics and that every rejection is a 4xx
// problem+json (HTTP) or exit 2 with one line (CLI).

// fuzzHandler returns racefree's HTTP handler on a SQLite database that
// the HTTP fuzz targets share (migrating one takes seconds under -race),
// with a webhook source and an audit log configured.
func fuzzHandler(f *testing.F) http.Handler {
	f.Helper()
	shared.once.Do(func() {
		db, err := dsn.Open(context.Background(), "sqlite:"+filepath.Join(workDir, "fuzz.db"), &racefree.Config{Schema: racefree.SchemaMigrate})
		if err != nil {
			shared.err = err
			return
		}
		shared.db = db
		secrets, err := server.ParseInboxSecrets([]string{"billing=" + webhookSecret})
		if err != nil {
			shared.err = err
			return
		}
		keys, err := audit.ParseKeyring("mac k1 " + strings.Repeat("QUFB", 10) + "QUE=\n")
		if err != nil {
			shared.err = err
			return
		}
		shared.h = server.New(db, server.Options{InboxSecrets: secrets, AuditKeys: keys}).Handler()
	})
	if shared.err != nil {
		f.Fatal(shared.err)
	}
	return shared.h
}

// shared is the fuzz targets' database, closed by TestMain.
var shared struct {
	once sync.Once
	db   *racefree.DB
	h    http.Handler
	err  error
}

var fuzzKeys atomic.Int64

// serveOne sends one request to h and checks the answer: never a 5xx (the
// database is fine, so a 5xx is a failure to validate), and a 4xx is a
// problem document with a type.
func serveOne(t *testing.T, h http.Handler, req *http.Request) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code >= 500 {
		t.Fatalf("%s %s: %d %s", req.Method, req.URL, rec.Code, rec.Body)
	}
	if rec.Code >= 400 {
		var p struct{ Type string }
		if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Type == "" {
			t.Fatalf("%s %s: %d with %q %s; want a problem document", req.Method, req.URL, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
	}
}

// validHeader reports whether net/http would pass v on as a header value
// (it refuses control characters but tab before racefree sees them).
func validHeader(v string) bool {
	for _, c := range []byte(v) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

var jsonRoutes = []string{
	"/v1/claims/k", "/v1/claims/k/renew", "/v1/events", "/v1/events/fp/result",
	"/v1/sequences/s/n/next", "/v1/tokens", "/v1/tokens/consume", "/v1/tokens/rotate",
	"/v1/audit", "/v1/audit/checkpoints", "/v1/quotas/k/consume", "/v1/outbox",
}

func FuzzJSONBodies(f *testing.F) {
	for i := range jsonRoutes {
		for _, b := range []string{``, `{}`, `null`, `[]`, `{"holder":"w","ttl_ms":1000}`, `{"holder":"w","fence":1,"ttl_ms":-1}`,
			`{"n":9223372036854775807}`, `{"policy":{"kind":"gcra","rate":1,"per_ms":1,"burst":1},"n":1}`,
			`{"topic":"t","key":"k","payload":{"a":1},"delay_ms":1e30}`, `{"scope":"s","actor":"a","action":"x","subject":"y","data":{}}`,
			`{"source":"s","fingerprint":"f\u0000"}`, `{"kind":"code","purpose":"p","subject":"u","ttl_ms":60000}`, `{"holder":1}`, "{\"holder\":\"\xff\"}"} {
			f.Add(uint8(i), []byte(b))
		}
	}
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		req := httptest.NewRequest("POST", jsonRoutes[int(route)%len(jsonRoutes)], bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf(`"fuzz-%d"`, fuzzKeys.Add(1)))
		serveOne(t, h, req)
	})
}

func FuzzIdempotencyKey(f *testing.F) {
	for _, k := range []string{`"k"`, `k`, `""`, `"a", "b"`, `"\"`, `:Zm9v:`, "\"\t\"", `"` + strings.Repeat("x", 300) + `"`, `"é"`, `?1`} {
		f.Add(k)
	}
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, key string) {
		if !validHeader(key) {
			t.Skip("net/http refuses this header before racefree sees it")
		}
		req := httptest.NewRequest("POST", "/v1/sequences/s/n/next", strings.NewReader(`{"n":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		serveOne(t, h, req)
	})
}

func FuzzWebhookHeaders(f *testing.F) {
	f.Add("evt_1", "1700000000", "v1,AAAA", []byte(`{}`))
	f.Add("", "", "", []byte(``))
	f.Add("evt_1", "-1", "v1,", []byte(`x`))
	f.Add("evt_1", "99999999999999999999", "v1,!!!! v2,x v1", []byte(`{"type":"x"}`))
	f.Add(strings.Repeat("i", 1000), "0", "v1a,b", []byte(`{}`))
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		if !validHeader(id) || !validHeader(ts) || !validHeader(sig) {
			t.Skip("net/http refuses this header before racefree sees it")
		}
		req := httptest.NewRequest("POST", "/v1/inbox/billing", bytes.NewReader(body))
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", ts)
		req.Header.Set("webhook-signature", sig)
		serveOne(t, h, req)
	})
}

func FuzzDSN(f *testing.F) {
	for _, s := range []string{"sqlite:x.db", "sqlite:", "postgres://u@h:5432/d?sslmode=disable", "postgresql://", "mysql://x",
		"sqlite:file:x?mode=memory", "postgres://%zz", "", ":", "sqlite:\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		engine, _, err := dsn.Parse(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("Parse(%q): a multi-line error: %v", s, err)
			}
			return
		}
		if engine != racefree.SQLite && engine != racefree.Postgres {
			t.Fatalf("Parse(%q) = engine %q", s, engine)
		}
	})
}

// runTool runs the racefree binary with args and checks its exit status:
// 0 or 1 (a finding), or 2 with exactly one line on stderr.
func runTool(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, racefreeBin(t), args...)
	cmd.Env = append(os.Environ(), "RACEFREE_DB=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%q hung", args)
	case code == 0 || code == 1:
	case code == 2:
		if lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n"); len(lines) != 1 || lines[0] == "" {
			t.Fatalf("%q: exit 2 with %d lines on stderr, want one:\n%s", args, len(lines), stderr.String())
		}
	default:
		t.Fatalf("%q: %v (exit %d), want 0, 1 or 2\n%s", args, err, code, stderr.String())
	}
}

// checkDB is a SQLite database (not racefree's) with a table the argument
// fuzzers can name.
func checkDB(f *testing.F) string {
	f.Helper()
	path := filepath.Join(f.TempDir(), "app.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		f.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`); err != nil {
		f.Fatal(err)
	}
	return "sqlite:" + path
}

func FuzzUniqueCheckArgs(f *testing.F) {
	for _, s := range []string{"--table users --key email", "--table users --key lower(email) --where x=", "--table \"us --key",
		"--table users", "--key email", "--table users --key email --limit -5 --format yaml", "--table main.users --key id --dedupe-sql keep=oldest"} {
		f.Add(s)
	}
	d := checkDB(f)
	f.Fuzz(func(t *testing.T, args string) {
		runTool(t, append([]string{"unique-check", "--db", d}, strings.Fields(args)...)...)
	})
}

func FuzzRLSCheckArgs(f *testing.F) {
	for _, s := range []string{"", "--role app", "--format xml", "--timeout -1s", "--schema", "--tenant-column \"x"} {
		f.Add(s)
	}
	d := checkDB(f) // rls-check refuses a SQLite database with one line
	f.Fuzz(func(t *testing.T, args string) {
		runTool(t, append([]string{"rls-check", "--db", d}, strings.Fields(args)...)...)
	})
}

func FuzzMigrationFile(f *testing.F) {
	// The seed corpus is in testdata/fuzz/FuzzMigrationFile: one file,
	// since each run compiles the SQL parser for seconds.
	d := checkDB(f)
	dir := f.TempDir()
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, text string) {
		path := filepath.Join(dir, fmt.Sprintf("%d.sql", n.Add(1)))
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		runTool(t, "unique-check", "--db", d, "--migration", path)
	})
}
