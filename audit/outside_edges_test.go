package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestOutsideEdgesReservedActionsRefused: a caller's entry may carry none
// of the actions racefree writes itself, the timeline entry's included
// (Verify would report a failover that never happened); each is an
// InputError and writes nothing, by Append and by AppendKeyed's checks.
func TestOutsideEdgesReservedActionsRefused(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 1)
		data := timelineEntry(1, 2, 1).Data
		for _, action := range []string{ActionTimelineChanged, ActionKeyRotated, ActionPruned} {
			if _, err := l.Append(ctx, db, "s", Entry{Actor: "racefree", Action: action, Subject: "2", Data: data}); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("append of a %s entry: %v; want ErrInvalidInput", action, err)
			}
		}
		if n, err := l.Length(ctx, "s"); err != nil || n != 1 {
			t.Fatalf("length after the refused appends: %d, %v; want 1", n, err)
		}
		res := verify(t, l, "s", nil)
		wantIntact(t, res)
		if len(res.PossibleLoss) != 0 || len(res.Warnings) != 0 {
			t.Fatalf("verify: %+v; want no possible loss", res)
		}
	})
}

// TestOutsideEdgesCheckpointGoingBackIsBad: a checkpoint, signed with the
// sign key, numbered next and chained by hash to the one before, that
// vouches for an earlier entry than that one is bad_checkpoint: checkpoints
// only move forward along the chain.
func TestOutsideEdgesCheckpointGoingBackIsBad(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 3)
		cp1, err := l.Checkpoint(ctx, db, "s")
		if err != nil {
			t.Fatal(err)
		}
		back := cp1
		back.N, back.Seq, back.MAC, back.Prev = 2, 2, entryRow(t, l, "s", 2).MAC, cp1.Hash()
		back.Sig = ed25519.Sign(l.ring.signers[l.ring.signer], back.signed())
		wantBreak(t, verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp1, back}}), BadCheckpoint, 2)
		// The same checkpoint at the entry of the one before (no append
		// between them) is a chain.
		same := cp1
		same.N, same.Prev = 2, cp1.Hash()
		same.Sig = ed25519.Sign(l.ring.signers[l.ring.signer], same.signed())
		if res := verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp1, same}}); res.Break == nil || res.Break.Kind != RolledBack {
			t.Fatalf("a second checkpoint of the same entry the log does not count: %+v; want rolled back, not bad", res)
		}
	})
}

// TestOutsideEdgesChainOfOneEntryWithoutItsHead: a scope of a single entry
// whose head row was deleted is truncated, as a longer one is: no head row
// counts its entry.
func TestOutsideEdgesChainOfOneEntryWithoutItsHead(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "one", 1)
		appendN(t, l, "two", 2)
		tamper(t, db, `DELETE FROM racefree_audit_heads WHERE scope IN ('one', 'two')`)
		wantBreak(t, verify(t, l, "one", nil), Truncated, 2)
		wantBreak(t, verify(t, l, "two", nil), Truncated, 3)
	})
}

// TestOutsideEdgesRotationEntryMustLinkItsKeys: a rotation entry written
// with the key (its MAC and the chain after it valid) that names no next
// key, or that names another key than the one it is under as the key it
// leaves, is modified at it; the entries after it are not accepted under
// whatever key they carry.
func TestOutsideEdgesRotationEntryMustLinkItsKeys(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		for _, c := range []struct{ scope, data string }{
			{"to-nothing", `{"from":"k1","to":""}`},
			{"from-another", `{"from":"k2","to":"k2"}`},
		} {
			appendN(t, newLog(t, db, ring(t, "k1")), c.scope, 4)
			l := newLog(t, db, ring(t, "k1", "k2"))
			wantIntact(t, verify(t, l, c.scope, nil))
			tamperIn(t, db, "default", c.scope, `UPDATE racefree_audit SET action = '`+ActionKeyRotated+`', subject = 'k2', data = `+blob(db, []byte(c.data))+` WHERE scope = %[2]s AND seq = 2`)
			reMAC(t, l, c.scope, 2, 4, entryRow(t, l, c.scope, 1).MAC, map[int64]string{3: "k2", 4: "k2"})
			wantBreak(t, verify(t, l, c.scope, nil), Modified, 2)
		}
	})
}

// TestOutsideEdgesFloorKeyEpochBlankedIsMissing: a pruned scope whose
// head's floor key epoch was blanked by hand (the floor's number and MAC
// left as the pruning set them) is missing at the floor: the pruned entry
// records another epoch, and the entries after the floor are not accepted
// under any key.
func TestOutsideEdgesFloorKeyEpochBlankedIsMissing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 6)
		if _, err := l.Prune(ctx, db, "s", 3, "ops"); err != nil {
			t.Fatal(err)
		}
		wantIntact(t, verify(t, l, "s", nil))
		tamper(t, db, `UPDATE racefree_audit_heads SET floor_key = '' WHERE scope = 's'`)
		wantBreak(t, verify(t, l, "s", nil), Missing, 3)
	})
}

// TestOutsideEdgesCheckpointsOfTwoScopesChainApart: checkpoints of two
// scopes of one tenant taken in turn, each scope at the same number (the
// scope that sorts first checkpointed second), chain each to its own
// scope's previous checkpoint; both scopes' exported checkpoints anchor
// their chains.
func TestOutsideEdgesCheckpointsOfTwoScopesChainApart(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		cps := map[string][]Checkpoint{}
		for round := range 2 {
			for _, s := range []string{"b", "a"} { // a's checkpoint after b's, at b's number
				appendN(t, l, s, 2)
				cp, err := l.Checkpoint(ctx, db, s)
				if err != nil {
					t.Fatal(err)
				}
				if cp.N != int64(round+1) {
					t.Fatalf("checkpoint of %s in round %d: %+v", s, round, cp)
				}
				if round > 0 && !bytes.Equal(cp.Prev, cps[s][round-1].Hash()) {
					t.Fatalf("checkpoint %d of %s does not chain to its scope's checkpoint %d", cp.N, s, round)
				}
				cps[s] = append(cps[s], cp)
			}
		}
		for _, s := range []string{"a", "b"} {
			res := verify(t, l, s, &VerifyOptions{Checkpoints: cps[s]})
			if res.Break != nil || !res.Anchored || res.Rows != 4 {
				t.Fatalf("%s against its checkpoints: %+v (break %+v); want intact, anchored", s, res, res.Break)
			}
		}
	})
}

// TestOutsideEdgesCheckpointsAfterAndLatestOfEachScope: Checkpoints after
// n returns those numbered after n, not n itself; LatestCheckpoint is each
// scope's own latest, whichever scope of the tenant has more.
func TestOutsideEdgesCheckpointsAfterAndLatestOfEachScope(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "few", 1)
		few, err := l.Checkpoint(ctx, db, "few")
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			appendN(t, l, "many", 1)
			if _, err := l.Checkpoint(ctx, db, "many"); err != nil {
				t.Fatal(err)
			}
		}
		for after, want := range map[int64][]int64{0: {1, 2, 3}, 1: {2, 3}, 2: {3}, 3: nil} {
			cs, err := l.Checkpoints(ctx, "many", after)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, c := range cs {
				got = append(got, c.N)
			}
			if !slices.Equal(got, want) {
				t.Errorf("checkpoints after %d: %v; want %v", after, got, want)
			}
		}
		if got, err := l.LatestCheckpoint(ctx, "few"); err != nil || got.N != 1 || !bytes.Equal(got.Sig, few.Sig) {
			t.Errorf("latest checkpoint of few: %+v, %v; want its checkpoint 1", got, err)
		}
		if got, err := l.LatestCheckpoint(ctx, "many"); err != nil || got.N != 3 || got.Seq != 3 {
			t.Errorf("latest checkpoint of many: %+v, %v; want checkpoint 3", got, err)
		}
	})
}

// TestOutsideEdgesScopesPagePrefixIsLiteral: ScopesPage's prefix is taken
// byte for byte: _ and % in it match only themselves, and letter case
// counts.
func TestOutsideEdgesScopesPagePrefixIsLiteral(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		for _, s := range []string{"a_1", "ab1", "A_2", "a%x", "abx", "Ab"} {
			appendN(t, l, s, 1)
		}
		for prefix, want := range map[string][]string{
			"a_": {"a_1"},
			"a%": {"a%x"},
			"A":  {"A_2", "Ab"},
			"ab": {"ab1", "abx"},
		} {
			got, err := l.ScopesPage(ctx, prefix, "", 10)
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("scopes with prefix %q: %q, %v; want %q", prefix, got, err, want)
			}
		}
	})
}

// TestOutsideEdgesVerifyAllAtItsBounds: VerifyAll with parallel 0 verifies
// one scope at a time (parallel is at least 1) instead of waiting for
// ever; and a scope it cannot verify (one the checkpoints name that is not
// a valid scope) is its error, not an empty result that reads intact.
func TestOutsideEdgesVerifyAllAtItsBounds(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "a", 2)
		appendN(t, l, "b", 3)
		type answer struct {
			res []Result
			err error
		}
		done := make(chan answer, 1)
		go func() {
			res, err := l.VerifyAll(ctx, 0, nil)
			done <- answer{res, err}
		}()
		select {
		case a := <-done:
			if a.err != nil || len(a.res) != 2 || a.res[0].Break != nil || a.res[1].Break != nil || a.res[0].Rows+a.res[1].Rows != 5 {
				t.Fatalf("VerifyAll with parallel 0: %+v, %v; want both scopes intact", a.res, a.err)
			}
		case <-time.After(time.Minute):
			t.Fatal("VerifyAll with parallel 0 has not returned after a minute")
		}
		res, err := l.VerifyAll(ctx, 2, map[string][]Checkpoint{"": nil})
		if !errors.Is(err, racefree.ErrInvalidInput) {
			t.Fatalf("VerifyAll of checkpoints of scope \"\": %+v, %v; want ErrInvalidInput", res, err)
		}
	})
}

// TestOutsideEdgesSignKeyRotation: of several sign keys, the last one
// listed signs, as the last mac key listed is current: after a new sign
// line is added, checkpoints are signed with it, and the chain of
// checkpoints across the two keys verifies.
func TestOutsideEdgesSignKeyRotation(t *testing.T) {
	t.Parallel()
	keyS2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{4}, 32))
	two, err := ParseKeyring("mac k1 " + keyK1 + "\nsign s1 " + keyS1 + "\nsign s2 " + keyS2 + "\n")
	if err != nil || two.Signer() != "s2" {
		t.Fatalf("a keyring with sign keys s1 then s2: %v, %v; want s2 to sign", two, err)
	}
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l1 := newLog(t, db, ring(t, "k1"))
		appendN(t, l1, "s", 1)
		cp1, err := l1.Checkpoint(ctx, db, "s")
		if err != nil {
			t.Fatal(err)
		}
		l2 := newLog(t, db, two)
		appendN(t, l2, "s", 1)
		cp2, err := l2.Checkpoint(ctx, db, "s")
		if err != nil || cp2.KeyID != "s2" {
			t.Fatalf("checkpoint after s2 was added: %+v, %v; want signed by s2", cp2, err)
		}
		res := verify(t, l2, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp1, cp2}})
		if res.Break != nil || !res.Anchored {
			t.Fatalf("verify across the sign keys: %+v", res)
		}
	})
}

// TestOutsideEdgesMissingKeysAreTyped: Append to a scope whose key epoch
// the keyring lacks is ErrUnknownKey and writes nothing; Checkpoint and
// Prune with a keyring that has no sign key are ErrNoSigner (never
// ErrNotFound, which says the scope has no entry) and change nothing.
func TestOutsideEdgesMissingKeysAreTyped(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		appendN(t, newLog(t, db, ring(t, "k1")), "s", 3)
		if _, err := newLog(t, db, ring(t, "k2")).Append(ctx, db, "s", Entry{Actor: "a", Action: "b"}); !errors.Is(err, ErrUnknownKey) {
			t.Fatalf("append without the scope's key: %v; want ErrUnknownKey", err)
		}
		unsigned, err := ParseKeyring("mac k1 " + keyK1 + "\n")
		if err != nil {
			t.Fatal(err)
		}
		l := newLog(t, db, unsigned)
		if _, err := l.Checkpoint(ctx, db, "s"); !errors.Is(err, ErrNoSigner) || errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("checkpoint without a sign key: %v; want ErrNoSigner", err)
		}
		if _, err := l.Prune(ctx, db, "s", 1, "ops"); !errors.Is(err, ErrNoSigner) || errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("prune without a sign key: %v; want ErrNoSigner", err)
		}
		if n, err := l.Length(ctx, "s"); err != nil || n != 3 {
			t.Fatalf("length after the refused calls: %d, %v; want 3", n, err)
		}
		if cs, err := l.Checkpoints(ctx, "s", 0); err != nil || len(cs) != 0 {
			t.Fatalf("checkpoints after the refused calls: %+v, %v; want none", cs, err)
		}
		wantIntact(t, verify(t, l, "s", nil))
	})
}

// TestOutsideEdgesPruneOneScopeOfSeveral: pruning one scope of a tenant
// with other scopes at the same numbers anchors at that scope's own entry,
// deletes only its entries and raises only its floor: it verifies intact,
// and the other scopes keep every entry and verify intact from entry 1.
func TestOutsideEdgesPruneOneScopeOfSeveral(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		for _, s := range []string{"a", "b", "c"} {
			appendN(t, l, s, 6)
		}
		r4 := entryRow(t, l, "b", 4)
		p, err := l.Prune(ctx, db, "b", 4, "ops")
		if err != nil {
			t.Fatal(err)
		}
		if p.Deleted != 4 || !bytes.Equal(p.Anchor.MAC, r4.MAC) {
			t.Fatalf("pruning of b: %+v; want 4 deleted, anchored at b's entry 4", p)
		}
		res := verify(t, l, "b", &VerifyOptions{Checkpoints: []Checkpoint{p.Checkpoint}})
		if res.Break != nil || res.Rows != 3 || !res.Anchored {
			t.Fatalf("b after its pruning: %+v (break %+v); want intact, 3 entries, anchored", res, res.Break)
		}
		for _, s := range []string{"a", "c"} {
			res := verify(t, l, s, nil)
			if res.Break != nil || res.Rows != 6 {
				t.Fatalf("%s after b's pruning: %+v (break %+v); want intact, 6 entries", s, res, res.Break)
			}
			if n, err := l.Length(ctx, s); err != nil || n != 6 {
				t.Fatalf("length of %s after b's pruning: %d, %v; want 6", s, n, err)
			}
		}
	})
}

// TestOutsideEdgesCheckpointsReadBackWhole: checkpoints exported and read
// back verify; an export cut off in the middle of its last line is an
// error, never the checkpoints before it read as the whole export.
func TestOutsideEdgesCheckpointsReadBackWhole(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		var cps []Checkpoint
		for range 2 {
			appendN(t, l, "s", 1)
			cp, err := l.Checkpoint(ctx, db, "s")
			if err != nil {
				t.Fatal(err)
			}
			cps = append(cps, cp)
		}
		var buf bytes.Buffer
		if err := WriteCheckpoints(&buf, cps...); err != nil {
			t.Fatal(err)
		}
		whole := buf.Bytes()
		read, err := ReadCheckpoints(bytes.NewReader(whole))
		if err != nil || len(read) != 2 {
			t.Fatalf("read back: %d checkpoints, %v; want 2", len(read), err)
		}
		res := verify(t, l, "s", &VerifyOptions{Checkpoints: read})
		if res.Break != nil || !res.Anchored {
			t.Fatalf("verify against the checkpoints read back: %+v", res)
		}
		last := len(whole) - bytes.IndexByte(whole, '\n') - 1 // the second line's length, its newline included
		for _, cut := range []int{2, 10, last / 2} {
			if got, err := ReadCheckpoints(bytes.NewReader(whole[:len(whole)-cut])); err == nil {
				t.Errorf("an export cut %d bytes short read as %d checkpoints, no error", cut, len(got))
			}
		}
	})
}

// TestOutsideEdgesCheckpointTimeIsTheEngineClock: a checkpoint is timed by
// the engine's clock, as entries are (the injected test clock here), to
// the millisecond, on both engines, also when read back.
func TestOutsideEdgesCheckpointTimeIsTheEngineClock(t *testing.T) {
	t.Parallel()
	at := time.Date(2021, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	testdb.Each(t, &racefree.Config{Clock: racefree.NewManualClock(at)}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 1)
		cp, err := l.Checkpoint(ctx, db, "s")
		if err != nil || !cp.At.Equal(at) {
			t.Fatalf("checkpoint: %+v, %v; want at %v", cp, err, at)
		}
		if got, err := l.LatestCheckpoint(ctx, "s"); err != nil || !got.At.Equal(at) {
			t.Fatalf("latest checkpoint: %+v, %v; want at %v", got, err, at)
		}
	})
}
