package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestAuditVerify: audit verify exits 0 for intact chains, 1 for a broken
// one and 2 for an error; checkpoint exports what verify --checkpoint
// reads; piped, nothing but the result is printed.
func TestAuditVerify(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		dir := t.TempDir()
		keys, ring := keygenKeyring(t, dir)
		db := testdb.Open(t, d, nil)
		l, _ := audit.New(db, ring)
		appendLogins(t, l, db, "acme", "globex", "acme")
		r := runCLI(t, "audit", "verify", "--db", d, "--keys", keys)
		if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "acme: intact, 2 entries, no stored checkpoints") || !strings.Contains(r.stdout, "\nglobex: intact, 1 entries") {
			t.Fatalf("verify: %+v", r)
		}
		r = runCLI(t, "audit", "checkpoint", "--db", d, "--keys", keys)
		if r.code != 0 || strings.Count(r.stdout, "\n") != 2 {
			t.Fatalf("checkpoint: %+v", r)
		}
		cpFile := filepath.Join(dir, "checkpoints.jsonl")
		if err := os.WriteFile(cpFile, []byte(r.stdout), 0o600); err != nil {
			t.Fatal(err)
		}
		r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--checkpoint", cpFile, "--format", "json", "--scope", "acme")
		var res audit.Result
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &res) != nil || !res.Anchored || res.Rows != 2 || res.Scope != "acme" {
			t.Fatalf("verify --checkpoint --format json: %+v (%+v)", r, res)
		}
		forgeActor(t, db, "scope = 'globex'")
		r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys)
		if r.code != 1 || !strings.Contains(r.stdout, "globex: BROKEN at 1: modified") || !strings.Contains(r.stdout, "acme: intact") {
			t.Fatalf("verify of a modified chain: %+v", r)
		}
		for _, args := range [][]string{
			{"audit", "verify", "--db", d, "--keys", keys, "--format", "xml"},
			{"audit", "verify", "--db", d, "--keys", filepath.Join(dir, "missing.keys")},
			{"audit", "verify", "--db", d, "--keys", keys, "--checkpoint", filepath.Join(dir, "missing.jsonl")},
			{"audit", "verify", "--db", d, "--keys", keys, "--no-such-flag"},
		} {
			if r := runCLI(t, args...); r.code != 2 || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("%v: %+v; want exit 2 and one line", args[2:], r)
			}
		}
	})
}

// TestAuditPerTenant: audit verify and checkpoint read one tenant's chains
// (--tenant, default "default"): the same scope of two tenants is two
// chains, checkpoints carry their tenant, verify --checkpoint leaves out
// other tenants' checkpoints, a broken chain of one tenant fails only its
// verify, and a malformed tenant is an error (exit 2).
func TestAuditPerTenant(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		dir := t.TempDir()
		keys, ring := writeKeyring(t, dir)
		db := testdb.Open(t, d, nil)
		l, _ := audit.New(db, ring)
		acme, err := tenant.With(context.Background(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []struct {
			ctx   context.Context
			scope string
			n     int
		}{{context.Background(), "orders", 1}, {acme, "orders", 3}, {acme, "billing", 1}} {
			for range a.n {
				if _, err := l.Append(a.ctx, db, a.scope, audit.Entry{Actor: "alice", Action: "login"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		r := runCLI(t, "audit", "verify", "--db", d, "--keys", keys)
		if r.code != 0 || r.stdout != "orders: intact, 1 entries, no stored checkpoints: a chain cut short cannot be detected\n" {
			t.Fatalf("verify of the default tenant: %+v", r)
		}
		r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--tenant", "acme")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "billing: intact, 1 entries") || !strings.Contains(r.stdout, "\norders: intact, 3 entries") {
			t.Fatalf("verify --tenant acme: %+v", r)
		}
		var file bytes.Buffer
		for _, tn := range []string{"default", "acme"} {
			r = runCLI(t, "audit", "checkpoint", "--db", d, "--keys", keys, "--tenant", tn)
			cps, err := audit.ReadCheckpoints(strings.NewReader(r.stdout))
			if r.code != 0 || err != nil {
				t.Fatalf("checkpoint --tenant %s: %+v, %v", tn, r, err)
			}
			for _, c := range cps {
				if c.Tenant != tn {
					t.Fatalf("checkpoint --tenant %s printed a checkpoint of %q", tn, c.Tenant)
				}
			}
			if want := map[string]int{"default": 1, "acme": 2}[tn]; len(cps) != want {
				t.Fatalf("checkpoint --tenant %s: %d checkpoints; want %d", tn, len(cps), want)
			}
			file.WriteString(r.stdout)
		}
		cpFile := filepath.Join(dir, "checkpoints.jsonl")
		if err := os.WriteFile(cpFile, file.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		for tn, want := range map[string]map[string]int64{"default": {"orders": 1}, "acme": {"orders": 3, "billing": 1}, "globex": {}} {
			r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--tenant", tn, "--checkpoint", cpFile, "--format", "json")
			dec := json.NewDecoder(strings.NewReader(r.stdout))
			got := map[string]int64{}
			for dec.More() {
				var res audit.Result
				if err := dec.Decode(&res); err != nil || res.Tenant != tn || !res.Anchored || !res.Intact() {
					t.Fatalf("verify --tenant %s --checkpoint: %+v, %v (%+v)", tn, res, err, r)
				}
				got[res.Scope] = res.Rows
			}
			if r.code != 0 || len(got) != len(want) {
				t.Fatalf("verify --tenant %s --checkpoint: %+v; want %v", tn, r, want)
			}
			for s, n := range want {
				if got[s] != n {
					t.Fatalf("verify --tenant %s --checkpoint: %v; want %v", tn, got, want)
				}
			}
		}
		forgeActor(t, db, "tenant = 'acme' AND scope = 'orders' AND seq = 2")
		if r := runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--tenant", "acme"); r.code != 1 || !strings.Contains(r.stdout, "orders: BROKEN at 2: modified") {
			t.Fatalf("verify --tenant acme of a modified chain: %+v", r)
		}
		if r := runCLI(t, "audit", "verify", "--db", d, "--keys", keys); r.code != 0 {
			t.Fatalf("verify of the default tenant beside acme's modified chain: %+v", r)
		}
		for _, args := range [][]string{
			{"audit", "verify", "--db", d, "--keys", keys, "--tenant", "no such tenant"},
			{"audit", "verify", "--db", d, "--keys", keys, "--tenant", ""},
		} {
			if r := runCLI(t, args...); r.code != 2 || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("%v: %+v; want exit 2 and one line", args[2:], r)
			}
		}
		if r := runCLI(t, "audit", "checkpoint", "--db", d, "--keys", keys, "--tenant=-x"); r.code == 0 || r.stdout != "" {
			t.Errorf("checkpoint --tenant=-x: %+v; want an error", r)
		}
	})
}

// TestAuditVerifyProgress: on a terminal, verify draws rows, rows/s and an
// ETA on stderr; piped, stderr stays empty.
func TestAuditVerifyProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.SQLite)
	db := testdb.Open(t, d, nil)
	keys, ring := writeKeyring(t, t.TempDir())
	l, _ := audit.New(db, ring)
	for range 3 {
		if _, err := l.Append(ctx, db, "s", audit.Entry{Actor: "a", Action: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tty := range []bool{true, false} {
		var out, errb bytes.Buffer
		if err := auditVerify(ctx, &out, &errb, tty, d, keys, nil, "", "text", 1, verdict{}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(errb.String(), "3/3 rows") && strings.Contains(errb.String(), "rows/s, ETA"); got != tty || (!tty && errb.Len() > 0) {
			t.Fatalf("tty=%v: stderr %q", tty, errb.String())
		}
		if !strings.HasPrefix(out.String(), "s: intact, 3 entries") {
			t.Fatalf("tty=%v: stdout %q", tty, out.String())
		}
	}
}

// TestAuditPrune: audit prune verifies the scope, deletes its oldest
// entries, records the pruning in the chain and prints the new
// checkpoint, which verify --checkpoint then accepts; it deletes nothing
// from a broken chain (exit 1), and bad input is one line and exit 2.
func TestAuditPrune(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		dir := t.TempDir()
		keys, ring := keygenKeyring(t, dir)
		db := testdb.Open(t, d, nil)
		l, _ := audit.New(db, ring)
		for range 5 {
			appendLogins(t, l, db, "acme", "globex")
		}
		r := runCLI(t, "audit", "prune", "--db", d, "--keys", keys, "--scope", "acme", "--through", "3", "--actor", "ops")
		cps, err := audit.ReadCheckpoints(strings.NewReader(r.stdout))
		if r.code != 0 || err != nil || len(cps) != 1 || cps[0].Seq != 6 || !strings.Contains(r.stderr, "3 entries deleted") {
			t.Fatalf("prune: %+v (%v)", r, err)
		}
		if rs, err := l.List(ctx, "acme", 0, 10); err != nil || len(rs) != 3 || rs[0].Seq != 4 || rs[2].Action != audit.ActionPruned {
			t.Fatalf("acme after pruning: %+v, %v; want entries 4..6, the last the pruning", rs, err)
		}
		cpFile := filepath.Join(dir, "checkpoints.jsonl")
		if err := os.WriteFile(cpFile, []byte(r.stdout), 0o600); err != nil {
			t.Fatal(err)
		}
		r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--checkpoint", cpFile)
		if r.code != 0 || !strings.Contains(r.stdout, "acme: intact, 3 entries, anchored") || !strings.Contains(r.stdout, "globex: intact, 5 entries") {
			t.Fatalf("verify after pruning: %+v", r)
		}
		forgeActor(t, db, "scope = 'globex' AND seq = 4")
		r = runCLI(t, "audit", "prune", "--db", d, "--keys", keys, "--scope", "globex", "--through", "2", "--actor", "ops")
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "globex: BROKEN at 4: modified") {
			t.Fatalf("prune of a broken chain: %+v", r)
		}
		if n, err := l.Length(ctx, "globex"); err != nil || n != 5 {
			t.Fatalf("globex after a refused pruning: %d entries, %v; want 5", n, err)
		}
		bad := [][]string{
			{"--scope", "acme", "--through", "2", "--actor", "ops"},    // pruned already
			{"--scope", "acme", "--through", "9", "--actor", "ops"},    // past the last entry
			{"--scope", "nothing", "--through", "1", "--actor", "ops"}, // no such scope
		}
		if db.Engine() == racefree.SQLite { // flags, checked before the database is
			bad = append(bad, []string{"--scope", "acme", "--through", "5"}, // no actor
				[]string{"--scope", "acme", "--actor", "ops"},                   // no through
				[]string{"--through", "5", "--actor", "ops"},                    // no scope
				[]string{"--scope", "acme", "--through", "x", "--actor", "ops"}) // not a number
		}
		for _, args := range bad {
			if r := runCLI(t, append([]string{"audit", "prune", "--db", d, "--keys", keys}, args...)...); r.code != 2 || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("prune %v: %+v; want exit 2 and one line", args, r)
			}
		}
	})
}

// TestAuditVerifyUsesStoredCheckpoints: without --checkpoint, audit verify
// verifies against the checkpoints stored in the database, as the server
// does: a tail cut off with the head row cut to match (a valid chain) is
// exit 1, truncated, once a checkpoint was stored before the cut, and a
// prune refuses that chain; a scope with no stored checkpoint is intact,
// exit 0, with a line saying that a chain cut short cannot be detected.
func TestAuditVerifyUsesStoredCheckpoints(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		dir := t.TempDir()
		keys, ring := writeKeyring(t, dir)
		db := testdb.Open(t, d, nil)
		l, _ := audit.New(db, ring)
		appendLogins(t, l, db, "acme", "acme", "acme", "acme", "acme", "globex")
		const none = "no stored checkpoints: a chain cut short cannot be detected"
		r := runCLI(t, "audit", "verify", "--db", d, "--keys", keys)
		if r.code != 0 || r.stdout != "acme: intact, 5 entries, "+none+"\nglobex: intact, 1 entries, "+none+"\n" {
			t.Fatalf("verify with no stored checkpoints: %+v", r)
		}
		if _, err := l.Checkpoint(ctx, db, "acme"); err != nil {
			t.Fatal(err)
		}
		r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys)
		if r.code != 0 || r.stdout != "acme: intact, 5 entries, anchored by a checkpoint\nglobex: intact, 1 entries, "+none+"\n" {
			t.Fatalf("verify with a stored checkpoint of acme: %+v", r)
		}

		// Cut acme's tail, entries 4 and 5, and its head row to match.
		cutAuditTail(t, db, l, "acme", false)
		r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys)
		if r.code != 1 || !strings.HasPrefix(r.stdout, "acme: BROKEN at 4: truncated") || !strings.Contains(r.stdout, "\nglobex: intact, 1 entries, "+none+"\n") {
			t.Fatalf("verify of a chain cut short: %+v; want exit 1, acme truncated at 4", r)
		}
		r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--scope", "acme", "--format", "json")
		var res audit.Result
		if r.code != 1 || json.Unmarshal([]byte(r.stdout), &res) != nil || res.Break == nil || res.Break.Kind != audit.Truncated {
			t.Fatalf("verify --format json of a chain cut short: %+v (%+v)", r, res)
		}
		r = runCLI(t, "audit", "prune", "--db", d, "--keys", keys, "--scope", "acme", "--through", "2", "--actor", "ops")
		if r.code != 1 || !strings.Contains(r.stderr, "truncated") {
			t.Fatalf("prune of a chain cut short: %+v; want exit 1, nothing pruned", r)
		}
		if n, err := l.Length(ctx, "acme"); err != nil || n != 3 {
			t.Fatalf("acme after the refused prune: %d entries, %v; want 3", n, err)
		}
	})
}

// TestAuditVerifyOnAReadOnlyNode: audit verify --db reads only, so on a
// node that accepts no writes (sessions read-only by default, as on a
// hot standby) it decides by the verdict, 0 intact and 1 broken, never 2.
func TestAuditVerifyOnAReadOnlyNode(t *testing.T) {
	t.Parallel()
	d := testdb.NewPostgresDatabase(t)
	dir := t.TempDir()
	keys, ring := keygenKeyring(t, dir)
	db := testdb.Open(t, d, nil)
	l, _ := audit.New(db, ring)
	appendLogins(t, l, db, "acme", "globex", "acme")
	r := runCLI(t, "audit", "checkpoint", "--db", d, "--keys", keys, "--scope", "acme")
	cpFile := filepath.Join(dir, "checkpoints.jsonl")
	if r.code != 0 || os.WriteFile(cpFile, []byte(r.stdout), 0o600) != nil {
		t.Fatalf("checkpoint: %+v", r)
	}
	forgeActor(t, db, "scope = 'globex'")
	_ = db.Close()
	testdb.SetReadOnly(t, d, true)

	r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--scope", "acme", "--checkpoint", cpFile)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "acme: intact, 2 entries") {
		t.Fatalf("verify of an intact chain on a read-only node: %+v, want exit 0", r)
	}
	r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys)
	if r.code != 1 || !strings.Contains(r.stdout, "globex: BROKEN at 1: modified") {
		t.Fatalf("verify of a broken chain on a read-only node: %+v, want exit 1", r)
	}
	r = runCLI(t, "audit", "checkpoint", "--db", d, "--keys", keys, "--scope", "acme")
	if r.code == 0 || !strings.Contains(r.stderr, "read-only") {
		t.Fatalf("checkpoint (a write) on a read-only node: %+v, want a failure naming read-only", r)
	}
}

// TestAuditAppendOnTheDatabase: audit append --db appends to the tenant's
// chain with the keyring, numbered and chained, and verify finds it intact;
// a missing field changes nothing and exits 2.
func TestAuditAppendOnTheDatabase(t *testing.T) {
	t.Parallel()
	keys, _ := writeKeyring(t, t.TempDir())
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		testdb.Open(t, dsn, nil) // migrated
		base := []string{"audit", "append", "--db", dsn, "--keys", keys, "--scope", "orders", "--actor", "alice", "--action", "refund"}
		r := runCLI(t, append(base, "--data", `{"amount":5}`, "--format", "json", "--tenant", "acme")...)
		e := jsonOf(t, r, "POST /v1/audit")
		data, _ := json.Marshal(e["data"])
		mac, _ := e["mac"].(string)
		if mac, err := base64.StdEncoding.DecodeString(mac); err != nil || r.code != 0 || e["seq"] != float64(1) || string(data) != `{"amount":5}` || len(mac) != 32 {
			t.Fatalf("append --format json: %+v (%v)", r, err)
		}
		if r := runCLI(t, append(base, "--tenant", "acme", "--subject", "order-1")...); r.code != 0 || !strings.HasPrefix(r.stdout, "orders: entry 2 at ") || !strings.HasSuffix(r.stdout, " alice refund order-1\n") {
			t.Fatalf("append: %+v", r)
		}
		if r := runCLI(t, "audit", "append", "--db", dsn, "--keys", keys, "--scope", "orders", "--actor", "alice"); r.code != exitUsage || r.stdout != "" {
			t.Fatalf("append without --action: %+v, want exit 2", r)
		}
		r = runCLI(t, "audit", "verify", "--db", dsn, "--keys", keys, "--tenant", "acme", "--format", "json")
		if r.code != 0 || !strings.Contains(r.stdout, `"seq":2`) {
			t.Fatalf("verify after two appends: %+v", r)
		}
		if r := runCLI(t, "audit", "verify", "--db", dsn, "--keys", keys, "--format", "json"); r.code != 0 || strings.Contains(r.stdout, "orders") {
			t.Fatalf("the default tenant's chains after appends to acme's: %+v, want no orders scope", r)
		}
	})
}

// writeKeyring makes an audit keyring (MAC key m1, signing key s1) with
// audit.Keygen, writes it to dir/audit.keys and returns the file's path
// and the keyring.
func writeKeyring(t *testing.T, dir string) (string, *audit.Keyring) {
	t.Helper()
	var text bytes.Buffer
	if err := audit.Keygen(&text, "m1", "s1"); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(dir, "audit.keys")
	if err := os.WriteFile(keys, text.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	ring, err := audit.ParseKeyring(text.String())
	if err != nil {
		t.Fatal(err)
	}
	return keys, ring
}

// keygenKeyring makes the keyring of writeKeyring with the command, audit
// keygen --mac-id m1 --sign-id s1, which must exit 0 and print the MAC
// key m1; it writes what the command printed to dir/audit.keys and
// returns the file's path and the keyring audit.LoadKeyring reads from it.
func keygenKeyring(t *testing.T, dir string) (string, *audit.Keyring) {
	t.Helper()
	r := runCLI(t, "audit", "keygen", "--mac-id", "m1", "--sign-id", "s1")
	if r.code != 0 || !strings.Contains(r.stdout, "mac m1 ") {
		t.Fatalf("keygen: %+v", r)
	}
	keys := filepath.Join(dir, "audit.keys")
	if err := os.WriteFile(keys, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	ring, err := audit.LoadKeyring(keys)
	if err != nil {
		t.Fatal(err)
	}
	return keys, ring
}

// appendLogins appends one entry, alice's login, to each of scopes in
// turn, in the default tenant.
func appendLogins(t *testing.T, l *audit.Log, db *racefree.DB, scopes ...string) {
	t.Helper()
	for _, s := range scopes {
		if _, err := l.Append(context.Background(), db, s, audit.Entry{Actor: "alice", Action: "login"}); err != nil {
			t.Fatal(err)
		}
	}
}

// forgeActor sets the actor of the audit rows that where selects to
// mallory, as someone who can write to the table directly would: first
// it disables the table's triggers (PostgreSQL) or drops the one that
// refuses updates (SQLite).
func forgeActor(t *testing.T, db *racefree.DB, where string) {
	t.Helper()
	ctx := context.Background()
	stmt := `DROP TRIGGER racefree_audit_no_update`
	if db.Engine() == racefree.Postgres {
		stmt = `ALTER TABLE racefree_audit DISABLE TRIGGER USER`
	}
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE racefree_audit SET actor = 'mallory' WHERE `+where); err != nil {
		t.Fatal(err)
	}
}

// cutAuditTail cuts scope's chain after its entry 3, as someone who can
// write to the tables directly would: it deletes the later entries and
// sets the head row to entry 3, so that what is left is a valid chain;
// with checkpoints it also deletes scope's stored checkpoints. On
// PostgreSQL it leaves the trigger that moves the head with each entry
// enabled, so that entries appended after the cut chain on from entry 3.
func cutAuditTail(t *testing.T, db *racefree.DB, l *audit.Log, scope string, checkpoints bool) {
	t.Helper()
	ctx := context.Background()
	rs, err := l.List(ctx, scope, 2, 1)
	if err != nil || len(rs) != 1 {
		t.Fatalf("entry 3: %v, %v", rs, err)
	}
	pg := db.Engine() == racefree.Postgres
	allowDelete := func(table string) string {
		if pg {
			return `ALTER TABLE ` + table + ` DISABLE TRIGGER USER`
		}
		return `DROP TRIGGER ` + table + `_no_delete`
	}
	mac := `X'` + hex.EncodeToString(rs[0].MAC) + `'`
	if pg {
		mac = `'\x` + hex.EncodeToString(rs[0].MAC) + `'::bytea`
	}
	stmts := []string{allowDelete("racefree_audit"), `DELETE FROM racefree_audit WHERE scope = '` + scope + `' AND seq > 3`}
	if checkpoints {
		stmts = append(stmts, allowDelete("racefree_audit_checkpoints"), `DELETE FROM racefree_audit_checkpoints WHERE scope = '`+scope+`'`)
	}
	stmts = append(stmts, `UPDATE racefree_audit_heads SET last_seq = 3, last_mac = `+mac+` WHERE scope = '`+scope+`'`)
	if pg {
		stmts = append(stmts, `ALTER TABLE racefree_audit ENABLE TRIGGER racefree_audit_chain`)
	}
	testdb.ExecAll(t, db, stmts...)
}
