package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
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
