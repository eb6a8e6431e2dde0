package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/internal/testdb"
)

// TestAuditVerify: audit verify exits 0 for intact chains, 1 for a broken
// one and 2 for an error; checkpoint exports what verify --checkpoint
// reads; piped, nothing but the result is printed.
func TestAuditVerify(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		dir := t.TempDir()
		keys := filepath.Join(dir, "audit.keys")
		if r := runCLI(t, "audit", "keygen", "--mac-id", "m1", "--sign-id", "s1"); r.code != 0 || !strings.Contains(r.stdout, "mac m1 ") {
			t.Fatalf("keygen: %+v", r)
		} else if err := os.WriteFile(keys, []byte(r.stdout), 0o600); err != nil {
			t.Fatal(err)
		}
		db := testdb.Open(t, d, nil)
		ring, err := audit.LoadKeyring(keys)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := audit.New(db, ring)
		for _, s := range []string{"acme", "globex", "acme"} {
			if _, err := l.Append(ctx, db, s, audit.Entry{Actor: "alice", Action: "login"}); err != nil {
				t.Fatal(err)
			}
		}
		r := runCLI(t, "audit", "verify", "--db", d, "--keys", keys)
		if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "acme: intact, 2 entries, no checkpoint") || !strings.Contains(r.stdout, "\nglobex: intact, 1 entries") {
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
		if db.Engine() == racefree.Postgres {
			_, err = db.ExecContext(ctx, `ALTER TABLE racefree_audit DISABLE TRIGGER USER`)
		} else {
			_, err = db.ExecContext(ctx, `DROP TRIGGER racefree_audit_no_update`)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `UPDATE racefree_audit SET actor = 'mallory' WHERE scope = 'globex'`); err != nil {
			t.Fatal(err)
		}
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

// TestAuditVerifyProgress: on a terminal, verify draws rows, rows/s and an
// ETA on stderr; piped, stderr stays empty.
func TestAuditVerifyProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.SQLite)
	db := testdb.Open(t, d, nil)
	var keyring bytes.Buffer
	_ = audit.Keygen(&keyring, "m1", "s1")
	keys := filepath.Join(t.TempDir(), "audit.keys")
	if err := os.WriteFile(keys, keyring.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	ring, _ := audit.ParseKeyring(keyring.String())
	l, _ := audit.New(db, ring)
	for range 3 {
		if _, err := l.Append(ctx, db, "s", audit.Entry{Actor: "a", Action: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tty := range []bool{true, false} {
		var out, errb bytes.Buffer
		if err := auditVerify(ctx, &out, &errb, tty, d, keys, nil, "", "text", 1); err != nil {
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
