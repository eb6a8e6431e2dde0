package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestAuditVerifyRequireCheckpoint: audit verify with and without
// --require-checkpoint. Without it a chain no checkpoint anchors is intact,
// exit 0, its line saying so; with it the same lines are printed and the
// exit is 1 with one line on stderr naming exactly the unanchored scopes:
// both before any checkpoint, the one left after the other's checkpoint,
// none (exit 0) once each has one, also with --format json and --strict.
// With --checkpoint FILE only the file's checkpoints anchor (one scope of
// two: exit 1 naming the other; --scope of the anchored one: exit 0). A
// broken chain next to an unanchored one exits 1 naming both. Over HTTP
// (--server) the verification's anchored member decides the same way. A
// tenant with no chain at all exits 1 with the flag, 0 without.
func TestAuditVerifyRequireCheckpoint(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		dir := t.TempDir()
		keys, ring := writeKeyring(t, dir)
		db := testdb.Open(t, d, nil)
		l, _ := audit.New(db, ring)
		appendLogins(t, l, db, "acme", "acme", "globex")
		base := []string{"audit", "verify", "--db", d, "--keys", keys}
		verify := func(flags ...string) result {
			t.Helper()
			return runCLI(t, append(append([]string{}, base...), flags...)...)
		}
		// names reports whether stderr is one line naming exactly scopes
		// of acme, globex and initech.
		names := func(r result, scopes ...string) bool {
			if strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "--require-checkpoint") {
				return false
			}
			for _, s := range []string{"acme", "globex", "initech"} {
				if strings.Contains(r.stderr, `"`+s+`"`) != strings.Contains(strings.Join(scopes, " "), s) {
					return false
				}
			}
			return true
		}

		const none = "no stored checkpoints: a chain cut short cannot be detected"
		lines := "acme: intact, 2 entries, " + none + "\nglobex: intact, 1 entries, " + none + "\n"
		if r := verify(); r.code != 0 || r.stdout != lines || r.stderr != "" {
			t.Fatalf("verify of unanchored chains without --require-checkpoint: %+v; want exit 0", r)
		}
		if r := verify("--require-checkpoint"); r.code != exitAuditUnanchored || r.stdout != lines || !names(r, "acme", "globex") {
			t.Fatalf("verify --require-checkpoint of two unanchored chains: %+v; want exit 1, the same lines and one line naming acme and globex", r)
		}

		cp, err := l.Checkpoint(ctx, db, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if r := verify("--require-checkpoint"); r.code != exitAuditUnanchored || !strings.HasPrefix(r.stdout, "acme: intact, 2 entries, anchored") || !names(r, "globex") {
			t.Fatalf("verify --require-checkpoint with acme checkpointed: %+v; want exit 1 naming globex alone", r)
		}
		if r := verify("--require-checkpoint", "--scope", "acme"); r.code != 0 || r.stderr != "" {
			t.Fatalf("verify --require-checkpoint --scope acme, anchored: %+v; want exit 0", r)
		}
		if r := verify("--require-checkpoint", "--scope", "globex", "--format", "json"); r.code != exitAuditUnanchored || !strings.Contains(r.stdout, `"anchored":false`) || !names(r, "globex") {
			t.Fatalf("verify --require-checkpoint --scope globex --format json: %+v; want exit 1 naming globex", r)
		}

		// Over HTTP: the server verifies against its stored checkpoints
		// and answers anchored, which decides the exit status.
		srv := httptest.NewServer(server.New(db, server.Options{AuditKeys: ring}).Handler())
		defer srv.Close()
		viaServer := []string{"audit", "verify", "--server", srv.URL, "--scope", "acme", "--scope", "globex"}
		if r := runCLI(t, viaServer...); r.code != 0 {
			t.Fatalf("verify --server without --require-checkpoint: %+v; want exit 0", r)
		}
		if r := runCLI(t, append(viaServer, "--require-checkpoint")...); r.code != exitAuditUnanchored || !names(r, "globex") {
			t.Fatalf("verify --server --require-checkpoint: %+v; want exit 1 naming globex alone", r)
		}

		// Against a file holding acme's checkpoint alone.
		cpFile := filepath.Join(dir, "checkpoints.jsonl")
		f, err := os.Create(cpFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := audit.WriteCheckpoints(f, cp); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if r := verify("--checkpoint", cpFile); r.code != 0 || !strings.Contains(r.stdout, "globex: intact, 1 entries, no checkpoint") {
			t.Fatalf("verify --checkpoint of acme's checkpoint: %+v; want exit 0", r)
		}
		if r := verify("--checkpoint", cpFile, "--require-checkpoint"); r.code != exitAuditUnanchored || !names(r, "globex") {
			t.Fatalf("verify --checkpoint --require-checkpoint, acme's checkpoint alone: %+v; want exit 1 naming globex", r)
		}
		if r := verify("--checkpoint", cpFile, "--require-checkpoint", "--scope", "acme"); r.code != 0 || r.stderr != "" {
			t.Fatalf("verify --checkpoint --require-checkpoint --scope acme: %+v; want exit 0", r)
		}

		if _, err := l.Checkpoint(ctx, db, "globex"); err != nil {
			t.Fatal(err)
		}
		for _, flags := range [][]string{{"--require-checkpoint"}, {"--require-checkpoint", "--format", "json"}, {"--require-checkpoint", "--strict"}, {"--require-checkpoint", "--parallel", "1"}} {
			if r := verify(flags...); r.code != 0 || r.stderr != "" || strings.Count(r.stdout, "\n") != 2 {
				t.Errorf("verify %q with every chain anchored: %+v; want exit 0, two lines", flags, r)
			}
		}
		if r := runCLI(t, append(viaServer, "--require-checkpoint")...); r.code != 0 {
			t.Fatalf("verify --server --require-checkpoint with every chain anchored: %+v; want exit 0", r)
		}

		// A tenant with no chain at all: nothing is anchored, and a log
		// deleted whole would read the same, so --require-checkpoint
		// exits 1 (without it, exit 0 and no line).
		if r := verify("--tenant", "nochain"); r.code != 0 || r.stdout != "" || r.stderr != "" {
			t.Fatalf("verify of a tenant with no chain without --require-checkpoint: %+v; want exit 0, nothing printed", r)
		}
		for _, flags := range [][]string{{"--require-checkpoint"}, {"--require-checkpoint", "--format", "json"}} {
			r := verify(append([]string{"--tenant", "nochain"}, flags...)...)
			if r.code != exitAuditUnanchored || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "no audit chain") || !strings.Contains(r.stderr, "--require-checkpoint") {
				t.Fatalf("verify %q of a tenant with no chain: %+v; want exit 1, one line on stderr", flags, r)
			}
		}

		// A broken chain next to an unanchored one: exit 1, both said.
		appendLogins(t, l, db, "initech")
		forgeActor(t, db, "scope = 'globex'")
		if r := verify(); r.code != exitAuditBroken || !strings.Contains(r.stdout, "globex: BROKEN at 1: modified") || strings.Contains(r.stderr, "initech") {
			t.Fatalf("verify of a broken chain without --require-checkpoint: %+v; want exit 1, initech not named", r)
		}
		r := verify("--require-checkpoint")
		if r.code != exitAuditBroken || !strings.Contains(r.stderr, "1 of 3 audit chains broken") || !names(r, "initech") {
			t.Fatalf("verify --require-checkpoint of a broken chain and an unanchored one: %+v; want exit 1 saying one broken and naming initech", r)
		}
	})
}
