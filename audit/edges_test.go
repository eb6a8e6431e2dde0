package audit

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestBoundsAtTheEdge tries each documented bound at the bound and one
// past it, one at a time, on both engines: Data of MaxDataLen bytes, an
// Actor of MaxActorLen and a Subject of MaxSubjectLen are appended (and
// the MAC covers them: the chain verifies), one byte more is an
// InputError; List takes a limit of 1 and MaxListLimit, not 0 nor
// MaxListLimit+1, and after 0, not -1; Prune takes through the scope's last
// entry, not one past it.
func TestBoundsAtTheEdge(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		atBound := []Entry{
			{Actor: "a", Action: "b", Data: make([]byte, MaxDataLen)},
			{Actor: strings.Repeat("a", MaxActorLen), Action: "b"},
			{Actor: "a", Action: "b", Subject: strings.Repeat("s", MaxSubjectLen)},
		}
		for i, e := range atBound {
			if _, err := l.Append(ctx, db, "s", e); err != nil {
				t.Fatalf("entry %d at its bound: %v; want appended", i, err)
			}
		}
		for i, e := range []Entry{
			{Actor: "a", Action: "b", Data: make([]byte, MaxDataLen+1)},
			{Actor: strings.Repeat("a", MaxActorLen+1), Action: "b"},
			{Actor: "a", Action: "b", Subject: strings.Repeat("s", MaxSubjectLen+1)},
		} {
			_, err := l.Append(ctx, db, "s", e)
			wantInput(t, err, "entry one past its bound "+string(rune('0'+i)))
		}
		wantIntact(t, verify(t, l, "s", nil))

		for _, limit := range []int{0, MaxListLimit + 1} {
			_, err := l.List(ctx, "s", 0, limit)
			wantInput(t, err, "List with a limit out of range")
		}
		_, err := l.List(ctx, "s", -1, 1)
		wantInput(t, err, "List after -1")
		if rs, err := l.List(ctx, "s", 0, 1); err != nil || len(rs) != 1 || rs[0].Seq != 1 {
			t.Fatalf("List(after 0, limit 1) = %d records, %v; want entry 1", len(rs), err)
		}
		if rs, err := l.List(ctx, "s", 0, MaxListLimit); err != nil || len(rs) != len(atBound) {
			t.Fatalf("List(limit MaxListLimit) = %d records, %v; want %d", len(rs), err, len(atBound))
		}

		_, err = l.Prune(ctx, db, "s", int64(len(atBound))+1, "ops")
		wantInput(t, err, "Prune one past the last entry")
		p, err := l.Prune(ctx, db, "s", int64(len(atBound)), "ops")
		if err != nil || p.Deleted != int64(len(atBound)) {
			t.Fatalf("Prune through the last entry = %+v, %v; want all %d deleted", p, err, len(atBound))
		}
		wantIntact(t, verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{p.Checkpoint}}))
	})
}

// tamperIn is tamper with each statement's %[1]s replaced by the tenant
// and %[2]s by the scope, quoted.
func tamperIn(t testing.TB, db *racefree.DB, tn, scope string, stmts ...string) {
	t.Helper()
	for i, s := range stmts {
		stmts[i] = fmt.Sprintf(s, "'"+tn+"'", "'"+scope+"'")
	}
	tamper(t, db, stmts...)
}

// TestEdgesEachEntryFieldChangedAloneIsReportedAtItsEntry changes one
// column of one entry in the database, nothing else, and expects Verify to
// report the break at that entry: each field the MAC covers (time, actor,
// action, subject, data), the stored prev_mac and MAC, the key id (which
// the MAC input leaves out: it chooses the key, so another key of the
// keyring is key_outside_epoch and one it lacks unknown_key), the number
// (a gap) and the first entry's prev_mac (which chains to nothing). The
// tenant and the scope are covered too: a whole chain moved, head row
// included, to another tenant or another scope is modified at its first
// entry. Each tampering is in one scope of tenant acme: the same scope of
// the default tenant and acme's other scopes stay intact.
func TestEdgesEachEntryFieldChangedAloneIsReportedAtItsEntry(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1", "k2"))
		acme, def := withTenant(t, "acme"), context.Background()
		x32 := blob(db, bytes.Repeat([]byte{0x5a}, 32))
		cases := []struct {
			scope string
			set   string
			kind  Kind
			seq   int64
		}{
			{"at", `at = at + 1`, Modified, 3},
			{"actor", `actor = 'mallory'`, Modified, 3},
			{"action", `action = 'a9'`, Modified, 3},
			{"subject", `subject = 'other'`, Modified, 3},
			{"data", `data = ` + blob(db, []byte(`{"i":2}`)), Modified, 3},
			{"prev_mac", `prev_mac = ` + x32, Modified, 3},
			{"mac", `mac = ` + x32, Modified, 3},
			{"key_id", `key_id = 'k1'`, KeyOutsideEpoch, 3}, // k2, the last listed, is current
			{"unknown key_id", `key_id = 'zz'`, UnknownKey, 3},
			{"seq", `seq = 9`, Missing, 3},
		}
		for _, c := range cases {
			for _, ctx := range []context.Context{acme, def} {
				appendIn(ctx, t, l, c.scope, 5)
			}
			tamperIn(t, db, "acme", c.scope, `UPDATE racefree_audit SET `+c.set+` WHERE tenant = %[1]s AND scope = %[2]s AND seq = 3`)
			wantBreak(t, verifyIn(acme, t, l, c.scope, nil), c.kind, c.seq)
		}
		appendIn(acme, t, l, "first", 3)
		tamperIn(t, db, "acme", "first", `UPDATE racefree_audit SET prev_mac = `+x32+` WHERE tenant = %[1]s AND scope = %[2]s AND seq = 1`)
		wantBreak(t, verifyIn(acme, t, l, "first", nil), Modified, 1)

		// The tenant and the scope, each changed alone in every entry and
		// the head row: the chain is whole, its MACs are another's.
		globex := withTenant(t, "globex")
		appendIn(acme, t, l, "moved", 3)
		tamperIn(t, db, "acme", "moved",
			`UPDATE racefree_audit SET tenant = 'globex' WHERE tenant = %[1]s AND scope = %[2]s`,
			`UPDATE racefree_audit_heads SET tenant = 'globex' WHERE tenant = %[1]s AND scope = %[2]s`)
		wantBreak(t, verifyIn(globex, t, l, "moved", nil), Modified, 1)
		appendIn(acme, t, l, "renamed", 3)
		tamperIn(t, db, "acme", "renamed",
			`UPDATE racefree_audit SET scope = 'renamed2' WHERE tenant = %[1]s AND scope = %[2]s`,
			`UPDATE racefree_audit_heads SET scope = 'renamed2' WHERE tenant = %[1]s AND scope = %[2]s`)
		wantBreak(t, verifyIn(acme, t, l, "renamed2", nil), Modified, 1)

		// Nothing tampered in acme is reported elsewhere.
		appendIn(acme, t, l, "untouched", 5)
		wantIntact(t, verifyIn(acme, t, l, "untouched", nil))
		for _, c := range cases {
			wantIntact(t, verifyIn(def, t, l, c.scope, nil))
		}
		res, err := l.VerifyAll(def, 2, nil)
		if err != nil || len(res) != len(cases) {
			t.Fatalf("VerifyAll of the default tenant: %d results, %v; want %d", len(res), err, len(cases))
		}
		for _, r := range res {
			wantIntact(t, r)
		}
	})
}

// TestEdgesEachCheckpointFieldChangedAloneIsBad changes one field of an
// exported checkpoint, nothing else, and expects bad_checkpoint: each
// field the signature covers (tenant, scope, number, entry, MAC, time to
// the millisecond, previous checkpoint's hash, signing key id) and the
// signature itself, for the last of a list of two and for a list of one
// (whose Prev nothing but the signature covers). A stored checkpoint
// changed in the database, read back by Checkpoints, is bad too.
func TestEdgesEachCheckpointFieldChangedAloneIsBad(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		var cps []Checkpoint
		for range 2 {
			appendN(t, l, "s", 2)
			cp, err := l.Checkpoint(ctx, db, "s")
			if err != nil {
				t.Fatal(err)
			}
			cps = append(cps, cp)
		}
		res := verify(t, l, "s", &VerifyOptions{Checkpoints: cps})
		if !res.Anchored || res.Break != nil {
			t.Fatalf("verify against the checkpoints: %+v", res)
		}
		changes := map[string]func(c *Checkpoint){
			"tenant": func(c *Checkpoint) { c.Tenant = "acme" },
			"scope":  func(c *Checkpoint) { c.Scope = "t" },
			"n":      func(c *Checkpoint) { c.N++ },
			"seq":    func(c *Checkpoint) { c.Seq-- },
			"mac":    func(c *Checkpoint) { c.MAC = bytes.Repeat([]byte{0x5a}, 32) },
			"at":     func(c *Checkpoint) { c.At = c.At.Add(time.Millisecond) },
			"prev":   func(c *Checkpoint) { c.Prev = bytes.Repeat([]byte{0x5a}, 32) },
			"key_id": func(c *Checkpoint) { c.KeyID = "s2" },
			"sig":    func(c *Checkpoint) { c.Sig = bytes.Clone(c.Sig); c.Sig[0] ^= 1 },
		}
		for name, change := range changes {
			for _, list := range [][]Checkpoint{cps, cps[:1]} {
				list = slices.Clone(list)
				last := &list[len(list)-1]
				change(last)
				res := verify(t, l, "s", &VerifyOptions{Checkpoints: list})
				if res.Break == nil || res.Break.Kind != BadCheckpoint || res.Anchored {
					t.Errorf("%s changed in checkpoint %d of %d: %+v (break %+v); want %s", name, last.N, len(list), res, res.Break, BadCheckpoint)
				}
			}
		}
		tamper(t, db, `UPDATE racefree_audit_checkpoints SET at = at + 1 WHERE n = 2`)
		stored, err := l.Checkpoints(ctx, "s", 0)
		if err != nil || len(stored) != 2 {
			t.Fatalf("stored checkpoints: %+v, %v", stored, err)
		}
		wantBreak(t, verify(t, l, "s", &VerifyOptions{Checkpoints: stored}), BadCheckpoint, cps[1].Seq)
		wantIntact(t, verify(t, l, "s", &VerifyOptions{Checkpoints: stored[:1]}))
	})
}

// TestEdgesVerifyResumedAcrossABreak resumes Verify from a position a
// previous Verify reported, across a break at or after it: the log
// restored to an older copy and appended to again holds another entry at
// the position (rolled_back there, in one stream and in several); a
// position of another scope does not resume this one; the position's
// entry deleted is missing, and the tail cut through it truncated, with
// the head row left alone and cut to match (a resumed Verify once found
// these intact); and resumed at the last entry, a tail appended and then
// tampered is reported at its entry.
func TestEdgesVerifyResumedAcrossABreak(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 5)
		at5 := verify(t, l, "s", nil).Verified
		r4 := entryRow(t, l, "s", 4)
		tamper(t, db, `DELETE FROM racefree_audit WHERE scope = 's' AND seq = 5`,
			`UPDATE racefree_audit_heads SET last_seq = 4, last_mac = `+blob(db, r4.MAC)+` WHERE scope = 's'`)
		appendN(t, l, "s", 3) // 5, 6 and 7 of another history
		wantIntact(t, verify(t, l, "s", nil))
		wantBreak(t, verify(t, l, "s", &VerifyOptions{After: &at5}), RolledBack, 5)
		wantBreak(t, verify(t, l, "s", &VerifyOptions{After: &at5, Streams: 2, minSpan: 1}), RolledBack, 5)

		appendN(t, l, "t", 8)
		wantBreak(t, verify(t, l, "t", &VerifyOptions{After: &at5}), RolledBack, 5)

		appendN(t, l, "u", 6)
		at4 := entryRow(t, l, "u", 4)
		pos := Position{Seq: 4, MAC: at4.MAC, KeyID: at4.KeyID}
		wantIntact(t, verify(t, l, "u", &VerifyOptions{After: &pos}))
		tamper(t, db, `DELETE FROM racefree_audit WHERE scope = 'u' AND seq = 4`)
		wantBreak(t, verify(t, l, "u", &VerifyOptions{After: &pos}), Missing, 4)
		tamper(t, db, `DELETE FROM racefree_audit WHERE scope = 'u' AND seq > 4`)
		wantBreak(t, verify(t, l, "u", &VerifyOptions{After: &pos}), Truncated, 4)
		tamper(t, db, `UPDATE racefree_audit_heads SET last_seq = 3 WHERE scope = 'u'`)
		wantBreak(t, verify(t, l, "u", &VerifyOptions{After: &pos}), Truncated, 4)

		at8 := verify(t, l, "t", nil).Verified
		appendN(t, l, "t", 2)
		tamper(t, db, `UPDATE racefree_audit SET actor = 'mallory' WHERE scope = 't' AND seq = 9`)
		wantBreak(t, verify(t, l, "t", &VerifyOptions{After: &at8}), Modified, 9)
	})
}

// TestEdgesListPagesAcrossAGap pages List by the last number it returned:
// across an entry deleted from the middle the pages skip exactly the gap
// (which Verify reports missing), and at MaxListLimit a page of a chain
// one entry longer holds exactly MaxListLimit entries and the next page
// the last one.
func TestEdgesListPagesAcrossAGap(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 6)
		tamper(t, db, `DELETE FROM racefree_audit WHERE scope = 's' AND seq = 3`)
		var pages [][]int64
		for after := int64(0); len(pages) <= 6; { // a page that repeats its last entry must not page forever
			rs, err := l.List(ctx, "s", after, 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) == 0 {
				break
			}
			var page []int64
			for _, r := range rs {
				page = append(page, r.Seq)
			}
			pages = append(pages, page)
			after = rs[len(rs)-1].Seq
		}
		if got, want := fmt.Sprint(pages), "[[1 2] [4 5] [6]]"; got != want {
			t.Fatalf("pages %s; want %s", got, want)
		}
		wantBreak(t, verify(t, l, "s", nil), Missing, 3)

		bulkChain(t, l, "big", MaxListLimit+1)
		rs, err := l.List(ctx, "big", 0, MaxListLimit)
		if err != nil || len(rs) != MaxListLimit || rs[0].Seq != 1 || rs[len(rs)-1].Seq != MaxListLimit {
			t.Fatalf("a page of MaxListLimit: %d entries, %v; want 1..%d", len(rs), err, MaxListLimit)
		}
		rs, err = l.List(ctx, "big", MaxListLimit, MaxListLimit)
		if err != nil || len(rs) != 1 || rs[0].Seq != MaxListLimit+1 {
			t.Fatalf("the page after: %d entries, %v; want entry %d", len(rs), err, MaxListLimit+1)
		}
		wantIntact(t, verify(t, l, "big", nil))
	})
}

// TestEdgesScopeAndActionAtTheirBounds: a scope of MaxScopeLen bytes is
// appended to, listed, checkpointed and verified, one byte more is an
// InputError of each; an Action of MaxActionLen is appended, one more
// refused.
func TestEdgesScopeAndActionAtTheirBounds(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		at, past := strings.Repeat("s", MaxScopeLen), strings.Repeat("s", MaxScopeLen+1)
		if _, err := l.Append(ctx, db, at, Entry{Actor: "a", Action: strings.Repeat("b", MaxActionLen)}); err != nil {
			t.Fatalf("a scope of MaxScopeLen, an action of MaxActionLen: %v; want appended", err)
		}
		_, err := l.Append(ctx, db, at, Entry{Actor: "a", Action: strings.Repeat("b", MaxActionLen+1)})
		wantInput(t, err, "an action one past MaxActionLen")
		cp, err := l.Checkpoint(ctx, db, at)
		if err != nil {
			t.Fatal(err)
		}
		if rs, err := l.List(ctx, at, 0, 10); err != nil || len(rs) != 1 {
			t.Fatalf("List of a scope of MaxScopeLen: %d, %v", len(rs), err)
		}
		res := verify(t, l, at, &VerifyOptions{Checkpoints: []Checkpoint{cp}})
		if res.Break != nil || !res.Anchored || res.Rows != 1 {
			t.Fatalf("verify a scope of MaxScopeLen: %+v", res)
		}
		_, err = l.Append(ctx, db, past, Entry{Actor: "a", Action: "b"})
		wantInput(t, err, "Append to a scope one past MaxScopeLen")
		_, err = l.Checkpoint(ctx, db, past)
		wantInput(t, err, "Checkpoint of a scope one past MaxScopeLen")
		_, err = l.List(ctx, past, 0, 1)
		wantInput(t, err, "List of a scope one past MaxScopeLen")
		_, err = l.Verify(ctx, past, nil)
		wantInput(t, err, "Verify of a scope one past MaxScopeLen")
	})
}

// TestEdgesChainOfOneEntry: a chain of exactly one entry verifies (one
// row, anchored by a checkpoint of it), its first entry chains to an empty
// prev_mac, resuming at it checks nothing and finds it intact, and the
// entry gone is truncated at 1, against the head row and against the
// checkpoint once the head row is cut to match.
func TestEdgesChainOfOneEntry(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		r, err := l.Append(ctx, db, "s", Entry{Actor: "a", Action: "b"})
		if err != nil || r.Seq != 1 || len(r.PrevMAC) != 0 {
			t.Fatalf("the first entry: %+v, %v; want number 1, no prev_mac", r, err)
		}
		cp, err := l.Checkpoint(ctx, db, "s")
		if err != nil || cp.N != 1 || cp.Seq != 1 || len(cp.Prev) != 0 {
			t.Fatalf("the first checkpoint: %+v, %v", cp, err)
		}
		res := verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp}})
		if res.Break != nil || !res.Anchored || res.Rows != 1 || res.Verified.Seq != 1 || !bytes.Equal(res.Verified.MAC, r.MAC) {
			t.Fatalf("verify a chain of one: %+v", res)
		}
		again := verify(t, l, "s", &VerifyOptions{After: &res.Verified})
		if again.Break != nil || again.Rows != 0 || again.Verified.Seq != 1 {
			t.Fatalf("verify resumed at its only entry: %+v", again)
		}
		tamper(t, db, `DELETE FROM racefree_audit WHERE scope = 's'`)
		wantBreak(t, verify(t, l, "s", nil), Truncated, 1)
		tamper(t, db, `UPDATE racefree_audit_heads SET last_seq = 0 WHERE scope = 's'`)
		wantBreak(t, verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp}}), Truncated, 1)
	})
}

// TestEdgesCheckpointInTheCallersTransaction: a checkpoint signed in the
// caller's transaction that rolls back is not stored and consumes no
// number; one that commits is checkpoint 1, and the next, on the pool,
// chains to it.
func TestEdgesCheckpointInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{TxAttempts: 1}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 2)
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cp, err := l.Checkpoint(ctx, tx, "s"); err != nil || cp.N != 1 {
			t.Fatalf("checkpoint in tx: %+v, %v", cp, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.LatestCheckpoint(ctx, "s"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("latest checkpoint after a rollback: %v; want ErrNotFound", err)
		}
		var first Checkpoint
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			var err error
			first, err = l.Checkpoint(ctx, tx, "s")
			return err
		})
		if err != nil || first.N != 1 || len(first.Prev) != 0 {
			t.Fatalf("checkpoint in a committed tx: %+v, %v; want checkpoint 1", first, err)
		}
		appendN(t, l, "s", 1)
		second, err := l.Checkpoint(ctx, db, "s")
		if err != nil || second.N != 2 || !bytes.Equal(second.Prev, first.Hash()) {
			t.Fatalf("the next checkpoint: %+v, %v; want 2 chained to 1", second, err)
		}
		res := verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{first, second}})
		if res.Break != nil || !res.Anchored {
			t.Fatalf("verify: %+v", res)
		}
	})
}

// TestEdgesCancelledCaller: an Append, a Checkpoint and a Verify (in one
// stream) whose context is cancelled before the call return the context's
// error and change nothing: the chain has no gap, no checkpoint is stored,
// and no verdict is given.
func TestEdgesCancelledCaller(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 2)
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		if r, err := l.Append(cancelled, db, "s", Entry{Actor: "a", Action: "b"}); !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled Append: %+v, %v; want context.Canceled", r, err)
		}
		if cp, err := l.Checkpoint(cancelled, db, "s"); !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled Checkpoint: %+v, %v; want context.Canceled", cp, err)
		}
		if res, err := l.Verify(cancelled, "s", &VerifyOptions{Streams: 1}); !errors.Is(err, context.Canceled) || res.Break != nil || res.Rows != 0 {
			t.Fatalf("a cancelled Verify: %+v, %v; want context.Canceled and no verdict", res, err)
		}
		ctx := context.Background()
		if r, err := l.Append(ctx, db, "s", Entry{Actor: "a", Action: "b"}); err != nil || r.Seq != 3 {
			t.Fatalf("the next Append: %+v, %v; want number 3", r, err)
		}
		if _, err := l.LatestCheckpoint(ctx, "s"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("latest checkpoint: %v; want ErrNotFound", err)
		}
		wantIntact(t, verify(t, l, "s", nil))
	})
}
