package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestEdgesCheckpointRelabelledToTheScopeItNames changes a checkpoint's
// scope alone and verifies it in the scope it then names, where the scope
// check passes: only the signature, which covers the scope, tells it is
// another scope's, and the verdict is bad_checkpoint (a bad signature),
// not rolled_back or truncated, which would blame the log. The same
// checkpoint unchanged anchors its own scope, and the other scope's own
// checkpoint anchors that one.
func TestEdgesCheckpointRelabelledToTheScopeItNames(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		cps := map[string]Checkpoint{}
		for _, s := range []string{"s", "t"} {
			appendN(t, l, s, 2)
			cp, err := l.Checkpoint(ctx, db, s)
			if err != nil {
				t.Fatal(err)
			}
			cps[s] = cp
		}
		for _, s := range []string{"s", "t"} {
			if res := verify(t, l, s, &VerifyOptions{Checkpoints: []Checkpoint{cps[s]}}); res.Break != nil || !res.Anchored {
				t.Fatalf("%s against its own checkpoint: %+v (break %+v); want intact, anchored", s, res, res.Break)
			}
		}
		for from, to := range map[string]string{"s": "t", "t": "s"} {
			c := cps[from]
			c.Scope = to
			res := verify(t, l, to, &VerifyOptions{Checkpoints: []Checkpoint{c}})
			if res.Break == nil || res.Break.Kind != BadCheckpoint || !strings.Contains(res.Break.Detail, "bad signature") || res.Anchored {
				t.Errorf("%s verified against %s's checkpoint relabelled %q: %+v (break %+v); want %s, a bad signature", to, from, to, res, res.Break, BadCheckpoint)
			}
		}
	})
}

// TestEdgesCheckpointKeyIDRelabelledToTheSameKey changes a checkpoint's
// signing key id alone, to another id of the keyring under which the same
// public key is listed (a verify line naming the signing key anew): the
// signature still checks under that key, but it covers the key id, so the
// checkpoint is bad_checkpoint, a bad signature; with its own id it
// anchors the chain.
func TestEdgesCheckpointKeyIDRelabelledToTheSameKey(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		pub := ed25519.NewKeyFromSeed(mustBase64(t, keyS1)).Public().(ed25519.PublicKey)
		k, err := ParseKeyring("mac k1 " + keyK1 + "\nsign s1 " + keyS1 + "\nverify s1-again " + base64.StdEncoding.EncodeToString(pub) + "\n")
		if err != nil {
			t.Fatal(err)
		}
		l := newLog(t, db, k)
		appendN(t, l, "s", 2)
		cp, err := l.Checkpoint(ctx, db, "s")
		if err != nil {
			t.Fatal(err)
		}
		if res := verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp}}); res.Break != nil || !res.Anchored {
			t.Fatalf("against the checkpoint: %+v (break %+v); want intact, anchored", res, res.Break)
		}
		cp.KeyID = "s1-again"
		res := verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp}})
		if res.Break == nil || res.Break.Kind != BadCheckpoint || !strings.Contains(res.Break.Detail, "bad signature") || res.Anchored {
			t.Errorf("against the checkpoint relabelled with another id of its key: %+v (break %+v); want %s, a bad signature", res, res.Break, BadCheckpoint)
		}
	})
}

// TestEdgesCheckpointsNumberedWithAGap gives Verify two checkpoints that
// chain by hash, both signed with the scope's sign key, whose numbers are
// not consecutive (the second numbered 1 again, or 3, as a signer that
// miscounts would write them): the numbers are checked apart from the hash chain,
// and the list is bad_checkpoint ("does not follow"), never blamed on the
// log.
func TestEdgesCheckpointsNumberedWithAGap(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 2)
		first, err := l.Checkpoint(ctx, db, "s")
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, l, "s", 1)
		second, err := l.Checkpoint(ctx, db, "s")
		if err != nil {
			t.Fatal(err)
		}
		if res := verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{first, second}}); res.Break != nil || !res.Anchored {
			t.Fatalf("against both checkpoints: %+v (break %+v); want intact, anchored", res, res.Break)
		}
		for _, n := range []int64{first.N, first.N + 2} { // one behind and one past the next number
			c := second
			c.N = n
			c.Sig = ed25519.Sign(l.ring.signers[l.ring.signer], c.signed())
			res := verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{first, c}})
			if res.Break == nil || res.Break.Kind != BadCheckpoint || !strings.Contains(res.Break.Detail, "does not follow") || res.Anchored {
				t.Errorf("checkpoint %d after checkpoint %d, chained by hash and signed: %+v (break %+v); want %s, does not follow", n, first.N, res, res.Break, BadCheckpoint)
			}
		}
	})
}

func mustBase64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEdgesCheckpointsForkedAtTheSameNumber gives Verify checkpoint 1
// and a checkpoint 2 signed with the key that chains to another
// checkpoint 1 (one of the same entry signed a millisecond later, as a
// database restored and checkpointed again would sign it): the numbers
// follow, the hash does not, and the list is bad_checkpoint ("does not
// follow"); the other checkpoint 1 with its own checkpoint 2 anchors the
// chain.
func TestEdgesCheckpointsForkedAtTheSameNumber(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 2)
		first, err := l.Checkpoint(ctx, db, "s")
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, l, "s", 1)
		second, err := l.Checkpoint(ctx, db, "s")
		if err != nil {
			t.Fatal(err)
		}
		key := l.ring.signers[l.ring.signer]
		other := first
		other.At = other.At.Add(time.Millisecond)
		other.Sig = ed25519.Sign(key, other.signed())
		forked := second
		forked.Prev = other.Hash()
		forked.Sig = ed25519.Sign(key, forked.signed())
		if res := verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{other, forked}}); res.Break != nil || !res.Anchored {
			t.Fatalf("against the other checkpoint 1 and its checkpoint 2: %+v (break %+v); want intact, anchored", res, res.Break)
		}
		res := verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{first, forked}})
		if res.Break == nil || res.Break.Kind != BadCheckpoint || !strings.Contains(res.Break.Detail, "does not follow") || res.Anchored {
			t.Errorf("checkpoint 1 and a checkpoint 2 that chains to another checkpoint 1: %+v (break %+v); want %s, does not follow", res, res.Break, BadCheckpoint)
		}
	})
}

// TestEdgesScopesOfCheckpointsStayInTheirTenant: Scopes and VerifyAll
// list a scope by its head row, its entries or its stored checkpoints,
// each of the tenant's own, one tenant at a time: acme's scope "a" and
// globex's later scopes "b" and "c" (each checkpointed) and "d" (entries
// only) are listed for their own tenant alone, whichever comes first in
// the order the listing walks, and VerifyAll of acme verifies "a" alone.
func TestEdgesScopesOfCheckpointsStayInTheirTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		acme, globex := withTenant(t, "acme"), withTenant(t, "globex")
		for _, c := range []struct {
			ctx        context.Context
			scope      string
			checkpoint bool
		}{{acme, "a", true}, {globex, "b", true}, {globex, "c", true}, {globex, "d", false}} {
			appendIn(c.ctx, t, l, c.scope, 2)
			if !c.checkpoint {
				continue
			}
			if _, err := l.Checkpoint(c.ctx, db, c.scope); err != nil {
				t.Fatal(err)
			}
		}
		for _, w := range []struct {
			ctx  context.Context
			want string
		}{{acme, "a"}, {globex, "b c d"}, {context.Background(), ""}} {
			got, err := l.Scopes(w.ctx)
			if err != nil || strings.Join(got, " ") != w.want {
				t.Errorf("Scopes of %s: %q, %v; want %q", tenantOf(w.ctx), got, err, w.want)
			}
		}
		res, err := l.VerifyAll(acme, 2, nil)
		if err != nil || len(res) != 1 || res[0].Scope != "a" || res[0].Break != nil || res[0].Rows != 2 {
			t.Fatalf("VerifyAll of acme: %+v, %v; want scope a alone, 2 entries intact", res, err)
		}
	})
}

func tenantOf(ctx context.Context) string { return tenant.From(ctx) }

// TestEdgesVerifyResumedAtACheckpointOfAnotherFirstEntry resumes Verify
// exactly at entry 1, the first a position can name, which a checkpoint
// vouches for while the log, restored to an empty copy and appended to
// again, holds another entry 1, the one the position names: it is
// rolled_back at entry 1, never intact and anchored, resumed there and
// verified from the beginning alike.
func TestEdgesVerifyResumedAtACheckpointOfAnotherFirstEntry(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 1)
		cp, err := l.Checkpoint(ctx, db, "s")
		if err != nil || cp.Seq != 1 {
			t.Fatalf("checkpoint %+v, %v; want one of entry 1", cp, err)
		}
		tamper(t, db, `DELETE FROM racefree_audit WHERE scope = 's'`,
			`UPDATE racefree_audit_heads SET last_seq = 0, last_mac = `+blob(db, nil)+` WHERE scope = 's'`)
		if _, err := l.Append(ctx, db, "s", Entry{Actor: "mallory", Action: "another history"}); err != nil {
			t.Fatal(err)
		}
		at1 := verify(t, l, "s", nil).Verified
		if at1.Seq != 1 || bytes.Equal(at1.MAC, cp.MAC) {
			t.Fatalf("verified to %+v; want another entry 1 than checkpoint %+v's", at1, cp)
		}
		for _, after := range []*Position{&at1, nil} {
			res := verify(t, l, "s", &VerifyOptions{After: after, Checkpoints: []Checkpoint{cp}})
			if res.Break == nil || res.Break.Kind != RolledBack || res.Break.Seq != 1 || res.Anchored {
				t.Errorf("resumed after %+v against a checkpoint of another entry 1: %+v (break %+v); want %s at 1, not anchored", after, res, res.Break, RolledBack)
			}
		}
	})
}

// TestEdgesLatestCheckpointOfEachTenant: LatestCheckpoint reads the latest
// of the tenant's own checkpoints of the scope, whichever tenant has more
// checkpoints of a scope of the same name: acme with two, globex with one,
// the default tenant with three; each gets its own latest, and a tenant
// with none ErrNotFound.
func TestEdgesLatestCheckpointOfEachTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		acme, globex, initech := withTenant(t, "acme"), withTenant(t, "globex"), withTenant(t, "initech")
		want := map[string]Checkpoint{}
		for _, c := range []struct {
			ctx context.Context
			n   int
		}{{globex, 1}, {acme, 2}, {context.Background(), 3}} {
			for range c.n {
				appendIn(c.ctx, t, l, "s", 1)
				cp, err := l.Checkpoint(c.ctx, db, "s")
				if err != nil {
					t.Fatal(err)
				}
				want[tenant.From(c.ctx)] = cp
			}
		}
		for _, ctx := range []context.Context{acme, globex, context.Background()} {
			got, err := l.LatestCheckpoint(ctx, "s")
			w := want[tenant.From(ctx)]
			if err != nil || got.Tenant != w.Tenant || got.N != w.N || !bytes.Equal(got.Sig, w.Sig) {
				t.Errorf("LatestCheckpoint of %s: %+v, %v; want its checkpoint %d", tenant.From(ctx), got, err, w.N)
			}
		}
		if got, err := l.LatestCheckpoint(initech, "s"); !errors.Is(err, racefree.ErrNotFound) {
			t.Errorf("LatestCheckpoint of a tenant with none: %+v, %v; want ErrNotFound", got, err)
		}
	})
}

// TestEdgesCheckpointsAndEntriesReadBackAsMade: a checkpoint read back by
// Checkpoints and LatestCheckpoint equals the one Checkpoint returned, on
// both engines, the first one's empty Prev included: []byte{}, never nil
// (which JSON writes as null, where the export format and the HTTP API
// promise a base64 string); and List gives entry 1 the empty PrevMAC
// that Append gave it.
func TestEdgesCheckpointsAndEntriesReadBackAsMade(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		var made []Checkpoint
		for range 2 {
			appendIn(ctx, t, l, "s", 1)
			c, err := l.Checkpoint(ctx, db, "s")
			if err != nil {
				t.Fatal(err)
			}
			made = append(made, c)
		}
		if made[0].Prev == nil || len(made[0].Prev) != 0 {
			t.Fatalf("the first checkpoint's Prev: %#v; want []byte{}", made[0].Prev)
		}
		read, err := l.Checkpoints(ctx, "s", 0)
		if err != nil || len(read) != 2 {
			t.Fatalf("Checkpoints: %d, %v", len(read), err)
		}
		latest, err := l.LatestCheckpoint(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		for i, got := range []Checkpoint{read[0], read[1], latest} {
			want := made[min(i, 1)]
			if got.Prev == nil || !bytes.Equal(got.Prev, want.Prev) || got.N != want.N || !bytes.Equal(got.Sig, want.Sig) || !got.At.Equal(want.At) {
				t.Errorf("checkpoint %d read back: %+v (Prev %#v); want %+v", i, got, got.Prev, want)
			}
		}
		var out strings.Builder
		if err := WriteCheckpoints(&out, read[0]); err != nil || !strings.Contains(out.String(), `"prev":""`) {
			t.Errorf("the first checkpoint exported: %s, %v; want \"prev\":\"\"", out.String(), err)
		}
		// Entries too: List gives entry 1 the empty PrevMAC Append gave it.
		entries, err := l.List(ctx, "s", 0, 2)
		if err != nil || len(entries) != 2 {
			t.Fatalf("List: %d, %v", len(entries), err)
		}
		if entries[0].PrevMAC == nil || len(entries[0].PrevMAC) != 0 || !bytes.Equal(entries[1].PrevMAC, entries[0].MAC) {
			t.Errorf("entries listed: PrevMAC %#v then %x; want []byte{}, then entry 1's MAC %x", entries[0].PrevMAC, entries[1].PrevMAC, entries[0].MAC)
		}
	})
}
