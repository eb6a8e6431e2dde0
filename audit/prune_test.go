package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// seqs returns the numbers of every entry of scope, in order.
func seqs(t testing.TB, l *Log, ctx context.Context, scope string) []int64 {
	t.Helper()
	var out []int64
	for after := int64(0); ; {
		rs, err := l.List(ctx, scope, after, MaxListLimit)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) == 0 {
			return out
		}
		for _, r := range rs {
			out = append(out, r.Seq)
		}
		after = rs[len(rs)-1].Seq
	}
}

func wantSeqs(t testing.TB, got []int64, from, to int64) {
	t.Helper()
	if len(got) != int(to-from+1) || got[0] != from || got[len(got)-1] != to {
		t.Fatalf("entries %v; want exactly %d..%d", got, from, to)
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+1 {
			t.Fatalf("entries %v: a gap after %d", got, got[i-1])
		}
	}
}

func wantInput(t testing.TB, err error, what string) {
	t.Helper()
	var ie *racefree.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("%s: %v; want an *InputError", what, err)
	}
}

// TestPruneDeletesThePrefixAndReAnchors: Prune deletes entries 1 through
// the anchor, records the pruning in the chain and signs a checkpoint;
// Verify then starts at the anchor and finds the scope intact, anchored by
// the checkpoints exported before and by the pruning, and again after more
// appends and a second pruning. Bad input changes nothing, callers cannot
// append a pruned entry themselves, and another tenant's scope of the same
// name is left alone.
func TestPruneDeletesThePrefixAndReAnchors(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		acme := withTenant(t, "acme")
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 10)
		appendIn(acme, t, l, "s", 3)
		acmeBefore := tenantRows(t, db, "acme")
		cp1, err := l.Checkpoint(ctx, db, "s")
		if err != nil {
			t.Fatal(err)
		}
		r6 := entryRow(t, l, "s", 6)
		p, err := l.Prune(ctx, db, "s", 6, "ops")
		if err != nil {
			t.Fatal(err)
		}
		if p.Deleted != 6 || p.Anchor.Seq != 6 || string(p.Anchor.MAC) != string(r6.MAC) || p.Anchor.KeyID != "k1" {
			t.Fatalf("pruning %+v; want 6 deleted, anchored at entry 6 under k1", p)
		}
		if p.Entry.Seq != 11 || p.Entry.Action != ActionPruned || p.Entry.Actor != "ops" || p.Checkpoint.Seq != 11 || p.Checkpoint.N != 2 {
			t.Fatalf("pruning entry %+v, checkpoint %+v; want entry 11 by ops, checkpoint 2 of it", p.Entry, p.Checkpoint)
		}
		wantSeqs(t, seqs(t, l, ctx, "s"), 7, 11)
		res := verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp1, p.Checkpoint}})
		wantIntact(t, res)
		if !res.Anchored || res.Rows != 5 || res.Verified.Seq != 11 {
			t.Fatalf("after pruning: %+v; want 5 entries verified up to 11, anchored", res)
		}
		if n, err := l.Length(ctx, "s"); err != nil || n != 5 {
			t.Fatalf("length %d, %v; want 5", n, err)
		}
		if got := tenantRows(t, db, "acme"); got != acmeBefore {
			t.Fatalf("tenant acme's rows changed:\n%s\nwant\n%s", got, acmeBefore)
		}
		wantIntact(t, verifyIn(acme, t, l, "s", nil))

		// Bad input is refused and changes nothing.
		before := tenantRows(t, db, "default")
		for _, through := range []int64{0, 3, 6, 12} {
			_, err := l.Prune(ctx, db, "s", through, "ops")
			wantInput(t, err, fmt.Sprintf("prune through %d", through))
		}
		_, err = l.Prune(ctx, db, "s", 8, "")
		wantInput(t, err, "prune without an actor")
		_, err = l.Append(ctx, db, "s", Entry{Actor: "mallory", Action: ActionPruned, Data: []byte(`{"through":9}`)})
		wantInput(t, err, "append of a pruned entry")
		if _, err := l.Prune(ctx, db, "nothing", 1, "ops"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("prune of a scope without entries: %v; want ErrNotFound", err)
		}
		if got := tenantRows(t, db, "default"); got != before {
			t.Fatalf("refused prunings changed the rows:\n%s\nwant\n%s", got, before)
		}

		appendN(t, l, "s", 2)
		r9 := entryRow(t, l, "s", 9)
		p2, err := l.Prune(ctx, db, "s", 9, "ops")
		if err != nil || p2.Deleted != 3 || p2.Entry.Seq != 14 {
			t.Fatalf("second pruning: %+v, %v; want entries 7..9 deleted, recorded at 14", p2, err)
		}
		wantSeqs(t, seqs(t, l, ctx, "s"), 10, 14)
		wantIntact(t, verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp1, p.Checkpoint, p2.Checkpoint}}))
		// A verifier that had verified up to entry 8, now pruned, resumes
		// from the anchor.
		wantIntact(t, verify(t, l, "s", &VerifyOptions{After: &Position{Seq: 8, MAC: p.Entry.MAC, KeyID: "k1"}}))
		// One that had verified up to entry 9, the last one pruned (the
		// floor), resumes from it: pruned, it is not there to compare.
		wantIntact(t, verify(t, l, "s", &VerifyOptions{After: &Position{Seq: 9, MAC: r9.MAC, KeyID: "k1"}}))
	})
}

// TestPruneThroughARotation: the anchor's key epoch is the one after it,
// so pruning through a rotation entry re-anchors in the new key's epoch.
func TestPruneThroughARotation(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		appendN(t, newLog(t, db, ring(t, "k1")), "s", 3)
		l := newLog(t, db, ring(t, "k1", "k2"))
		appendN(t, l, "s", 2) // entry 4 rotates to k2, entry 5 under k2
		p, err := l.Prune(ctx, db, "s", 4, "ops")
		if err != nil {
			t.Fatal(err)
		}
		if p.Anchor.KeyID != "k2" {
			t.Fatalf("anchor %+v; want the epoch of k2", p.Anchor)
		}
		wantIntact(t, verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{p.Checkpoint}}))
	})
}

// TestPruneForgedIsDetected: a prefix deleted without Prune is Missing,
// with the head's floor raised by hand to match too, and so is a cut below
// a floor raised past the one a genuine pruning recorded.
func TestPruneForgedIsDetected(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 8)
		r4 := entryRow(t, l, "s", 4)
		tamper(t, db, `DELETE FROM racefree_audit WHERE seq <= 2`)
		wantBreak(t, verify(t, l, "s", nil), Missing, 1)
		tamper(t, db, `DELETE FROM racefree_audit WHERE seq <= 4`,
			`UPDATE racefree_audit_heads SET floor_seq = 4, floor_mac = `+blob(db, r4.MAC)+`, floor_key = 'k1'`)
		wantBreak(t, verify(t, l, "s", nil), Missing, 4)

		// A genuine pruning records its anchor; a deeper cut made by hand
		// is not that anchor.
		l2 := newLog(t, db, ring(t, "k1"))
		appendN(t, l2, "t", 8)
		if _, err := l2.Prune(ctx, db, "t", 3, "ops"); err != nil {
			t.Fatal(err)
		}
		wantIntact(t, verify(t, l2, "t", nil))
		r6 := entryRow(t, l2, "t", 6)
		tamper(t, db, `DELETE FROM racefree_audit WHERE scope = 't' AND seq <= 6`,
			`UPDATE racefree_audit_heads SET floor_seq = 6, floor_mac = `+blob(db, r6.MAC)+` WHERE scope = 't'`)
		wantBreak(t, verify(t, l2, "t", nil), Missing, 6)
	})
}

// TestPruneIsTheOnlyDelete: the delete trigger lets an entry go only at or
// below its scope's floor while the scope's last entry is a pruned entry,
// as inside Prune's transaction: not a plain DELETE, not one above the
// floor right after a pruning, not one below a floor raised by hand (the
// head row is the application's to update).
func TestPruneIsTheOnlyDelete(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 6)
		if _, err := l.Prune(ctx, db, "s", 2, "ops"); err != nil {
			t.Fatal(err)
		}
		refused := func(stmts ...string) {
			t.Helper()
			for _, s := range stmts {
				if _, err := db.ExecContext(ctx, s); err == nil || !strings.Contains(err.Error(), "append-only") {
					t.Errorf("%s: %v, want refused as append-only", s, err)
				}
			}
		}
		refused(`DELETE FROM racefree_audit WHERE seq = 3`, `DELETE FROM racefree_audit`)
		appendN(t, l, "s", 1)
		if _, err := db.ExecContext(ctx, `UPDATE racefree_audit_heads SET floor_seq = 5`); err != nil {
			t.Fatal(err)
		}
		refused(`DELETE FROM racefree_audit WHERE seq <= 5`)
		wantSeqs(t, seqs(t, l, ctx, "s"), 3, 8)
	})
}

// TestPruneWhileAppending: appends that run while a scope is pruned wait
// for it and keep the numbering gapless: every entry above the anchor is
// there exactly once, and the chain verifies.
func TestPruneWhileAppending(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 20)
		const workers, each = 8, 10
		var wg sync.WaitGroup
		errs := make(chan error, workers+1)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					if _, err := l.Append(ctx, db, "s", Entry{Actor: "a", Action: "b"}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Prune(ctx, db, "s", 15, "ops"); err != nil {
				errs <- err
			}
		}()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		wantSeqs(t, seqs(t, l, ctx, "s"), 16, 20+workers*each+1)
		wantIntact(t, verify(t, l, "s", nil))
	})
}

// TestPruneAsTheApplicationRole: on PostgreSQL the application role has no
// DELETE privilege on the entries, so Prune fails, permission denied, and
// changes nothing; the owner prunes.
func TestPruneAsTheApplicationRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	app := testdb.App(t, owner, d)
	l := newLog(t, app, ring(t, "k1"))
	appendN(t, l, "s", 4)
	before := tenantRows(t, owner, "default")
	if _, err := l.Prune(ctx, app, "s", 2, "ops"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("prune as the application role: %v; want permission denied", err)
	}
	if got := tenantRows(t, owner, "default"); got != before {
		t.Fatalf("a refused pruning changed the rows:\n%s\nwant\n%s", got, before)
	}
	if _, err := newLog(t, owner, ring(t, "k1")).Prune(ctx, owner, "s", 2, "ops"); err != nil {
		t.Fatal(err)
	}
	wantIntact(t, verify(t, l, "s", nil))
}

// TestPruneNeedsTheRetentionMigration: before migration 014 Prune fails
// with ErrSchemaOutdated and changes nothing, and Verify works as before.
func TestPruneNeedsTheRetentionMigration(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		// 13, spelled out: a test that read RetentionVersion would follow
		// a wrong constant down.
		const beforeRetention = 13
		if _, err := db.MigrateUpTo(ctx, beforeRetention); err != nil {
			t.Fatal(err)
		}
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 3)
		if _, err := l.Prune(ctx, db, "s", 2, "ops"); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("prune on schema %d: %v; want ErrSchemaOutdated", beforeRetention, err)
		}
		wantSeqs(t, seqs(t, l, ctx, "s"), 1, 3)
		wantIntact(t, verify(t, l, "s", nil))
	})
}
