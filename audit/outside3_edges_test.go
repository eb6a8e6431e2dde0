package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestOutside3EdgesTailCutByOne cuts exactly one entry off a chain's
// tail: with the head row left counting it, Verify reports the chain
// truncated at that entry; with the head row cut to match, a bare chain
// cannot tell (intact, not anchored), but a checkpoint of the entry cut
// off reports it truncated there. The same scope of another tenant, and
// another scope of the tenant, are left intact.
func TestOutside3EdgesTailCutByOne(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, acme := context.Background(), withTenant(t, "acme")
		l := newLog(t, db, ring(t, "k1"))
		for _, scope := range []string{"head", "checkpointed", "untouched"} {
			appendIn(acme, t, l, scope, 5)
			appendIn(ctx, t, l, scope, 5)
		}
		cp, err := l.Checkpoint(acme, db, "checkpointed")
		if err != nil || cp.Seq != 5 {
			t.Fatalf("checkpoint of entry 5: %+v, %v", cp, err)
		}
		r4 := entryRowIn(acme, t, l, "checkpointed", 4)

		tamperIn(t, db, "acme", "head", `DELETE FROM racefree_audit WHERE tenant = %[1]s AND scope = %[2]s AND seq = 5`)
		res := verifyIn(acme, t, l, "head", nil)
		wantBreak(t, res, Truncated, 5)
		if res.Rows != 4 || res.Verified.Seq != 4 {
			t.Fatalf("the last entry cut, the head left: %+v; want 4 entries verified before the break", res)
		}

		tamperIn(t, db, "acme", "checkpointed",
			`DELETE FROM racefree_audit WHERE tenant = %[1]s AND scope = %[2]s AND seq = 5`,
			`UPDATE racefree_audit_heads SET last_seq = 4, last_mac = `+blob(db, r4.MAC)+` WHERE tenant = %[1]s AND scope = %[2]s`)
		res = verifyIn(acme, t, l, "checkpointed", nil)
		if res.Break != nil || res.Anchored || res.Verified.Seq != 4 {
			t.Fatalf("the last entry and the head cut, no checkpoint: %+v (break %+v); want intact through 4, not anchored", res, res.Break)
		}
		res = verifyIn(acme, t, l, "checkpointed", &VerifyOptions{Checkpoints: []Checkpoint{cp}})
		wantBreak(t, res, Truncated, 5)
		if res.Anchored {
			t.Fatalf("the checkpointed entry cut off: %+v; want it not anchored", res)
		}

		wantIntact(t, verifyIn(acme, t, l, "untouched", nil))
		for _, scope := range []string{"head", "checkpointed", "untouched"} {
			if res := verifyIn(ctx, t, l, scope, nil); res.Break != nil || res.Rows != 5 {
				t.Fatalf("the default tenant's %s: %+v (break %+v); want intact, 5 entries", scope, res, res.Break)
			}
		}
	})
}

// TestOutside3EdgesMACBytesMovedAcrossTheirBoundary moves one byte of an
// entry's stored MACs from one column to the other, so that prev_mac and
// MAC joined are the bytes they were: the last byte of prev_mac to the
// front of the MAC (31 and 33 bytes), and the first byte of the MAC to the
// end of prev_mac (33 and 31 bytes). Each is modified at that entry: a MAC
// is 32 bytes, never split anywhere else.
func TestOutside3EdgesMACBytesMovedAcrossTheirBoundary(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		for _, c := range []struct {
			scope     string
			prev, mac func(r Record) []byte
		}{
			{"to-mac",
				func(r Record) []byte { return r.PrevMAC[:31] },
				func(r Record) []byte { return append([]byte{r.PrevMAC[31]}, r.MAC...) }},
			{"to-prev-mac",
				func(r Record) []byte { return append(bytes.Clone(r.PrevMAC), r.MAC[0]) },
				func(r Record) []byte { return r.MAC[1:] }},
		} {
			appendN(t, l, c.scope, 4)
			r := entryRow(t, l, c.scope, 3)
			if len(r.PrevMAC) != 32 || len(r.MAC) != 32 {
				t.Fatalf("entry 3: prev_mac of %d bytes, MAC of %d; want 32 each", len(r.PrevMAC), len(r.MAC))
			}
			tamperIn(t, db, tenant.Default, c.scope,
				`UPDATE racefree_audit SET prev_mac = `+blob(db, c.prev(r))+`, mac = `+blob(db, c.mac(r))+` WHERE tenant = %[1]s AND scope = %[2]s AND seq = 3`)
			if got := entryRow(t, l, c.scope, 3); !bytes.Equal(append(got.PrevMAC, got.MAC...), append(r.PrevMAC, r.MAC...)) {
				t.Fatalf("a byte moved %s: prev_mac and MAC joined %x; want %x", c.scope, append(got.PrevMAC, got.MAC...), append(r.PrevMAC, r.MAC...))
			}
			wantBreak(t, verify(t, l, c.scope, nil), Modified, 3)
			res := verify(t, l, c.scope, &VerifyOptions{After: &Position{Seq: 2, MAC: r.PrevMAC, KeyID: "k1"}})
			wantBreak(t, res, Modified, 3)
		}
	})
}

// TestOutside3EdgesFirstEntriesDeleted deletes the chain's first entry,
// and then its first two: each is missing at 1, naming the next entry
// there is, whether the chain is read in one stream or in parts.
func TestOutside3EdgesFirstEntriesDeleted(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		for _, c := range []struct {
			scope string
			last  int64
			next  string
		}{{"one", 1, "the next is 2"}, {"two", 2, "the next is 3"}} {
			appendN(t, l, c.scope, 8)
			tamperIn(t, db, tenant.Default, c.scope, fmt.Sprintf(`DELETE FROM racefree_audit WHERE tenant = %%[1]s AND scope = %%[2]s AND seq <= %d`, c.last))
			res := verifyBoth(t, l, c.scope, VerifyOptions{}, *parallelOpts(2, 3))
			wantBreak(t, res, Missing, 1)
			if !strings.Contains(res.Break.Detail, c.next) || res.Rows != 0 || res.Verified.Seq != 0 {
				t.Fatalf("entries 1 through %d deleted: %+v (break %+v); want missing at 1, %q, nothing verified", c.last, res, res.Break, c.next)
			}
		}
	})
}

// TestOutside3EdgesCheckpointsOfTwoTenantsChainApart checkpoints the
// scope of the same name in three tenants in turn, at the same numbers,
// the tenant sorting first last: each tenant's second checkpoint chains
// to its own first, never to another tenant's, and each chain verifies
// anchored against its own two.
func TestOutside3EdgesCheckpointsOfTwoTenantsChainApart(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		tenants := []string{"globex", "default", "acme"} // acme sorts first and signs last
		ctxs := map[string]context.Context{"globex": withTenant(t, "globex"), "default": context.Background(), "acme": withTenant(t, "acme")}
		cps := map[string][]Checkpoint{}
		for range 2 {
			for _, tn := range tenants {
				appendIn(ctxs[tn], t, l, "s", 1)
				cp, err := l.Checkpoint(ctxs[tn], db, "s")
				if err != nil {
					t.Fatal(err)
				}
				cps[tn] = append(cps[tn], cp)
			}
		}
		for _, tn := range tenants {
			c := cps[tn]
			if c[0].N != 1 || c[1].N != 2 || !bytes.Equal(c[1].Prev, c[0].Hash()) {
				t.Fatalf("%s's checkpoints %d and %d: the second's prev %x; want its first's hash %x", tn, c[0].N, c[1].N, c[1].Prev, c[0].Hash())
			}
			res := verifyIn(ctxs[tn], t, l, "s", &VerifyOptions{Checkpoints: c})
			if res.Break != nil || !res.Anchored || res.Rows != 2 {
				t.Fatalf("%s's chain against its two checkpoints: %+v (break %+v); want intact, anchored, 2 entries", tn, res, res.Break)
			}
		}
	})
}

// TestOutside3EdgesCheckpointKeyIDTwice: a checkpoint key id (sign or
// verify) listed again with another key is refused, naming its line and
// the id, never a key, as a mac key id listed twice is; listed again with
// the same key (a sign line and the verify line Keygen writes for it,
// uncommented) it parses, and the keyring verifies what it signs.
func TestOutside3EdgesCheckpointKeyIDTwice(t *testing.T) {
	t.Parallel()
	enc := base64.StdEncoding.EncodeToString
	seedA, seedB := bytes.Repeat([]byte{11}, 32), bytes.Repeat([]byte{12}, 32)
	pubA := ed25519.NewKeyFromSeed(seedA).Public().(ed25519.PublicKey)
	pubB := ed25519.NewKeyFromSeed(seedB).Public().(ed25519.PublicKey)
	mac := "mac k1 " + keyK1 + "\n"
	signA, signB := "sign s1 "+enc(seedA), "sign s1 "+enc(seedB)
	verifyA, verifyB := "verify s1 "+enc(pubA), "verify s1 "+enc(pubB)
	for _, text := range []string{signA + "\n" + signB, signA + "\n" + verifyB, verifyA + "\n" + signB, verifyA + "\n" + verifyB} {
		_, err := ParseKeyring(mac + "# two keys of one id\n" + text)
		if err == nil {
			t.Errorf("%q parsed; want the second key of s1 refused", text)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "line 4:") || !strings.Contains(msg, `"s1"`) {
			t.Errorf("%q: error %q; want line 4 and s1 named", text, msg)
		}
		for _, secret := range []string{enc(seedA), enc(seedB), enc(pubA), enc(pubB)} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%q: error %q shows a key", text, err)
			}
		}
	}
	for _, text := range []string{signA + "\n" + verifyA, verifyA + "\n" + signA, verifyA + "\n" + verifyA, signA + "\n" + signA} {
		k, err := ParseKeyring(mac + text)
		if err != nil {
			t.Errorf("%q: %v; want parsed", text, err)
			continue
		}
		if k.Signer() == "s1" && !k.publics["s1"].Equal(pubA) {
			t.Errorf("%q: s1's public key is not the one its seed gives", text)
		}
	}
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		k, err := ParseKeyring(mac + signA + "\n" + verifyA)
		if err != nil {
			t.Fatal(err)
		}
		l := newLog(t, db, k)
		appendN(t, l, "s", 2)
		cp, err := l.Checkpoint(context.Background(), db, "s")
		if err != nil {
			t.Fatal(err)
		}
		if res := verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp}}); res.Break != nil || !res.Anchored {
			t.Fatalf("a keyring listing s1 as sign and verify, one key: %+v (break %+v); want intact, anchored", res, res.Break)
		}
	})
}
