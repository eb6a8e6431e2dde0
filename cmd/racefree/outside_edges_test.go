package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// oldCheckpointFile exports the default tenant's checkpoints of the
// database at d (audit checkpoint, want of them) to a file in dir as a
// release before tenancy wrote them, without a tenant, and returns its
// path.
func oldCheckpointFile(t *testing.T, d, keys, dir string, want int) string {
	t.Helper()
	r := runCLI(t, "audit", "checkpoint", "--db", d, "--keys", keys)
	cps, err := audit.ReadCheckpoints(strings.NewReader(r.stdout))
	if r.code != 0 || err != nil || len(cps) != want {
		t.Fatalf("checkpoint: %+v, %v; want %d checkpoints", r, err, want)
	}
	for i := range cps {
		cps[i].Tenant = "" // as exported before tenancy
	}
	var file bytes.Buffer
	if err := audit.WriteCheckpoints(&file, cps...); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(file.String(), `"tenant"`) {
		t.Fatalf("the file still names a tenant: %s", file.String())
	}
	cpFile := filepath.Join(dir, "old.jsonl")
	if err := os.WriteFile(cpFile, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return cpFile
}

// TestEdgesAuditVerifyAgainstAnOldCheckpointFile: audit verify
// --checkpoint FILE holds the chains to checkpoints exported before
// tenancy (no tenant member: the default tenant's), and verifies every
// scope that FILE names even when its head row, its entries and its
// stored checkpoints were all deleted. A tail cut after such a checkpoint,
// and a scope deleted whole, are each reported broken, exit 1.
func TestEdgesAuditVerifyAgainstAnOldCheckpointFile(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		dir := t.TempDir()
		keys, ring := writeKeyring(t, dir)
		db := testdb.Open(t, d, nil)
		l, _ := audit.New(db, ring)
		appendLogins(t, l, db, "orders", "orders", "orders", "orders", "orders", "billing")
		cpFile := oldCheckpointFile(t, d, keys, dir, 2)
		if r := runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--checkpoint", cpFile); r.code != 0 || strings.Count(r.stdout, "anchored by a checkpoint") != 2 {
			t.Fatalf("verify against the old file before any change: %+v; want both scopes anchored", r)
		}

		cutAuditTail(t, db, l, "orders", true)
		r := runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--checkpoint", cpFile, "--scope", "orders")
		if r.code != 1 || !strings.HasPrefix(r.stdout, "orders: BROKEN at ") {
			t.Fatalf("verify of a tail cut after an old checkpoint: %+v; want orders broken, exit 1", r)
		}

		// cutAuditTail(…, true) left both tables' delete triggers off.
		stmts := []string{`DELETE FROM racefree_audit WHERE scope = 'billing'`,
			`DELETE FROM racefree_audit_checkpoints WHERE scope = 'billing'`,
			`DELETE FROM racefree_audit_heads WHERE scope = 'billing'`}
		testdb.ExecAll(t, db, stmts...)
		r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--checkpoint", cpFile)
		if r.code != 1 || !strings.Contains(r.stdout, "billing: BROKEN at ") || !strings.Contains(r.stdout, "orders: BROKEN at ") {
			t.Fatalf("verify of a scope deleted whole, named only by the old file: %+v; want billing and orders broken, exit 1", r)
		}
	})
}

// TestEdgesAuditEntryAsJSON: audit append --format json prints the entry
// as stored: prev_mac is the previous entry's mac (empty for the first),
// and data that is not JSON comes back whole as data_base64, exit 0.
func TestEdgesAuditEntryAsJSON(t *testing.T) {
	t.Parallel()
	keys, _ := writeKeyring(t, t.TempDir())
	testdb.EachDSN(t, func(t *testing.T, d string) {
		testdb.Open(t, d, nil) // migrated
		base := []string{"audit", "append", "--db", d, "--keys", keys, "--scope", "orders", "--actor", "alice", "--action", "refund", "--format", "json"}
		first := jsonOf(t, runCLI(t, base...), "POST /v1/audit")
		r := runCLI(t, append(base, "--data", "not json")...)
		second := jsonOf(t, r, "POST /v1/audit")
		if r.code != 0 || second["seq"] != float64(2) {
			t.Fatalf("append of data that is not JSON: %+v", r)
		}
		if got, _ := second["data_base64"].(string); got != base64.StdEncoding.EncodeToString([]byte("not json")) || second["data"] != nil {
			t.Errorf("data that is not JSON: %v; want data_base64 only", second)
		}
		if first["prev_mac"] != "" || second["prev_mac"] != first["mac"] || second["mac"] == first["mac"] {
			t.Errorf("prev_mac: first %v then %v (macs %v, %v); want empty, then the first entry's mac", first["prev_mac"], second["prev_mac"], first["mac"], second["mac"])
		}
	})
}

// TestEdgesAuditVerifyParallelAtItsBound: --parallel 1 verifies; 0 is bad
// input (exit 2, one line), at once, with a chain to verify.
func TestEdgesAuditVerifyParallelAtItsBound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys, ring := writeKeyring(t, dir)
	d := "sqlite:" + filepath.Join(dir, "r.db")
	db := testdb.Open(t, d, nil)
	l, _ := audit.New(db, ring)
	appendLogins(t, l, db, "orders", "billing")
	if r := runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--parallel", "1"); r.code != 0 || strings.Count(r.stdout, "intact") != 2 {
		t.Fatalf("--parallel 1: %+v", r)
	}
	done := make(chan result, 1)
	go func() { done <- runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--parallel", "0") }()
	select {
	case r := <-done:
		if r.code != exitAuditFailed || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "parallel") {
			t.Fatalf("--parallel 0: %+v; want exit 2, one line naming --parallel", r)
		}
	case <-time.After(time.Minute): // a guard: it answers at once, or never
		t.Fatal("--parallel 0 did not return")
	}
}

// TestEdgesServerCommandsRefuseFlagsTheyWouldIgnore: with --server, a flag
// that only the database reads (--db, --tenant, --checkpoint), or one the
// call cannot carry (token issue --refresh with a code's --purpose), is
// bad input, exit 2 with one line, and nothing is sent: the command never
// does something other than what it was told, on another store or tenant.
// It also checks what a client command prints of a claim no longer live.
func TestEdgesServerCommandsRefuseFlagsTheyWouldIgnore(t *testing.T) {
	t.Parallel()
	_, ring := writeKeyring(t, t.TempDir())
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		srv := httptest.NewServer(server.New(db, server.Options{AuditKeys: ring}).Handler())
		defer srv.Close()
		other := "sqlite:" + filepath.Join(t.TempDir(), "other.db")
		cpFile := filepath.Join(t.TempDir(), "cps.jsonl")
		if err := os.WriteFile(cpFile, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		l, _ := audit.New(db, ring)
		for _, args := range [][]string{
			{"audit", "verify", "--scope", "orders", "--checkpoint", cpFile},
			{"audit", "append", "--scope", "orders", "--actor", "alice", "--action", "login", "--tenant", "acme"},
			{"audit", "append", "--scope", "orders", "--actor", "alice", "--action", "login", "--db", other},
			{"seq", "next", "invoices", "2026", "--db", other},
			{"seq", "next", "invoices", "2026", "--tenant", "acme"},
			{"quota", "consume", "u1", "--rate", "1", "--burst", "1", "--db", other},
			{"quota", "consume", "u1", "--rate", "1", "--burst", "1", "--tenant", "acme"},
			{"token", "issue", "--refresh", "--purpose", "email-verify", "--subject", "u1"},
		} {
			r := runCLI(t, append(args, "--server", srv.URL)...)
			if r.code != exitUsage || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("%v --server: %+v; want exit 2, one line", args, r)
			}
		}
		if _, err := os.Stat(strings.TrimPrefix(other, "sqlite:")); err == nil {
			t.Error("a command with --server and --db created the database --db names")
		}
		if n, err := l.Length(ctx, "orders"); err != nil || n != 0 {
			t.Errorf("orders after refused appends: %d entries, %v; want none", n, err)
		}
		for _, args := range [][]string{{"seq", "current", "invoices", "2026"}, {"quota", "consume", "u1", "--rate", "1", "--burst", "1"}} {
			r := runCLI(t, append(args, "--server", srv.URL, "--format", "json")...)
			if r.code != 0 || !strings.Contains(r.stdout, `"current":0`) && !strings.Contains(r.stdout, `"allowed":true`) {
				t.Errorf("%v after the refusals: %+v; want nothing taken or charged before", args, r)
			}
		}

		// The refusal's retry_after_ms is in milliseconds: about an hour's.
		hourly := []string{"quota", "consume", "u2", "--rate", "1", "--per", "1h", "--burst", "1", "--server", srv.URL, "--format", "json"}
		if r := runCLI(t, hourly...); r.code != 0 {
			t.Fatalf("quota consume: %+v", r)
		}
		r := runCLI(t, hourly...)
		if m := jsonOf(t, r, "POST /v1/quotas/{key}/consume"); r.code != exitHeld || m["allowed"] != false {
			t.Fatalf("quota consume over the limit: %+v", r)
		} else if ms, _ := m["retry_after_ms"].(float64); ms < 3_500_000 || ms > 3_600_000 {
			t.Errorf("retry_after_ms %v after a charge of 1 per hour; want about 3,600,000", m["retry_after_ms"])
		}

		if r := runCLI(t, "claim", "acquire", "job", "--holder", "w1", "--ttl", "1m", "--server", srv.URL); r.code != 0 {
			t.Fatalf("claim acquire: %+v", r)
		}
		if r := runCLI(t, "claim", "release", "job", "--holder", "w1", "--fence", "1", "--server", srv.URL); r.code != 0 {
			t.Fatalf("claim release: %+v", r)
		}
		r = runCLI(t, "claim", "get", "job", "--server", srv.URL, "--format", "json")
		if m := jsonOf(t, r, "GET /v1/claims/{key}"); r.code != 0 || m["live"] != false || m["holder"] != "w1" {
			t.Fatalf("claim get of a released claim: %+v; want live false", r)
		}
	})
}

// TestEdgesSeqNextExhausted: seq next on a counter at the largest BIGINT
// exits 3 (exhausted), not 1 (the database failed), on the database and
// over HTTP, with one line, and takes nothing.
func TestEdgesSeqNextExhausted(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		db := testdb.Open(t, d, nil)
		srv := httptest.NewServer(server.New(db, server.Options{}).Handler())
		defer srv.Close()
		if r := runCLI(t, "seq", "next", "invoices", "2026", "--db", d); r.code != 0 {
			t.Fatalf("seq next: %+v", r)
		}
		testdb.ExecAll(t, db, fmt.Sprintf(`UPDATE racefree_sequences SET last = %d`, int64(math.MaxInt64)))
		for _, where := range [][]string{{"--db", d}, {"--server", srv.URL}} {
			r := runCLI(t, append([]string{"seq", "next", "invoices", "2026"}, where...)...)
			if r.code != exitExhausted || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "exhausted") {
				t.Errorf("seq next %s of an exhausted counter: %+v; want exit 3, one line", where[0], r)
			}
		}
		if r := runCLI(t, "seq", "current", "invoices", "2026", "--db", d); r.code != 0 || r.stdout != fmt.Sprintf("invoices/2026: %d\n", int64(math.MaxInt64)) {
			t.Errorf("seq current after: %+v", r)
		}
	})
}

// TestEdgesUniqueCheckEveryIndexOfAMigration: unique-check --migration
// exits 1 when any index the migration adds has duplicates, the second as
// well as the first; --migration with --where (which only --table reads)
// is bad input, as is --limit 0; --limit 1 lists one group and still
// counts them all.
func TestEdgesUniqueCheckEveryIndexOfAMigration(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		db := testdb.Open(t, dsn, nil)
		testdb.ExecAll(t, db, `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT, phone TEXT)`,
			`INSERT INTO users VALUES (1, 'a@x.io', '1'), (2, 'a@x.io', '2'), (3, 'b@x.io', '3'), (4, 'b@x.io', '4')`)
		mig := filepath.Join(t.TempDir(), "043.sql")
		write(t, mig, "CREATE UNIQUE INDEX users_phone ON users (phone);\nCREATE UNIQUE INDEX users_email ON users (email);\n")
		r := runCLI(t, "unique-check", "--db", dsn, "--migration", mig)
		if r.code != exitDuplicates || !strings.Contains(r.stdout, "043.sql:1") || !strings.Contains(r.stdout, "043.sql:2") || !strings.Contains(r.stderr, "1 of 2 checks found duplicates") {
			t.Fatalf("a migration whose second index has duplicates: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		for _, args := range [][]string{
			{"--migration", mig, "--where", "phone IS NOT NULL"},
			{"--table", "users", "--key", "email", "--limit", "0"},
			{"--table", "users", "--key", "email", "--limit", "-2"},
		} {
			r := runCLI(t, append([]string{"unique-check", "--db", dsn}, args...)...)
			if r.code != exitFailed || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("%v: %+v; want exit 2, one line", args, r)
			}
		}
		r = runCLI(t, "unique-check", "--db", dsn, "--table", "users", "--key", "email", "--limit", "1", "--format", "json")
		var rep struct {
			DuplicateGroups int64             `json:"duplicate_groups"`
			Groups          []json.RawMessage `json:"groups"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != exitDuplicates || rep.DuplicateGroups != 2 || len(rep.Groups) != 1 {
			t.Fatalf("--limit 1: %+v (%+v, %v); want 2 groups counted, 1 listed", r, rep, err)
		}
	})
}

// TestEdgesMigrateUpAtItsBounds: migrate up --to takes the last version
// (and, with --app-role, exactly the row-level-security migration the
// grant needs), and a role refused by --app-role leaves the schema
// unmigrated, as the command says.
func TestEdgesMigrateUpAtItsBounds(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		engine, err := dsn.Engine(d)
		if err != nil {
			t.Fatal(err)
		}
		defer engine.SQL().Close()
		ms, err := racefree.LoadMigrations(engine.Migrations())
		if err != nil {
			t.Fatal(err)
		}
		last := ms[len(ms)-1].Version
		if last < 12 {
			t.Fatalf("the last migration's version: %d", last)
		}
		if r := runCLI(t, "migrate", "up", "--db", d, "--to", fmt.Sprint(last)); r.code != 0 || r.stdout != fmt.Sprintf("schema at version %d\n", last) {
			t.Fatalf("migrate up --to %d, the last: %+v", last, r)
		}
		if r := runCLI(t, "migrate", "up", "--db", d, "--to", fmt.Sprint(last+1)); r.code == 0 || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "--to") {
			t.Fatalf("migrate up --to %d, one past the last: %+v", last+1, r)
		}
	})

	d := testdb.NewDSN(t, racefree.Postgres)
	if r := runCLI(t, "migrate", "up", "--db", d, "--app-role", "postgres"); r.code == 0 || !strings.Contains(r.stderr, "superuser") {
		t.Fatalf("--app-role postgres: %+v; want it refused", r)
	}
	r := runCLI(t, "migrate", "status", "--db", d)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) < 2 {
		t.Fatalf("migrate status after a refused --app-role: %+v", r)
	}
	for _, l := range lines[1:] {
		if !strings.HasSuffix(l, "pending") {
			t.Fatalf("migrate status after a refused --app-role: %q applied; want every migration pending", l)
		}
	}
	app := userOf(t, newAppRole(t, d))
	r = runCLI(t, "migrate", "up", "--db", d, "--to", fmt.Sprint(tenant.KeysVersion), "--app-role", app)
	if r.code != 0 || !strings.HasPrefix(r.stdout, fmt.Sprintf("schema at version %d\ngranted %s ", tenant.KeysVersion, app)) {
		t.Fatalf("migrate up --to %d --app-role: %+v; want migrated to it and granted", tenant.KeysVersion, r)
	}
}

// TestEdgesOutboxCommandsNameTheirMessages: a repair names its messages:
// over HTTP (--server), which repairs one id at a time, a redrive or
// discard with no id is bad input, not a success that did nothing; 0 is
// no message id for list, redrive or discard (bad input exits 2, as
// docs/outbox.md says); and enqueue refuses a header given twice, exit 2,
// rather than keep one of its values. Each prints one
// line and changes nothing.
func TestEdgesOutboxCommandsNameTheirMessages(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		db := testdb.Open(t, d, nil)
		srv := httptest.NewServer(server.New(db, server.Options{}).Handler())
		defer srv.Close()
		for _, c := range []struct {
			args []string
			code int
		}{
			{[]string{"outbox", "dead", "redrive", "--server", srv.URL}, exitUsage},
			{[]string{"outbox", "dead", "discard", "--server", srv.URL}, exitUsage},
			{[]string{"outbox", "dead", "list", "0", "--db", d}, exitUsage},
			{[]string{"outbox", "dead", "redrive", "0", "--db", d}, exitUsage},
			{[]string{"outbox", "dead", "discard", "0", "--db", d}, exitUsage},
			{[]string{"outbox", "enqueue", "mail", "--db", d, "--header", "X-Trace=1", "--header", "X-Trace=2"}, exitUsage},
		} {
			r := runCLI(t, c.args...)
			if r.code != c.code || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "invalid") {
				t.Errorf("%v: %+v; want exit %d, one line", c.args, r, c.code)
			}
		}
		var n int
		if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM racefree_outbox`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d messages stored (%v), want none", n, err)
		}
	})
}
