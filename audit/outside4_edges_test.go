package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestOutside4EdgesFieldLengthsPastOneByte: each field of the MAC input is
// prefixed with its whole length (a uvarint), not with its length in one
// byte. An entry whose subject is 256 bytes, beginning with the byte that
// is its data's length (65, "A"), is rewritten in the database with an
// empty subject and the subject's other bytes, that byte and the data as
// its data: prefixed with lengths in one byte (256 and 321 wrap to 0 and
// 65), both encode alike; with the whole lengths they do not, so the entry
// is modified at its number, and its neighbours and the same entry of
// another tenant are left intact. An entry with fields at 127, 128, 255
// and 256 bytes verifies as appended.
func TestOutside4EdgesFieldLengthsPastOneByte(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, acme := context.Background(), withTenant(t, "acme")
		l := newLog(t, db, ring(t, "k1"))
		data := bytes.Repeat([]byte("y"), 65)
		subject := "A" + string(bytes.Repeat([]byte("x"), 255))
		for _, c := range []context.Context{acme, ctx} {
			appendIn(c, t, l, "s", 1)
			if _, err := l.Append(c, db, "s", Entry{Actor: "alice", Action: "write", Subject: subject, Data: data}); err != nil {
				t.Fatal(err)
			}
			appendIn(c, t, l, "s", 1)
			wantIntact(t, verifyIn(c, t, l, "s", nil))
		}

		moved := append([]byte(subject[1:]), 'A')
		moved = append(moved, data...)
		tamperIn(t, db, "acme", "s", `UPDATE racefree_audit SET subject = '', data = `+blob(db, moved)+` WHERE tenant = %[1]s AND scope = %[2]s AND seq = 2`)
		if r := entryRowIn(acme, t, l, "s", 2); r.Subject != "" || !bytes.Equal(r.Data, moved) {
			t.Fatalf("entry 2 after the rewrite: %+v; want an empty subject and the subject's bytes in the data", r)
		}
		res := verifyIn(acme, t, l, "s", nil)
		wantBreak(t, res, Modified, 2)
		if res.Rows != 1 || res.Verified.Seq != 1 {
			t.Fatalf("the subject moved into the data: %+v; want entry 1 verified before the break", res)
		}
		if res := verifyIn(ctx, t, l, "s", nil); res.Break != nil || res.Rows != 3 {
			t.Fatalf("the default tenant's same entry: %+v (break %+v); want intact, 3 entries", res, res.Break)
		}

		for _, n := range []int{127, 128, 255, 256} {
			scope := fmt.Sprintf("len%d", n)
			f := string(bytes.Repeat([]byte("z"), n))
			if _, err := l.Append(acme, db, scope, Entry{Actor: f[:min(n, MaxActorLen)], Action: f[:min(n, MaxActionLen)], Subject: f, Data: []byte(f)}); err != nil {
				t.Fatal(err)
			}
			appendIn(acme, t, l, scope, 1)
			if res := verifyIn(acme, t, l, scope, nil); res.Break != nil || res.Rows != 2 {
				t.Fatalf("fields of %d bytes: %+v (break %+v); want intact, 2 entries", n, res, res.Break)
			}
		}
	})
}

// TestOutside4EdgesPruneBoundsOfItsOwnTenant: Prune checks through against
// the pruning tenant's own chain of the scope, never the scope of the same
// name of another tenant. In four scopes, one tenant's chain is 3 entries
// and the other's 10 (each tenant the short one in two of them, each
// appended first in one and last in the other, so that whichever head
// row a read without the tenant finds first, some scope finds the long
// one): pruning the short chain through 4, one past its last entry, is an
// InputError and changes nothing, through its last entry (3) it prunes
// it, and the long chain of the same name is left as it was, then prunes
// through 5 of its own and verifies; the short chain, pruned through 3,
// then refuses 3 again, and a floor of 5 in the other tenant does not
// make it refuse anything it may prune.
func TestOutside4EdgesPruneBoundsOfItsOwnTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		acme, other := withTenant(t, "acme"), withTenant(t, tenant.Default)
		l := newLog(t, db, ring(t, "k1"))
		type chain struct {
			short, long context.Context
			scope       string
			shortFirst  bool
		}
		chains := []chain{
			{acme, other, "s1", true},
			{acme, other, "s2", false},
			{other, acme, "s3", true},
			{other, acme, "s4", false},
		}
		for _, c := range chains {
			if c.shortFirst {
				appendIn(c.short, t, l, c.scope, 3)
				appendIn(c.long, t, l, c.scope, 10)
			} else {
				appendIn(c.long, t, l, c.scope, 10)
				appendIn(c.short, t, l, c.scope, 3)
			}
		}
		for _, c := range chains {
			before := headRowOf(t, db, tenant.From(c.long), c.scope)
			_, err := l.Prune(c.short, db, c.scope, 4, "ops")
			wantInput(t, err, fmt.Sprintf("%s of tenant %s: Prune through 4 of 3 entries", c.scope, tenant.From(c.short)))
			wantSeqs(t, seqs(t, l, c.short, c.scope), 1, 3)
			if res := verifyIn(c.short, t, l, c.scope, nil); res.Break != nil || res.Rows != 3 {
				t.Fatalf("%s of tenant %s after a refused pruning: %+v (break %+v); want intact, 3 entries", c.scope, tenant.From(c.short), res, res.Break)
			}

			p, err := l.Prune(c.short, db, c.scope, 3, "ops")
			if err != nil || p.Deleted != 3 || p.Anchor.Seq != 3 {
				t.Fatalf("%s of tenant %s: Prune through its last entry = %+v, %v; want 3 deleted", c.scope, tenant.From(c.short), p, err)
			}
			if after := headRowOf(t, db, tenant.From(c.long), c.scope); after != before {
				t.Fatalf("%s of tenant %s: head %s after the other tenant's pruning; want %s", c.scope, tenant.From(c.long), after, before)
			}
			wantSeqs(t, seqs(t, l, c.long, c.scope), 1, 10)

			q, err := l.Prune(c.long, db, c.scope, 5, "ops")
			if err != nil || q.Deleted != 5 {
				t.Fatalf("%s of tenant %s: Prune through 5 = %+v, %v; want 5 deleted", c.scope, tenant.From(c.long), q, err)
			}
			_, err = l.Prune(c.short, db, c.scope, 3, "ops")
			wantInput(t, err, fmt.Sprintf("%s of tenant %s: Prune through its floor", c.scope, tenant.From(c.short)))
			// Through 4 is now the pruned entry (4), above the floor (3).
			if r, err := l.Prune(c.short, db, c.scope, 4, "ops"); err != nil || r.Deleted != 1 {
				t.Fatalf("%s of tenant %s: Prune through 4 above its floor of 3 = %+v, %v; want 1 deleted", c.scope, tenant.From(c.short), r, err)
			}
			for _, ctx := range []context.Context{c.short, c.long} {
				if res := verifyIn(ctx, t, l, c.scope, nil); res.Break != nil {
					t.Fatalf("%s of tenant %s after the prunings: break %+v; want intact", c.scope, tenant.From(ctx), res.Break)
				}
			}
		}
	})
}

// TestOutside4EdgesAppendKeyedFieldLengthsPastOneByte: AppendKeyed's
// fingerprint prefixes each field with its whole length, as the MAC input
// does: the same key sent again with a 256-byte subject (beginning with
// the byte that is its data's length, 65) moved into the data, so that
// lengths in one byte (256 and 321 wrap to 0 and 65) would join to the
// same bytes, is another request, racefree.ErrMismatch, and appends
// nothing; the first entry sent again replays.
func TestOutside4EdgesAppendKeyedFieldLengthsPastOneByte(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, keys := newLog(t, db, ring(t, "k1")), idempotency.New(db, nil)
		data := bytes.Repeat([]byte("y"), 65)
		subject := "A" + string(bytes.Repeat([]byte("x"), 255))
		moved := append([]byte(subject[1:]), 'A')
		moved = append(moved, data...)
		e := Entry{Actor: "alice", Action: "write", Subject: subject, Data: data}
		other := Entry{Actor: "alice", Action: "write", Data: moved}
		if _, replayed, err := l.AppendKeyed(ctx, db, keys, "s", e, "k"); err != nil || replayed {
			t.Fatalf("AppendKeyed: replayed %v, %v", replayed, err)
		}
		if _, _, err := l.AppendKeyed(ctx, db, keys, "s", other, "k"); !errors.Is(err, racefree.ErrMismatch) {
			t.Fatalf("the same key with the subject moved into the data: %v; want racefree.ErrMismatch", err)
		}
		if rec, replayed, err := l.AppendKeyed(ctx, db, keys, "s", e, "k"); err != nil || !replayed || rec.Subject != subject || rec.Seq != 1 {
			t.Fatalf("AppendKeyed again: %+v, replayed %v, %v; want entry 1 replayed", rec, replayed, err)
		}
		if n, err := l.Length(ctx, "s"); err != nil || n != 1 {
			t.Fatalf("%d entries, %v; want 1", n, err)
		}
	})
}

// TestOutside4EdgesPruneWaitsForAConcurrentPruning: on PostgreSQL, Prune
// reads the head's last entry and floor under the head row's lock, so a
// pruning that starts while another one through entry 5 is uncommitted
// waits for it and then judges the committed floor: through 5 again it is
// an InputError that changes nothing (one pruned entry in the chain, not
// two), through 6 it prunes the one entry above the floor; the chain
// verifies either way.
func TestOutside4EdgesPruneWaitsForAConcurrentPruning(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	ctx := context.Background()
	l := newLog(t, db, ring(t, "k1"))
	for _, c := range []struct {
		scope   string
		through int64
		deleted int64 // -1: refused
	}{{"again", 5, -1}, {"next", 6, 1}} {
		appendN(t, l, c.scope, 10)
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Prune(ctx, tx, c.scope, 5, "ops"); err != nil {
			_ = tx.Rollback()
			t.Fatalf("%s: the first pruning: %v", c.scope, err)
		}
		type outcome struct {
			p   Pruning
			err error
		}
		pid := testdb.BackendPID(t, tx)
		done := make(chan outcome, 1)
		returned := make(chan struct{})
		go func() {
			p, err := l.Prune(ctx, db, c.scope, c.through, "ops")
			done <- outcome{p, err}
			close(returned)
		}()
		if !testdb.BlockedBy(t, db, pid, returned) {
			o := <-done
			_ = tx.Rollback()
			t.Fatalf("%s: Prune through %d did not wait for the uncommitted pruning: %+v, %v", c.scope, c.through, o.p, o.err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		o := <-done
		pruned := 1
		if c.deleted < 0 {
			wantInput(t, o.err, fmt.Sprintf("%s: Prune through %d after a pruning through 5 committed", c.scope, c.through))
		} else {
			if o.err != nil || o.p.Deleted != c.deleted {
				t.Fatalf("%s: Prune through %d after a pruning through 5 committed: %+v, %v; want %d deleted", c.scope, c.through, o.p, o.err, c.deleted)
			}
			pruned = 2
		}
		rs, err := l.List(ctx, c.scope, 0, MaxListLimit)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range rs {
			if r.Action == ActionPruned {
				n++
			}
		}
		if n != pruned {
			t.Fatalf("%s: %d pruned entries in %+v; want %d", c.scope, n, rs, pruned)
		}
		wantIntact(t, verify(t, l, c.scope, nil))
	}
}
