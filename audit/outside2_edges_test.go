package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// keygenRing runs Keygen with mac key id m and sign key id s and parses
// what it wrote, returning the text too.
func keygenRing(t *testing.T, m, s string) (*Keyring, string) {
	t.Helper()
	var buf bytes.Buffer
	if err := Keygen(&buf, m, s); err != nil {
		t.Fatal(err)
	}
	k, err := ParseKeyring(buf.String())
	if err != nil {
		t.Fatalf("keygen's keyring: %v", err)
	}
	return k, buf.String()
}

// TestOutside2EdgesKeygenDrawsEveryKey: every key Keygen writes is drawn
// from crypto/rand: two keyrings share no key, neither sign seed is all
// zeros, and a keyring's mac key is not its sign seed (a sign key anyone
// can know signs checkpoints anyone can forge).
func TestOutside2EdgesKeygenDrawsEveryKey(t *testing.T) {
	t.Parallel()
	a, _ := keygenRing(t, "m", "s")
	b, _ := keygenRing(t, "m", "s")
	seedA, seedB := a.signers["s"].Seed(), b.signers["s"].Seed()
	for _, c := range []struct {
		what string
		x, y []byte
	}{
		{"the sign seeds of two keyrings", seedA, seedB},
		{"the mac keys of two keyrings", a.macs["m"], b.macs["m"]},
		{"a sign seed and the zero seed", seedA, make([]byte, 32)},
		{"a keyring's mac key and its sign seed", a.macs["m"], seedA},
	} {
		if bytes.Equal(c.x, c.y) {
			t.Errorf("%s are the same", c.what)
		}
	}
}

// TestOutside2EdgesKeygenVerifierKeyring: the keyring a verifier that must
// not sign builds from Keygen's output (its mac line and its commented
// verify line, uncommented) verifies the checkpoints the keyring signs: the
// verify line names the sign key's id and its public half.
func TestOutside2EdgesKeygenVerifierKeyring(t *testing.T) {
	t.Parallel()
	full, text := keygenRing(t, "mac-1", "sign-1")
	var lines []string
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "mac "):
			lines = append(lines, line)
		case strings.HasPrefix(line, "# verify "):
			lines = append(lines, strings.TrimPrefix(line, "# "))
		}
	}
	verifier, err := ParseKeyring(strings.Join(lines, "\n"))
	if err != nil || verifier.Signer() != "" || verifier.Current() != "mac-1" {
		t.Fatalf("the verifier's keyring from %q: %v, %v; want mac-1 and no sign key", lines, verifier, err)
	}
	c := Checkpoint{Tenant: tenant.Default, Scope: "s", N: 1, Seq: 3, MAC: bytes.Repeat([]byte{7}, 32), At: time.UnixMilli(1_700_000_000_000).UTC(), Prev: []byte{}, KeyID: full.Signer()}
	c.Sig = ed25519.Sign(full.signers[full.signer], c.signed())
	if _, brk := (&Log{ring: full}).checkCheckpoints(tenant.Default, "s", []Checkpoint{c}); brk != nil {
		t.Fatalf("the signer's own keyring: %v", brk)
	}
	if anchor, brk := (&Log{ring: verifier}).checkCheckpoints(tenant.Default, "s", []Checkpoint{c}); brk != nil || anchor == nil || anchor.Seq != 3 {
		t.Fatalf("the verifier's keyring: anchor %+v, break %v; want the checkpoint of entry 3", anchor, brk)
	}
}

// TestOutside2EdgesKeyringLinesAreTrimmed: a keyring's lines may be
// indented and end in spaces, as in a keyring embedded in YAML or a
// heredoc: an indented comment and a line of blanks are ignored like any
// comment and blank line, and the keys on indented lines load.
func TestOutside2EdgesKeyringLinesAreTrimmed(t *testing.T) {
	t.Parallel()
	text := "  # the audit keys\n    \n\t\n  mac k1 " + keyK1 + "  \n\tsign s1 " + keyS1 + "\t\n   # end\n"
	k, err := ParseKeyring(text)
	if err != nil || k.Current() != "k1" || k.Signer() != "s1" {
		t.Fatalf("an indented keyring: %v, %v; want mac k1 and sign s1", k, err)
	}
	if _, err := ParseKeyring("  mac k1 " + keyK1 + "\n  bad line\n"); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("an indented bad line: %v; want an error naming line 2", err)
	}
}

// failingWriter fails every write.
type failingWriter struct{}

var errDiskFull = errors.New("disk full")

func (failingWriter) Write([]byte) (int, error) { return 0, errDiskFull }

// TestOutside2EdgesWriteCheckpointsReportsAFailedWrite: an export whose
// writer fails (a full disk, a closed pipe) is an error that wraps the
// writer's, never a success with the checkpoints missing.
func TestOutside2EdgesWriteCheckpointsReportsAFailedWrite(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 2)
		cp, err := l.Checkpoint(ctx, db, "s")
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteCheckpoints(failingWriter{}, cp); !errors.Is(err, errDiskFull) {
			t.Fatalf("an export to a failing writer: %v; want its error", err)
		}
		var buf bytes.Buffer
		if err := WriteCheckpoints(&buf, cp, cp); err != nil {
			t.Fatal(err)
		}
		if cs, err := ReadCheckpoints(&buf); err != nil || len(cs) != 2 {
			t.Fatalf("read back: %d checkpoints, %v; want 2", len(cs), err)
		}
	})
}

// TestOutside2EdgesProgressEveryTenThousand: one stream reports its
// progress every 10,000 entries checked, the documented step, and once at
// the end: a chain of 10,001 entries reports 10,000, then 10,001.
func TestOutside2EdgesProgressEveryTenThousand(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		bulkChain(t, l, "s", 10_001)
		var progress []int64
		res := verify(t, l, "s", &VerifyOptions{Streams: 1, Progress: func(n int64) { progress = append(progress, n) }})
		wantIntact(t, res)
		if fmt.Sprint(progress) != "[10000 10001]" {
			t.Fatalf("progress %v; want [10000 10001]: after 10,000 entries, then the 10,001 checked", progress)
		}
	})
}

// TestOutside2EdgesResultsAndRecordsNameTheirTenant: what Verify, VerifyAll
// and List return names the tenant whose chain it is, for the default
// tenant and another, as the record Append returned does.
func TestOutside2EdgesResultsAndRecordsNameTheirTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		for _, tn := range []string{tenant.Default, "acme"} {
			ctx := context.Background()
			if tn != tenant.Default {
				ctx = withTenant(t, tn)
			}
			r, err := l.Append(ctx, db, "s", Entry{Actor: "a", Action: "b"})
			if err != nil || r.Tenant != tn {
				t.Fatalf("append for %s: %+v, %v", tn, r, err)
			}
			rs, err := l.List(ctx, "s", 0, 10)
			if err != nil || len(rs) != 1 || rs[0].Tenant != tn || rs[0].Scope != "s" {
				t.Fatalf("list for %s: %+v, %v; want its one entry, of tenant %s", tn, rs, err, tn)
			}
			if res := verifyIn(ctx, t, l, "s", nil); res.Tenant != tn || res.Scope != "s" || res.Break != nil {
				t.Fatalf("verify for %s: %+v; want intact, of tenant %s", tn, res, tn)
			}
			all, err := l.VerifyAll(ctx, 1, nil)
			if err != nil || len(all) != 1 || all[0].Tenant != tn || all[0].Scope != "s" {
				t.Fatalf("verify all for %s: %+v, %v; want one result, of tenant %s", tn, all, err, tn)
			}
		}
	})
}

// TestOutside2EdgesPrunedScopeVerifiedInParts: a pruned scope appended to
// long after its pruning, so that its pruned entry falls in the first of
// the parts Verify reads at once, verifies intact in parts as in one
// stream: the pruned entry found in any part confirms the floor.
func TestOutside2EdgesPrunedScopeVerifiedInParts(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 6)
		p, err := l.Prune(ctx, db, "s", 3, "ops")
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, l, "s", 24) // entries 8 to 31: the pruned entry 7 is in the first of 4 parts
		res := verifyBoth(t, l, "s", VerifyOptions{Checkpoints: []Checkpoint{p.Checkpoint}}, *parallelOpts(4, 4))
		if res.Break != nil || !res.Anchored || res.Rows != 28 {
			t.Fatalf("a pruned scope verified in parts: %+v (break %+v); want intact, anchored, 28 entries", res, res.Break)
		}
	})
}

// TestOutside2EdgesPruneAnchorsInItsOwnTenant: pruning a scope that
// another tenant also has, at the same numbers, anchors at the pruning
// tenant's own entry, whichever tenant appended first: both prunings
// verify intact, and the other tenant's chains keep every entry.
func TestOutside2EdgesPruneAnchorsInItsOwnTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		def, acme := context.Background(), withTenant(t, "acme")
		l := newLog(t, db, ring(t, "k1"))
		appendIn(acme, t, l, "s", 5) // acme's s first, then the default tenant's
		appendIn(def, t, l, "s", 5)
		appendIn(def, t, l, "t", 5) // the default tenant's t first, then acme's
		appendIn(acme, t, l, "t", 5)
		for _, c := range []struct {
			ctx, other   context.Context
			scope, owner string
		}{{def, acme, "s", "default"}, {acme, def, "t", "acme"}} {
			r3 := entryRowIn(c.ctx, t, l, c.scope, 3)
			p, err := l.Prune(c.ctx, db, c.scope, 3, "ops")
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p.Anchor.MAC, r3.MAC) {
				t.Fatalf("%s's pruning of %s: anchor %+v; want its own entry 3", c.owner, c.scope, p.Anchor)
			}
			res := verifyIn(c.ctx, t, l, c.scope, &VerifyOptions{Checkpoints: []Checkpoint{p.Checkpoint}})
			if res.Break != nil || !res.Anchored || res.Rows != 3 {
				t.Fatalf("%s's %s after its pruning: %+v (break %+v); want intact, anchored, 3 entries", c.owner, c.scope, res, res.Break)
			}
			if res := verifyIn(c.other, t, l, c.scope, nil); res.Break != nil || res.Rows != 5 {
				t.Fatalf("the other tenant's %s: %+v (break %+v); want intact, 5 entries", c.scope, res, res.Break)
			}
		}
	})
}

// entryRowIn returns entry seq of the scope of the tenant ctx names.
func entryRowIn(ctx context.Context, t testing.TB, l *Log, scope string, seq int64) Record {
	t.Helper()
	rs, err := l.List(ctx, scope, seq-1, 1)
	if err != nil || len(rs) != 1 || rs[0].Seq != seq {
		t.Fatalf("entry %d of %s: %+v, %v", seq, scope, rs, err)
	}
	return rs[0]
}

// TestOutside2EdgesRotationEntryNamesTheNewKey: the rotation entry Append
// writes when the keyring's current key changes is by racefree, under the
// retired key, its subject the new key's id and its data the link from the
// retired key to the new one, as ActionKeyRotated documents.
func TestOutside2EdgesRotationEntryNamesTheNewKey(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		appendN(t, newLog(t, db, ring(t, "k1")), "s", 2)
		l := newLog(t, db, ring(t, "k1", "k2"))
		appendN(t, l, "s", 1)
		rot := entryRow(t, l, "s", 3)
		if rot.Action != ActionKeyRotated || rot.Actor != "racefree" || rot.KeyID != "k1" || rot.Subject != "k2" || string(rot.Data) != `{"from":"k1","to":"k2"}` {
			t.Fatalf("entry 3: %+v; want the rotation by racefree under k1, subject k2, from k1 to k2", rot)
		}
		wantIntact(t, verify(t, l, "s", nil))
	})
}
