package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestAuditPruneWithAndWithoutCheckpointFile: audit prune without
// --checkpoint prunes an intact chain; with --checkpoint FILE it verifies
// against the exported checkpoints instead, so a tail cut off together with
// its head row and the stored checkpoints, which the database alone cannot
// reveal, is exit 1 (truncated) and nothing is deleted, while an intact
// chain anchored by the file is pruned through its last entry (the
// previous pruning's); one past the last entry is exit 2 with one line.
func TestAuditPruneWithAndWithoutCheckpointFile(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		dir := t.TempDir()
		keys, ring := writeKeyring(t, dir)
		db := testdb.Open(t, d, nil)
		l, _ := audit.New(db, ring)
		var cps []audit.Checkpoint
		for _, s := range []string{"a", "b"} {
			appendLogins(t, l, db, s, s, s, s, s)
			cp, err := l.Checkpoint(ctx, db, s)
			if err != nil {
				t.Fatal(err)
			}
			cps = append(cps, cp)
		}
		var file bytes.Buffer
		if err := audit.WriteCheckpoints(&file, cps...); err != nil {
			t.Fatal(err)
		}
		cpFile := filepath.Join(dir, "checkpoints.jsonl")
		if err := os.WriteFile(cpFile, file.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}

		r := runCLI(t, "audit", "prune", "--db", d, "--keys", keys, "--scope", "a", "--through", "2", "--actor", "ops")
		if r.code != 0 || !strings.Contains(r.stderr, "2 entries deleted") {
			t.Fatalf("prune without --checkpoint: %+v", r)
		}

		// Cut b's tail, entries 4 and 5, with its head row and its stored
		// checkpoint.
		cutAuditTail(t, db, l, "b", true)
		r = runCLI(t, "audit", "prune", "--db", d, "--keys", keys, "--scope", "b", "--through", "2", "--actor", "ops", "--checkpoint", cpFile)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "b: BROKEN at 4: truncated") {
			t.Fatalf("prune --checkpoint of a chain cut short: %+v; want exit 1, truncated at 4", r)
		}
		if n, err := l.Length(ctx, "b"); err != nil || n != 3 {
			t.Fatalf("b after the refused pruning: %d entries, %v; want 3", n, err)
		}

		// a: entries 3..6, 6 the pruning; the file's checkpoint vouches for 5.
		r = runCLI(t, "audit", "prune", "--db", d, "--keys", keys, "--scope", "a", "--through", "7", "--actor", "ops", "--checkpoint", cpFile)
		if r.code != 2 || strings.Count(r.stderr, "\n") != 1 {
			t.Fatalf("prune one past the last entry: %+v; want exit 2 and one line", r)
		}
		r = runCLI(t, "audit", "prune", "--db", d, "--keys", keys, "--scope", "a", "--through", "6", "--actor", "ops", "--checkpoint", cpFile)
		got, err := audit.ReadCheckpoints(strings.NewReader(r.stdout))
		if r.code != 0 || err != nil || len(got) != 1 || got[0].Seq != 7 || !strings.Contains(r.stderr, "4 entries deleted") {
			t.Fatalf("prune --checkpoint through the last entry: %+v (%v)", r, err)
		}
		if res, err := l.Verify(ctx, "a", &audit.VerifyOptions{Checkpoints: got}); err != nil || res.Break != nil || !res.Anchored || res.Rows != 1 {
			t.Fatalf("a after pruning through its last entry: %+v, %v; want entry 7 intact, anchored", res, err)
		}
	})
}

// TestAuditVerifyJudgesAScopeWithoutItsHead: audit verify with no --scope
// verifies a scope whose head row was deleted, found by its entries and
// stored checkpoints: billing, checkpointed, is rolled back (its
// checkpoint counts more than the log), unsigned, never checkpointed, is
// truncated (entries no head row counts), and login, untouched, is intact
// and anchored; the exit status is 1.
func TestAuditVerifyJudgesAScopeWithoutItsHead(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		keys, ring := writeKeyring(t, t.TempDir())
		db := testdb.Open(t, d, nil)
		l, _ := audit.New(db, ring)
		for _, s := range []string{"billing", "login", "unsigned"} {
			appendLogins(t, l, db, s, s, s)
			if s == "unsigned" {
				continue
			}
			if _, err := l.Checkpoint(ctx, db, s); err != nil {
				t.Fatal(err)
			}
		}
		testdb.ExecAll(t, db, `DELETE FROM racefree_audit_heads WHERE scope IN ('billing', 'unsigned')`)
		r := runCLI(t, "audit", "verify", "--db", d, "--keys", keys)
		for _, want := range []string{"billing: BROKEN at 3: rolled_back", "login: intact, 3 entries, anchored", "unsigned: BROKEN at 4: truncated"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("verify with no --scope: missing %q in %q", want, r.stdout)
			}
		}
		if r.code != 1 || strings.Count(r.stdout, "\n") != 3 {
			t.Fatalf("verify with no --scope: %+v; want exit 1 and one line for each of billing, login and unsigned", r)
		}
		// checkpoint with no --scope: login's is taken and printed, the
		// two scopes without a head row are named, and the exit is not 0.
		r = runCLI(t, "audit", "checkpoint", "--db", d, "--keys", keys)
		if r.code == 0 || !strings.Contains(r.stdout, `"login"`) || strings.Contains(r.stdout, `"billing"`) ||
			!strings.Contains(r.stderr, `"billing"`) || !strings.Contains(r.stderr, `"unsigned"`) {
			t.Fatalf("checkpoint with no --scope: %+v; want login's checkpoint on stdout, billing and unsigned named on stderr, exit not 0", r)
		}
	})
}
