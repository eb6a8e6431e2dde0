package audit

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
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

// TestEdgesNULAtEitherEndOfEachTextField: a NUL byte written into one text
// field alone (actor, action, subject, key_id), at its first byte or its
// last, and an empty subject made a lone NUL, is modified at its entry,
// never read as another split of the fields nor as an unknown key (SQLite:
// PostgreSQL's text refuses NUL). Data, which Verify does not join, holds
// NUL bytes anywhere, at both ends included, and verifies intact on both
// engines.
func TestEdgesNULAtEitherEndOfEachTextField(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		for _, data := range [][]byte{{0}, {0, 'a', 0}, {'{', '}', 0}} {
			if _, err := l.Append(ctx, db, "data", Entry{Actor: "a", Action: "b", Data: data}); err != nil {
				t.Fatalf("data %q: %v; want appended", data, err)
			}
		}
		if res := verify(t, l, "data", nil); res.Break != nil || res.Rows != 3 {
			t.Fatalf("data holding NUL bytes: %+v; want 3 entries intact", res)
		}
		if rs, err := l.List(ctx, "data", 0, 3); err != nil || len(rs) != 3 || !bytes.Equal(rs[1].Data, []byte{0, 'a', 0}) {
			t.Fatalf("listed %+v, %v; want the data as appended", rs, err)
		}
		if db.Engine() != racefree.SQLite {
			return
		}
		for _, col := range []string{"actor", "action", "subject", "key_id"} {
			for end, set := range map[string]string{"first": `char(0) || %[1]s`, "last": `%[1]s || char(0)`} {
				scope := col + "-" + end
				appendN(t, l, scope, 3)
				tamper(t, db, fmt.Sprintf(`UPDATE racefree_audit SET %[1]s = `+set+` WHERE scope = '%[2]s' AND seq = 2`, col, scope))
				if res := verify(t, l, scope, nil); res.Break == nil || res.Break.Kind != Modified || res.Break.Seq != 2 {
					t.Errorf("a NUL at the %s byte of %s: %+v (break %+v); want modified at 2", end, col, res, res.Break)
				}
			}
		}
		if _, err := l.Append(ctx, db, "empty", Entry{Actor: "a", Action: "b"}); err != nil {
			t.Fatal(err)
		}
		tamper(t, db, `UPDATE racefree_audit SET subject = char(0) WHERE scope = 'empty'`)
		wantBreak(t, verify(t, l, "empty", nil), Modified, 1)
	})
}

// TestEdgesOutdatedSchemaForAnotherTenant: at migration 011 every
// operation of a tenant other than the default, on the scope the default
// tenant appends to (the two differ in the tenant alone), is
// ErrSchemaOutdated, on the pool and in the caller's transaction, and
// writes nothing, while the default tenant's log works and stays as it
// was; at exactly 012, the version it needs, the other tenant appends,
// checkpoints, lists and verifies a chain of its own.
func TestEdgesOutdatedSchemaForAnotherTenant(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		def, acme := context.Background(), withTenant(t, "acme")
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(def, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		l := newLog(t, db, ring(t, "k1"))
		appendIn(def, t, l, "s", 2)
		before := tenantRows(t, db, tenant.Default)
		pos := verifyIn(def, t, l, "s", nil).Verified
		e := Entry{Actor: "a", Action: "b"}
		ops := map[string]func() error{
			"Append": func() error { _, err := l.Append(acme, db, "s", e); return err },
			"Append in the caller's transaction": func() error {
				tx, err := db.SQL().BeginTx(def, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				_, err = l.Append(acme, tx, "s", e)
				return err
			},
			"Checkpoint":       func() error { _, err := l.Checkpoint(acme, db, "s"); return err },
			"Prune":            func() error { _, err := l.Prune(acme, db, "s", 1, "ops"); return err },
			"List":             func() error { _, err := l.List(acme, "s", 0, 10); return err },
			"Scopes":           func() error { _, err := l.Scopes(acme); return err },
			"ScopesPage":       func() error { _, err := l.ScopesPage(acme, "", "", 10); return err },
			"Length":           func() error { _, err := l.Length(acme, "s"); return err },
			"Verify":           func() error { _, err := l.Verify(acme, "s", nil); return err },
			"Verify resumed":   func() error { _, err := l.Verify(acme, "s", &VerifyOptions{After: &pos}); return err },
			"Checkpoints":      func() error { _, err := l.Checkpoints(acme, "s", 0); return err },
			"LatestCheckpoint": func() error { _, err := l.LatestCheckpoint(acme, "s"); return err },
		}
		for name, op := range ops {
			if err := op(); !errors.Is(err, racefree.ErrSchemaOutdated) {
				t.Errorf("%s of tenant acme on schema 011: %v; want ErrSchemaOutdated", name, err)
			}
		}
		if got := tenantRows(t, db, "acme"); got != "--\n--\n--\n" {
			t.Fatalf("tenant acme's rows on schema 011:\n%s\nwant none", got)
		}
		if got := tenantRows(t, db, tenant.Default); got != before {
			t.Fatalf("the default tenant's rows changed:\n%s\nwas\n%s", got, before)
		}
		appendIn(def, t, l, "s", 1)
		if res := verifyIn(def, t, l, "s", nil); res.Break != nil || res.Rows != 3 {
			t.Fatalf("the default tenant on schema 011: %+v; want 3 entries intact", res)
		}

		if _, err := db.MigrateUpTo(def, tenant.KeysVersion); err != nil {
			t.Fatal(err)
		}
		appendIn(acme, t, l, "s", 2)
		cp, err := l.Checkpoint(acme, db, "s")
		if err != nil || cp.Tenant != "acme" || cp.Seq != 2 {
			t.Fatalf("acme's checkpoint on schema 012: %+v, %v", cp, err)
		}
		if rs, err := l.List(acme, "s", 0, 10); err != nil || len(rs) != 2 || rs[0].Tenant != "acme" {
			t.Fatalf("acme's entries on schema 012: %+v, %v", rs, err)
		}
		if res := verifyIn(acme, t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp}}); res.Break != nil || !res.Anchored || res.Rows != 2 {
			t.Fatalf("acme's chain on schema 012: %+v; want 2 entries intact, anchored", res)
		}
		if res := verifyIn(def, t, l, "s", nil); res.Break != nil || res.Rows != 3 {
			t.Fatalf("the default tenant on schema 012: %+v; want its 3 entries intact", res)
		}
	})
}

// TestEdgesPreviousReleaseEntryFieldChangedAlone: entries the previous
// release wrote (its statements and MAC encoding, between migrations 011
// and 012) with one field the MAC covers changed alone, after the upgrade,
// are modified at that entry, and the entries left alone verify intact.
func TestEdgesPreviousReleaseEntryFieldChangedAlone(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		prev, err := query.Load(os.DirFS("testdata"), "previous", db.Engine())
		if err != nil {
			t.Fatal(err)
		}
		k := ring(t, "k1")
		l := newLog(t, db, k)
		cases := map[string]string{
			"at": `at = at + 1`, "actor": `actor = 'mallory'`, "action": `action = 'act2'`,
			"subject": `subject = 'doc2'`, "data": `data = ` + blob(db, []byte(`{"x":1}`)),
		}
		scopes := append(slices.Sorted(maps.Keys(cases)), "untouched")
		for _, scope := range scopes {
			for i := range 3 {
				err := db.InTx(ctx, func(tx *sql.Tx) error {
					var (
						seq, at int64
						prevMAC []byte
						keyID   string
					)
					if err := tx.QueryRowContext(ctx, prev.Get("next"), scope, k.current, wire.Of(db).ClockArg()).Scan(&seq, &prevMAC, &keyID, &at); err != nil {
						return err
					}
					if prevMAC == nil {
						prevMAC = []byte{}
					}
					key, _ := k.scopeKey(keyID, scope)
					actor := fmt.Sprint("old-", i)
					mac := previousMAC(key, scope, seq, prevMAC, at, actor, "act", "doc", []byte("{}"))
					_, err := tx.ExecContext(ctx, prev.Get("insert"), scope, seq, at, actor, "act", "doc", []byte("{}"), keyID, prevMAC, mac)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		for scope, set := range cases {
			tamper(t, db, `UPDATE racefree_audit SET `+set+` WHERE scope = '`+scope+`' AND seq = 2`)
			if res := verify(t, l, scope, nil); res.Break == nil || res.Break.Kind != Modified || res.Break.Seq != 2 {
				t.Errorf("%s of the previous release's entry 2 changed: %+v (break %+v); want modified at 2", scope, res, res.Break)
			}
		}
		if res := verify(t, l, "untouched", nil); res.Break != nil || res.Rows != 3 {
			t.Fatalf("the previous release's chain left alone: %+v; want 3 entries intact", res)
		}
	})
}

// TestEdgesAppendOnlyRefusesEachColumnAlone: the append-only triggers
// cover every column: an UPDATE of any one column alone of an entry or of
// a checkpoint is refused, and so is one that sets a column to the value
// it has; the log is as it was.
func TestEdgesAppendOnlyRefusesEachColumnAlone(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 2)
		cp, err := l.Checkpoint(ctx, db, "s")
		if err != nil {
			t.Fatal(err)
		}
		x := blob(db, []byte("x"))
		sets := map[string][]string{
			"racefree_audit": {`tenant = 'other'`, `scope = 'other'`, `seq = seq + 100`, `at = at + 1`, `actor = 'x'`, `action = 'x'`,
				`subject = 'x'`, `data = ` + x, `key_id = 'k9'`, `prev_mac = ` + x, `mac = ` + x, `seq = seq`},
			"racefree_audit_checkpoints": {`tenant = 'other'`, `scope = 'other'`, `n = n + 100`, `seq = seq + 100`, `mac = ` + x,
				`at = at + 1`, `prev = ` + x, `key_id = 's9'`, `sig = ` + x, `n = n`},
		}
		for table, list := range sets {
			for _, set := range list {
				s := `UPDATE ` + table + ` SET ` + set + ` WHERE seq = 2`
				if _, err := db.ExecContext(ctx, s); err == nil || !strings.Contains(err.Error(), "append-only") {
					t.Errorf("%s: %v; want refused as append-only", s, err)
				}
			}
		}
		res := verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp}})
		if res.Break != nil || !res.Anchored || res.Rows != 2 {
			t.Fatalf("the log after the refused updates: %+v; want 2 entries intact, anchored", res)
		}
	})
}

// headRowOf returns the head row of tenant tn's scope as a line, for
// comparing before and after.
func headRowOf(t testing.TB, db *racefree.DB, tn, scope string) string {
	t.Helper()
	var (
		seq   int64
		mac   []byte
		keyID string
	)
	err := db.QueryRowContext(context.Background(),
		fmt.Sprintf(`SELECT last_seq, last_mac, key_id FROM racefree_audit_heads WHERE tenant = '%s' AND scope = '%s'`, tn, scope)).Scan(&seq, &mac, &keyID)
	if err != nil {
		t.Fatalf("the head of %s/%s: %v", tn, scope, err)
	}
	return fmt.Sprintf("%d %x %s", seq, mac, keyID)
}

// TestEdgesHeadNumberAtItsBoundsAndOwnChain: the insert trigger takes an
// entry numbered one past its head (and moves the head to it) and refuses
// one two past it and one below it whose slot a pruning freed (the primary
// key no longer does); and it moves only the entry's own chain: with two
// tenants' heads of one scope, and two scopes' heads of one tenant, at the
// same number, an entry of one leaves the others' heads as they were, and
// every chain verifies.
func TestEdgesHeadNumberAtItsBoundsAndOwnChain(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		def, acme := context.Background(), withTenant(t, "acme")
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "b", 6)
		if _, err := l.Prune(ctx, db, "b", 3, "ops"); err != nil { // entries 1..3 gone, 7 the pruning
			t.Fatal(err)
		}
		x := blob(db, bytes.Repeat([]byte{7}, 32))
		insert := func(seq int64) error {
			_, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO racefree_audit (tenant, scope, seq, at, actor, action, subject, data, key_id, prev_mac, mac)
				VALUES ('default', 'b', %d, 0, 'a', 'b', '', %s, 'k1', %s, %s)`, seq, x, x, x))
			return err
		}
		for _, seq := range []int64{2, 9} {
			if err := insert(seq); err == nil {
				t.Errorf("an entry numbered %d with the head at 7 was inserted; want refused", seq)
			}
		}
		if got := headRowOf(t, db, tenant.Default, "b"); !strings.HasPrefix(got, "7 ") {
			t.Fatalf("the head after the refused entries: %s; want 7", got)
		}
		if err := insert(8); err != nil {
			t.Fatalf("an entry one past the head: %v; want inserted", err)
		}
		if got, want := headRowOf(t, db, tenant.Default, "b"), fmt.Sprintf("8 %x k1", bytes.Repeat([]byte{7}, 32)); got != want {
			t.Fatalf("the head after entry 8: %s; want %s", got, want)
		}

		for _, c := range []struct {
			ctx   context.Context
			scope string
		}{{def, "s"}, {acme, "s"}, {def, "t"}} {
			appendIn(c.ctx, t, l, c.scope, 3)
		}
		for _, c := range []struct {
			ctx       context.Context
			tn, scope string
			others    [][2]string
		}{
			{acme, "acme", "s", [][2]string{{tenant.Default, "s"}, {tenant.Default, "t"}}},
			{def, tenant.Default, "s", [][2]string{{"acme", "s"}, {tenant.Default, "t"}}},
			{def, tenant.Default, "t", [][2]string{{"acme", "s"}, {tenant.Default, "s"}}},
		} {
			was := map[[2]string]string{}
			for _, o := range c.others {
				was[o] = headRowOf(t, db, o[0], o[1])
			}
			appendIn(c.ctx, t, l, c.scope, 1) // entry 4, the others' heads at 3 or 4
			for _, o := range c.others {
				if got := headRowOf(t, db, o[0], o[1]); got != was[o] {
					t.Fatalf("an entry of %s/%s moved the head of %s/%s: %s; was %s", c.tn, c.scope, o[0], o[1], got, was[o])
				}
			}
		}
		for _, c := range []struct {
			ctx   context.Context
			scope string
		}{{def, "s"}, {acme, "s"}, {def, "t"}} {
			if res := verifyIn(c.ctx, t, l, c.scope, nil); res.Break != nil || res.Rows != 4 {
				t.Fatalf("%s/%s: %+v; want 4 entries intact", tenant.From(c.ctx), c.scope, res)
			}
		}
	})
}

// TestEdgesPruneAroundARotation: pruning through the entry before a
// rotation entry keeps the old key's epoch (the rotation entry is still
// under it), through the rotation entry or the entry after it re-anchors
// in the new key's; each chain verifies, anchored by the pruning's
// checkpoint, and again after the next append.
func TestEdgesPruneAroundARotation(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		old, l := newLog(t, db, ring(t, "k1")), newLog(t, db, ring(t, "k1", "k2"))
		for through, epoch := range map[int64]string{3: "k1", 4: "k2", 5: "k2"} {
			scope := fmt.Sprint("through", through)
			appendN(t, old, scope, 3)
			appendN(t, l, scope, 2) // 4 rotates to k2 (under k1), 5 and 6 under k2
			p, err := l.Prune(ctx, db, scope, through, "ops")
			if err != nil {
				t.Fatal(err)
			}
			if p.Anchor.Seq != through || p.Anchor.KeyID != epoch {
				t.Errorf("pruned through %d: anchor %+v; want entry %d in the epoch of %s", through, p.Anchor, through, epoch)
			}
			res := verify(t, l, scope, &VerifyOptions{Checkpoints: []Checkpoint{p.Checkpoint}})
			if res.Break != nil || !res.Anchored {
				t.Errorf("pruned through %d: %+v (break %+v); want intact, anchored", through, res, res.Break)
				continue
			}
			appendN(t, l, scope, 1)
			wantIntact(t, verify(t, l, scope, &VerifyOptions{Checkpoints: []Checkpoint{p.Checkpoint}}))
		}
	})
}

// TestEdgesPruneDeleteStaysInItsOwnChain: while one chain's last entry is
// a pruning (its floor at 3), a DELETE of entries at or below 3 of a chain
// that differs from it in the tenant alone, or in the scope alone, is
// refused as append-only; the chains keep every entry and verify.
func TestEdgesPruneDeleteStaysInItsOwnChain(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		def, acme := context.Background(), withTenant(t, "acme")
		l := newLog(t, db, ring(t, "k1"))
		for _, c := range []struct {
			ctx   context.Context
			scope string
		}{{def, "s"}, {acme, "s"}, {def, "t"}} {
			appendIn(c.ctx, t, l, c.scope, 6)
		}
		refused := func(what, stmt string) {
			t.Helper()
			if _, err := db.ExecContext(ctx, stmt); err == nil || !strings.Contains(err.Error(), "append-only") {
				t.Errorf("%s: %s: %v; want refused as append-only", what, stmt, err)
			}
		}
		if _, err := l.Prune(acme, db, "s", 3, "ops"); err != nil {
			t.Fatal(err)
		}
		refused("acme/s pruned through 3", `DELETE FROM racefree_audit WHERE tenant = 'default' AND scope = 's' AND seq <= 3`)
		refused("acme/s pruned through 3", `DELETE FROM racefree_audit WHERE tenant = 'default' AND scope = 's' AND seq = 1`)
		if _, err := l.Prune(def, db, "t", 3, "ops"); err != nil {
			t.Fatal(err)
		}
		refused("default/t pruned through 3", `DELETE FROM racefree_audit WHERE tenant = 'default' AND scope = 's' AND seq <= 3`)
		wantSeqs(t, seqs(t, l, def, "s"), 1, 6)
		wantSeqs(t, seqs(t, l, acme, "s"), 4, 7)
		wantSeqs(t, seqs(t, l, def, "t"), 4, 7)
		for _, c := range []struct {
			ctx   context.Context
			scope string
		}{{def, "s"}, {acme, "s"}, {def, "t"}} {
			wantIntact(t, verifyIn(c.ctx, t, l, c.scope, nil))
		}
	})
}

// TestEdgesPruneInTheCallersTransaction: a pruning in the caller's
// transaction that rolls back deletes nothing, leaves the floor where it
// was and gives its entry's number back; one that commits deletes the
// prefix, and the next append follows its entry. On PostgreSQL an append
// that waits for the pruning's lock gets exactly that: the number given
// back after a rollback, the one after the pruning's entry after a commit;
// and one cancelled while it waits takes no number.
func TestEdgesPruneInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 6)
		e := Entry{Actor: "a", Action: "b"}
		pg := db.Engine() == racefree.Postgres
		// prune prunes through 3 in a transaction of the caller's and ends
		// it with end, while (on PostgreSQL) an Append waits for it; it
		// returns the number the waiting Append, or the next one, got.
		prune := func(end func(*sql.Tx) error) (Pruning, int64) {
			t.Helper()
			tx, err := db.SQL().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			p, err := l.Prune(ctx, tx, "s", 3, "ops")
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				r   Record
				err error
			}
			waiter := make(chan result, 1)
			if pg {
				pid := testdb.BackendPID(t, tx)
				cctx, cancel := context.WithCancel(ctx)
				go func() { r, err := l.Append(cctx, db, "s", e); waiter <- result{r, err} }()
				testdb.BlockedBy(t, db, pid, nil)
				cancel()
				if got := <-waiter; !errors.Is(got.err, context.Canceled) {
					t.Fatalf("an append cancelled while it waits for the pruning: %+v, %v; want context.Canceled", got.r, got.err)
				}
				testdb.Unblocked(t, db, pid, 30*time.Second)
				go func() { r, err := l.Append(ctx, db, "s", e); waiter <- result{r, err} }()
				testdb.BlockedBy(t, db, pid, nil)
			}
			if err := end(tx); err != nil {
				t.Fatal(err)
			}
			if !pg {
				go func() { r, err := l.Append(ctx, db, "s", e); waiter <- result{r, err} }()
			}
			got := <-waiter
			if got.err != nil {
				t.Fatal(got.err)
			}
			return p, got.r.Seq
		}

		p, next := prune((*sql.Tx).Rollback)
		if p.Entry.Seq != 7 || next != 7 {
			t.Fatalf("a pruning rolled back: its entry %d, the next append %d; want both 7", p.Entry.Seq, next)
		}
		wantSeqs(t, seqs(t, l, ctx, "s"), 1, 7)
		if n, err := l.Length(ctx, "s"); err != nil || n != 7 {
			t.Fatalf("length after the rollback: %d, %v; want 7, nothing pruned", n, err)
		}
		if _, err := l.LatestCheckpoint(ctx, "s"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("the rolled-back pruning's checkpoint: %v; want ErrNotFound", err)
		}
		wantIntact(t, verify(t, l, "s", nil))

		p, next = prune((*sql.Tx).Commit)
		if p.Entry.Seq != 8 || p.Deleted != 3 || next != 9 {
			t.Fatalf("a pruning committed: %+v, the next append %d; want entry 8, 3 deleted, then 9", p, next)
		}
		wantSeqs(t, seqs(t, l, ctx, "s"), 4, 9)
		res := verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{p.Checkpoint}})
		if res.Break != nil || !res.Anchored || res.Rows != 6 {
			t.Fatalf("after the committed pruning: %+v; want entries 4..9 intact, anchored", res)
		}
	})
}

// TestEdgesPruneAsTheApplicationRoleInATransaction: on PostgreSQL, Prune
// as the application role in the caller's transaction fails, permission
// denied, after it appended its entry in that transaction: the
// transaction can only roll back (a commit does not commit it), and the
// log is as it was.
func TestEdgesPruneAsTheApplicationRoleInATransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	app := testdb.App(t, owner, d)
	l := newLog(t, app, ring(t, "k1"))
	appendN(t, l, "s", 4)
	before := tenantRows(t, owner, tenant.Default)
	for _, end := range []func(*sql.Tx) error{(*sql.Tx).Commit, (*sql.Tx).Rollback} {
		tx, err := app.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Prune(ctx, tx, "s", 2, "ops"); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("prune as the application role in a transaction: %v; want permission denied", err)
		}
		_ = end(tx)
		if got := tenantRows(t, owner, tenant.Default); got != before {
			t.Fatalf("a refused pruning in the caller's transaction changed the rows:\n%s\nwant\n%s", got, before)
		}
	}
	if r, err := l.Append(ctx, app, "s", Entry{Actor: "a", Action: "b"}); err != nil || r.Seq != 5 {
		t.Fatalf("the next append: %+v, %v; want 5", r, err)
	}
	wantIntact(t, verify(t, l, "s", nil))
}

// TestEdgesPruneAtTheRetentionMigration: at exactly migration 014, the
// version Prune needs (and before 015, so that Append still takes its
// number with the previous release's upsert), Prune deletes the prefix
// and re-anchors, and the chain verifies, anchored by its checkpoint, then
// and after the later migrations.
func TestEdgesPruneAtTheRetentionMigration(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		// 14, spelled out: a test that read RetentionVersion would follow
		// a wrong constant up.
		const retention = 14
		if _, err := db.MigrateUpTo(ctx, retention); err != nil {
			t.Fatal(err)
		}
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 5)
		p, err := l.Prune(ctx, db, "s", 2, "ops")
		if err != nil || p.Deleted != 2 || p.Entry.Seq != 6 {
			t.Fatalf("prune on schema %d: %+v, %v; want 2 deleted, entry 6 the pruning", retention, p, err)
		}
		wantSeqs(t, seqs(t, l, ctx, "s"), 3, 6)
		cps := []Checkpoint{p.Checkpoint}
		if res := verify(t, l, "s", &VerifyOptions{Checkpoints: cps}); res.Break != nil || !res.Anchored || res.Rows != 4 {
			t.Fatalf("verify on schema %d: %+v; want entries 3..6 intact, anchored", retention, res)
		}
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		appendN(t, l, "s", 1)
		if res := verify(t, l, "s", &VerifyOptions{Checkpoints: cps}); res.Break != nil || !res.Anchored || res.Rows != 5 {
			t.Fatalf("verify after the later migrations: %+v; want entries 3..7 intact, anchored", res)
		}
	})
}

// TestEdgesKeyringAtItsBounds: a key id of MaxKeyIDLen bytes is taken on
// every kind of line and by Keygen, one byte more refused; a key of 32
// bytes is taken, one of 31 or 33 refused, on every kind of line, with an
// error naming the line and the id and never the key.
func TestEdgesKeyringAtItsBounds(t *testing.T) {
	t.Parallel()
	at, past := strings.Repeat("i", MaxKeyIDLen), strings.Repeat("i", MaxKeyIDLen+1)
	enc := base64.StdEncoding.EncodeToString
	key := func(n int) string { return enc(bytes.Repeat([]byte{9}, n)) }
	for _, kind := range []string{"mac", "sign", "verify"} {
		mac := ""
		if kind != "mac" {
			mac = "mac m " + key(32) + "\n"
		}
		if _, err := ParseKeyring(mac + kind + " " + at + " " + key(32)); err != nil {
			t.Errorf("a %s key id of MaxKeyIDLen bytes: %v; want parsed", kind, err)
		}
		if _, err := ParseKeyring(mac + kind + " " + past + " " + key(32)); err == nil {
			t.Errorf("a %s key id one past MaxKeyIDLen parsed", kind)
		}
		for _, n := range []int{31, 33} {
			_, err := ParseKeyring(mac + kind + " id " + key(n))
			if err == nil {
				t.Errorf("a %s key of %d bytes parsed; want refused", kind, n)
				continue
			}
			if msg := err.Error(); strings.Contains(msg, key(n)) || strings.Contains(msg, key(n)[:40]) || !strings.Contains(msg, `"id"`) {
				t.Errorf("a %s key of %d bytes: error %q; want the id named and no key", kind, n, msg)
			}
		}
	}
	var buf bytes.Buffer
	if err := Keygen(&buf, at, at); err != nil {
		t.Fatalf("keygen with ids of MaxKeyIDLen bytes: %v", err)
	}
	if k, err := ParseKeyring(buf.String()); err != nil || k.Current() != at || k.Signer() != at {
		t.Fatalf("keygen's keyring: %v, %v", k, err)
	}
	for _, ids := range [][2]string{{past, "s"}, {"m", past}} {
		if err := Keygen(io.Discard, ids[0], ids[1]); err == nil {
			t.Errorf("keygen with a key id one past MaxKeyIDLen: no error")
		}
	}
}

// TestEdgesTimelineEntryAtEachBound: a timeline entry at each bound its
// verifier accepts verifies intact and is reported (the entry just before
// it as the last one kept, entry 0, timeline 1 on either side), and one
// changed alone past a bound is modified at it: the new timeline 0, the
// old one 0, both the same, the last entry kept its own number or -1, its
// subject another spelling of the new timeline, its data cut short.
func TestEdgesTimelineEntryAtEachBound(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		raw := func(subject, data string) Entry {
			return Entry{Actor: "racefree", Action: ActionTimelineChanged, Subject: subject, Data: []byte(data)}
		}
		cases := []struct {
			name string
			e    Entry
			want *TimelineChange // nil: modified
		}{
			{"the entry before it kept", timelineEntry(1, 2, 2), &TimelineChange{Seq: 3, From: 1, To: 2, LastSeq: 2}},
			{"entry 0 kept, to timeline 1", timelineEntry(2, 1, 0), &TimelineChange{Seq: 3, From: 2, To: 1, LastSeq: 0}},
			{"to timeline 0", timelineEntry(1, 0, 2), nil},
			{"from timeline 0", timelineEntry(0, 2, 2), nil},
			{"the same timeline", timelineEntry(2, 2, 2), nil},
			{"its own number kept", timelineEntry(1, 2, 3), nil},
			{"entry -1 kept", timelineEntry(1, 2, -1), nil},
			{"the subject 02", raw("02", `{"from":1,"to":2,"last_seq":2}`), nil},
			{"the data cut short", raw("2", `{"from":1,"to":2,"last_seq":2`), nil},
		}
		for i, c := range cases {
			scope := fmt.Sprint("tl", i)
			appendN(t, l, scope, 2)
			err := l.inTx(ctx, db, func(tx *sql.Tx) error {
				_, err := l.appendShaped(ctx, tx, tenant.Default, scope, c.e, shapeTimeline)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			res := verify(t, l, scope, nil)
			switch {
			case c.want == nil && (res.Break == nil || res.Break.Kind != Modified || res.Break.Seq != 3):
				t.Errorf("%s: %+v (break %+v); want modified at 3", c.name, res, res.Break)
			case c.want != nil && (res.Break != nil || !slices.Equal(res.PossibleLoss, []TimelineChange{*c.want}) || len(res.Warnings) != 1):
				t.Errorf("%s: %+v (break %+v); want intact, reporting %+v", c.name, res, res.Break, *c.want)
			}
		}
	})
}

// TestEdgesTimelineMoveInTheCallersTransaction (PostgreSQL; the heads'
// timelines set by hand to stand for a failover): the first append on
// another timeline in the caller's transaction that rolls back records
// nothing, and the head keeps the old timeline, so the next append records
// the move; the move of one chain is recorded in that chain only: two
// tenants' chains of one scope, both moved, record one each, and another
// scope of the tenant, not moved, none; a head with no timeline (the
// previous release's) gets the server's from a committed append only,
// without an entry.
func TestEdgesTimelineMoveInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	def, acme := context.Background(), withTenant(t, "acme")
	l := newLog(t, db, ring(t, "k1"))
	for _, c := range []struct {
		ctx   context.Context
		scope string
	}{{def, "s"}, {acme, "s"}, {def, "t"}, {def, "u"}} {
		appendIn(c.ctx, t, l, c.scope, 2)
	}
	timeline := func(tn, scope string) sql.NullInt64 {
		t.Helper()
		var tl sql.NullInt64
		if err := db.QueryRowContext(ctx, `SELECT timeline FROM racefree_audit_heads WHERE tenant = $1 AND scope = $2`, tn, scope).Scan(&tl); err != nil {
			t.Fatal(err)
		}
		return tl
	}
	server := timeline(tenant.Default, "s")
	if !server.Valid || server.Int64 < 1 {
		t.Fatalf("the head's timeline after an append: %+v; want the server's", server)
	}
	old := server.Int64 + 1
	if _, err := db.ExecContext(ctx, `UPDATE racefree_audit_heads SET timeline = $1 WHERE scope = 's'`, old); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE racefree_audit_heads SET timeline = NULL WHERE scope = 'u'`); err != nil {
		t.Fatal(err)
	}
	inTx := func(c context.Context, scope string, end func(*sql.Tx) error) {
		t.Helper()
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := l.Append(c, tx, scope, Entry{Actor: "a", Action: "in-tx"}); err != nil {
			t.Fatal(err)
		}
		if err := end(tx); err != nil {
			t.Fatal(err)
		}
	}
	inTx(def, "s", (*sql.Tx).Rollback)
	inTx(def, "u", (*sql.Tx).Rollback)
	if tl, n := timeline(tenant.Default, "s"), len(timelineEntries(t, l, "s")); tl.Int64 != old || n != 0 {
		t.Fatalf("after a rolled-back append on another timeline: head timeline %+v, %d timeline entries; want %d and none", tl, n, old)
	}
	if tl := timeline(tenant.Default, "u"); tl.Valid {
		t.Fatalf("a head without a timeline after a rolled-back append: %+v; want still none", tl)
	}
	inTx(def, "s", (*sql.Tx).Commit)
	inTx(def, "u", (*sql.Tx).Commit)
	appendIn(acme, t, l, "s", 1)
	appendIn(def, t, l, "t", 1)
	want := []TimelineChange{{Seq: 3, From: old, To: server.Int64, LastSeq: 2}}
	for _, c := range []struct {
		ctx      context.Context
		scope    string
		possLoss []TimelineChange
	}{{def, "s", want}, {acme, "s", want}, {def, "t", nil}, {def, "u", nil}} {
		tn := tenant.From(c.ctx)
		res := verifyIn(c.ctx, t, l, c.scope, nil)
		rows := int64(3 + len(c.possLoss))
		if res.Break != nil || res.Rows != rows || !slices.Equal(res.PossibleLoss, c.possLoss) {
			t.Errorf("%s/%s: %+v; want %d entries intact, possible loss %+v", tn, c.scope, res, rows, c.possLoss)
		}
		if tl := timeline(tn, c.scope); tl != server {
			t.Errorf("%s/%s: head timeline %+v; want the server's, %d", tn, c.scope, tl, server.Int64)
		}
	}
}

// TestEdgesProgressOfOneStream: a verification that reads the chain in
// one stream reports its progress every VerifyOptions.every entries
// checked and once at the end with the whole count, and without a
// Progress function reports nothing and still checks every entry.
func TestEdgesProgressOfOneStream(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 10)
		var progress []int64
		res := verify(t, l, "s", &VerifyOptions{Streams: 1, every: 4, Progress: func(n int64) { progress = append(progress, n) }})
		wantIntact(t, res)
		if fmt.Sprint(progress) != "[4 8 10]" {
			t.Fatalf("progress %v, want [4 8 10]: every 4 entries, then the 10 checked", progress)
		}
		if res := verify(t, l, "s", &VerifyOptions{Streams: 1, every: 4}); res.Break != nil || res.Rows != 10 {
			t.Fatalf("without Progress: %+v, want 10 entries intact", res)
		}
	})
}

// TestEdgesVerifyResumedAtACheckpointOfAnotherEntry resumes Verify exactly
// at the entry a checkpoint vouches for, where the log, restored to an
// older copy and appended to again, now holds another entry, the one the
// resumed position names: the verification reads nothing up to there, so
// only the checkpoint tells it, and it is rolled_back at that entry,
// never intact and anchored. Resumed one entry earlier, the stream reads
// the entry and finds the same.
func TestEdgesVerifyResumedAtACheckpointOfAnotherEntry(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 5)
		cp, err := l.Checkpoint(ctx, db, "s")
		if err != nil || cp.Seq != 5 {
			t.Fatalf("checkpoint %+v, %v; want one of entry 5", cp, err)
		}
		r4 := entryRow(t, l, "s", 4)
		tamper(t, db, `DELETE FROM racefree_audit WHERE scope = 's' AND seq = 5`,
			`UPDATE racefree_audit_heads SET last_seq = 4, last_mac = `+blob(db, r4.MAC)+` WHERE scope = 's'`)
		appendN(t, l, "s", 1) // entry 5 of another history
		at5 := verify(t, l, "s", nil).Verified
		if at5.Seq != 5 {
			t.Fatalf("verified to %+v; want entry 5", at5)
		}
		res := verify(t, l, "s", &VerifyOptions{After: &at5, Checkpoints: []Checkpoint{cp}})
		wantBreak(t, res, RolledBack, 5)
		if res.Anchored {
			t.Fatalf("%+v: anchored by a checkpoint of another entry", res)
		}
		at4 := Position{Seq: 4, MAC: r4.MAC, KeyID: r4.KeyID}
		wantBreak(t, verify(t, l, "s", &VerifyOptions{After: &at4, Checkpoints: []Checkpoint{cp}}), RolledBack, 5)
	})
}

// TestEdgesPrunedEntryNamesAnAnchorBeforeIt: a pruned entry must name as
// its anchor an entry before it, from entry 1 on. A pruning through entry
// 1, the first, verifies intact; a pruned entry written with the key,
// its MAC valid, that names itself is modified, and so is one that names
// entry 0.
func TestEdgesPrunedEntryNamesAnAnchorBeforeIt(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "first", 3)
		if _, err := l.Prune(ctx, db, "first", 1, "ops"); err != nil {
			t.Fatal(err)
		}
		wantIntact(t, verify(t, l, "first", nil))

		appendN(t, l, "forged0", 2)
		appendN(t, l, "forged1", 2)
		chainOff(t, db) // rows written by hand, as a holder of the key could
		for i, through := range []int64{3, 0} {
			scope := fmt.Sprint("forged", i)
			r2 := entryRow(t, l, scope, 2)
			data, err := json.Marshal(pruneRecord{Through: through, MAC: r2.MAC, KeyID: "k1"})
			if err != nil {
				t.Fatal(err)
			}
			key, _ := l.ring.scopeKey("k1", scope)
			in := entryInput{tenant.Default, scope, 3, r2.MAC, time.Now().UnixMilli(), "ops", ActionPruned, "", data}
			mac := newMacer(key).sum(&in)
			ph := func(i int) string {
				if db.Engine() == racefree.Postgres {
					return fmt.Sprint("$", i)
				}
				return fmt.Sprint("?", i)
			}
			q := `INSERT INTO racefree_audit (tenant, scope, seq, at, actor, action, subject, data, key_id, prev_mac, mac) VALUES (`
			for j := 1; j <= 11; j++ {
				q += ph(j)
				if j < 11 {
					q += ", "
				}
			}
			if _, err := db.ExecContext(ctx, q+`)`, tenant.Default, scope, int64(3), in.at, in.actor, in.action, in.subject, in.data, "k1", r2.MAC, mac); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `UPDATE racefree_audit_heads SET last_seq = 3, last_mac = `+ph(1)+` WHERE scope = `+ph(2), mac, scope); err != nil {
				t.Fatal(err)
			}
			wantBreak(t, verify(t, l, scope, nil), Modified, 3)
		}
	})
}

// TestEdgesVerifyAllWithCheckpoints: VerifyAll verifies every scope with
// entries once, and, from the checkpoints it is given, every scope whose
// whole log is gone too, which then breaks against its checkpoint
// instead of going unreported; a scope with entries and checkpoints is
// verified once, against them.
func TestEdgesVerifyAllWithCheckpoints(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		cps := map[string][]Checkpoint{}
		for _, s := range []string{"a", "b", "gone"} {
			appendN(t, l, s, 3)
			if s != "b" {
				cp, err := l.Checkpoint(ctx, db, s)
				if err != nil {
					t.Fatal(err)
				}
				cps[s] = []Checkpoint{cp}
			}
		}
		tamper(t, db, `DELETE FROM racefree_audit WHERE scope = 'gone'`,
			`DELETE FROM racefree_audit_checkpoints WHERE scope = 'gone'`,
			`DELETE FROM racefree_audit_heads WHERE scope = 'gone'`)
		res, err := l.VerifyAll(ctx, 2, cps)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]Result{}
		for _, r := range res {
			if _, twice := got[r.Scope]; twice {
				t.Fatalf("scope %s verified twice: %+v", r.Scope, res)
			}
			got[r.Scope] = r
		}
		if len(got) != 3 {
			t.Fatalf("results %+v; want one for each of a, b and gone", res)
		}
		if r := got["a"]; r.Break != nil || !r.Anchored {
			t.Errorf("a: %+v; want intact, anchored by its checkpoint", r)
		}
		if r := got["b"]; r.Break != nil || r.Anchored {
			t.Errorf("b: %+v; want intact, not anchored (no checkpoint given)", r)
		}
		if r := got["gone"]; r.Break == nil {
			t.Errorf("gone: %+v; want a break: its checkpoint vouches for 3 entries", r)
		}
	})
}

// TestEdgesVerifyAllJudgesAScopeWithoutItsHead deletes the head rows of
// billing and unsigned (their entries stay; billing has a stored
// checkpoint, unsigned none), and of gone with its entries (its stored
// checkpoint stays), next to an untouched scope (login) and another
// tenant's scope: Scopes lists all four of the tenant's scopes, by their
// entries or by their checkpoints, not only those with a head row, and
// never the other tenant's; VerifyAll with no checkpoints judges billing
// and unsigned truncated (entries with no head row to count them), gone
// intact and empty (nothing to check without its checkpoint) and login
// intact; given the checkpoints, billing and gone are rolled back and
// login anchored.
func TestEdgesVerifyAllJudgesAScopeWithoutItsHead(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		cps := map[string][]Checkpoint{}
		for _, s := range []string{"billing", "gone", "login", "unsigned"} {
			appendN(t, l, s, 3)
			if s == "unsigned" {
				continue
			}
			cp, err := l.Checkpoint(ctx, db, s)
			if err != nil {
				t.Fatal(err)
			}
			cps[s] = []Checkpoint{cp}
		}
		other, _ := tenant.With(context.Background(), "globex")
		appendIn(other, t, l, "other", 1)
		tamper(t, db, `DELETE FROM racefree_audit_heads WHERE scope = 'billing'`,
			`DELETE FROM racefree_audit_heads WHERE scope = 'gone'`,
			`DELETE FROM racefree_audit WHERE scope = 'gone'`,
			`DELETE FROM racefree_audit_heads WHERE scope = 'unsigned'`)
		all := []string{"billing", "gone", "login", "unsigned"}
		if got, err := l.Scopes(ctx); err != nil || !slices.Equal(got, all) {
			t.Fatalf("Scopes = %q, %v; want %q", got, err, all)
		}
		judge := func(cps map[string][]Checkpoint) map[string]Result {
			t.Helper()
			res, err := l.VerifyAll(ctx, 2, cps)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]Result{}
			for _, r := range res {
				got[r.Scope] = r
			}
			if len(got) != len(all) || len(res) != len(all) {
				t.Fatalf("results %+v; want one for each of %q", res, all)
			}
			return got
		}
		got := judge(nil)
		for _, s := range []string{"billing", "unsigned"} {
			if r := got[s]; r.Break == nil || r.Break.Kind != Truncated || r.Break.Seq != 4 {
				t.Errorf("%s without checkpoints: %+v; want truncated at 4: no head row counts its 3 entries", s, r)
			}
		}
		if r := got["gone"]; r.Break != nil || r.Rows != 0 {
			t.Errorf("gone without checkpoints: %+v; want intact and empty", r)
		}
		if r := got["login"]; r.Break != nil || r.Rows != 3 {
			t.Errorf("login without checkpoints: %+v; want intact, 3 entries", r)
		}
		got = judge(cps)
		for _, s := range []string{"billing", "gone"} {
			if r := got[s]; r.Break == nil || r.Break.Kind != RolledBack {
				t.Errorf("%s with its checkpoint: %+v; want rolled back", s, r)
			}
		}
		if r := got["login"]; r.Break != nil || !r.Anchored {
			t.Errorf("login with its checkpoint: %+v; want intact, anchored", r)
		}
	})
}

// TestEdgesReorderedAtTheWindowsEdges moves an entry, MAC and prev_mac
// included, exactly reorderWindow places away (Reordered, naming where it
// belongs) and one place further (Modified: Verify does not look that
// far), later in the chain and earlier; and the chain's first entry one
// place on (the window's lowest number is 1).
func TestEdgesReorderedAtTheWindowsEdges(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		for _, c := range []struct {
			from, to int64 // entry from's row copied over entry to's
			kind     Kind
		}{
			{3 + reorderWindow, 3, Reordered},
			{4 + reorderWindow, 3, Modified},
			{3, 3 + reorderWindow, Reordered},
			{3, 4 + reorderWindow, Modified},
			{1, 2, Reordered},
		} {
			scope := fmt.Sprintf("s%d-%d", c.from, c.to)
			l := newLog(t, db, ring(t, "k1"))
			appendN(t, l, scope, 40)
			r := entryRow(t, l, scope, c.from)
			tamper(t, db, fmt.Sprintf(`UPDATE racefree_audit SET at = %d, actor = '%s', action = '%s', subject = '%s', data = %s, prev_mac = %s, mac = %s WHERE scope = '%s' AND seq = %d`,
				r.At.UnixMilli(), r.Actor, r.Action, r.Subject, blob(db, r.Data), blob(db, r.PrevMAC), blob(db, r.MAC), scope, c.to))
			res := verify(t, l, scope, nil)
			wantBreak(t, res, c.kind, c.to)
			if want := fmt.Sprintf("belongs at %d", c.from); c.kind == Reordered && !strings.Contains(res.Break.Detail, want) {
				t.Fatalf("entry %d at %d: detail %q, want %q in it", c.from, c.to, res.Break.Detail, want)
			}
		}
	})
}

// TestEdgesCheckpointsOfOneEntry takes two checkpoints with no entry
// appended between them: both vouch for the same entry, and the pair
// anchors the chain (a later checkpoint may stand at its predecessor's
// entry, never before it).
func TestEdgesCheckpointsOfOneEntry(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 3)
		var cps []Checkpoint
		for range 2 {
			cp, err := l.Checkpoint(ctx, db, "s")
			if err != nil {
				t.Fatal(err)
			}
			cps = append(cps, cp)
		}
		if cps[0].Seq != 3 || cps[1].Seq != 3 || cps[1].N != cps[0].N+1 {
			t.Fatalf("checkpoints %+v; want two in a row at entry 3", cps)
		}
		res := verify(t, l, "s", &VerifyOptions{Checkpoints: cps})
		if !res.Anchored || res.Break != nil || res.Rows != 3 {
			t.Fatalf("verify against two checkpoints of one entry: %+v (break %+v); want 3 rows, anchored, intact", res, res.Break)
		}
	})
}
