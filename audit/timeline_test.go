package audit

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// timelineEntries returns the ActionTimelineChanged entries of scope.
func timelineEntries(t testing.TB, l *Log, scope string) []Record {
	t.Helper()
	var out []Record
	for after := int64(0); ; {
		rs, err := l.List(context.Background(), scope, after, MaxListLimit)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) == 0 {
			return out
		}
		for _, r := range rs {
			if r.Action == ActionTimelineChanged {
				out = append(out, r)
			}
		}
		after = rs[len(rs)-1].Seq
	}
}

// appendAs appends n entries to scope with shape: shapeOneWrite is the
// previous release's Append on this schema.
func appendAs(t testing.TB, l *Log, scope string, n int, shape appendShape) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		err := l.inTx(ctx, l.db, func(tx *sql.Tx) error {
			_, err := l.appendShaped(ctx, tx, tenant.Default, scope, Entry{Actor: "bob", Action: fmt.Sprint("old", i), Data: []byte{}}, shape)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestTimelineChangeIsRecordedInTheChain runs a real primary and an
// asynchronous standby, appends entries, fails over losing the last
// acknowledged ones (the standby never got them), and appends on the
// promoted node. The first append there records the move in the chain
// once: a racefree.audit.timeline_changed entry naming the old and the new
// timeline and the last entry the new primary holds, MACed like any other
// entry, so that changing any of the three alone breaks the chain
// (Modified). Verify reports the chain intact with the possible loss after
// that entry (PossibleLoss and a warning), as one stream and as several;
// a checkpoint of the lost tail kept outside the database reveals the
// loss. A chain created on the new timeline has no such entry; a chain
// whose head the previous release wrote (no timeline recorded) records
// the move when this release appended to it before; and when the previous
// release appends first on the new timeline, the entry names the last
// entry before it. Appends run as an application role.
func TestTimelineChangeIsRecordedInTheChain(t *testing.T) {
	t.Parallel()
	c := testdb.NewCluster(t)
	ctx := context.Background()
	owner := c.Primary.Open(t, nil)
	role := c.AppRole(t, owner)
	open := func() *racefree.DB {
		t.Helper()
		db, err := dsn.Open(ctx, c.Primary.URLAs(role), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	k := ring(t, "k1")
	l := newLog(t, open(), k)
	appendN(t, l, "s", 5)
	appendN(t, l, "mixed", 3)
	appendAs(t, l, "legacy", 2, shapeOneWrite) // the previous release: no timeline on the head
	appendN(t, l, "legacy", 1)                 // this release records it, with no entry
	appendN(t, l, "quiet", 2)
	if got := timelineEntries(t, l, "s"); len(got) != 0 {
		t.Fatalf("timeline entries before any failover: %+v", got)
	}
	if res := verify(t, l, "s", nil); res.PossibleLoss != nil || res.Warnings != nil {
		t.Fatalf("a chain without a failover: %+v; want no possible loss", res)
	}
	// On the standby (read-only) Append fails as any write does (SELECT …
	// FOR UPDATE), not on the WAL functions it reads the timeline with.
	c.WaitStreaming(t)
	sdb, err := dsn.Open(ctx, c.Standby.URLAs(role), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = newLog(t, sdb, k).Append(ctx, sdb, "s", Entry{Actor: "alice", Action: "on-the-standby"})
	_ = sdb.Close()
	var pgErr *pgconn.PgError
	if err == nil || !(errors.As(err, &pgErr) && pgErr.Code == "25006" || strings.Contains(err.Error(), "read-only")) {
		t.Fatalf("append on the standby: %v, want the read-only transaction error (SQLSTATE 25006)", err)
	}
	// A checkpoint of the tail the failover loses, exported (kept outside
	// the database).
	var lostCheckpoint Checkpoint
	before := c.Primary.Timeline(t)
	c.FailOverLosing(t, func() {
		appendN(t, l, "s", 3) // entries 6..8, acknowledged and lost
		appendN(t, l, "mixed", 2)
		appendN(t, l, "legacy", 2)
		var err error
		if lostCheckpoint, err = l.Checkpoint(ctx, l.db, "s"); err != nil {
			t.Fatal(err)
		}
	})
	after := c.Primary.Timeline(t)
	if after <= before {
		t.Fatalf("timeline %d after the promotion, want above %d", after, before)
	}
	owner = c.Primary.Open(t, nil)
	l = newLog(t, open(), k)
	if n, err := l.Length(ctx, "s"); err != nil || n != 5 {
		t.Fatalf("the promoted node holds %d entries of s (%v), want 5: the failover must have lost 6..8", n, err)
	}

	// The first append records the move, then the caller's entry.
	rec, err := l.Append(ctx, l.db, "s", Entry{Actor: "alice", Action: "after"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Seq != 7 || rec.Action != "after" {
		t.Fatalf("first append on the new timeline: entry %d %q, want 7 \"after\" (6 records the move)", rec.Seq, rec.Action)
	}
	appendN(t, l, "s", 3)
	tls := timelineEntries(t, l, "s")
	if len(tls) != 1 {
		t.Fatalf("%d timeline entries after the failover and 4 appends, want exactly 1: %+v", len(tls), tls)
	}
	e := tls[0]
	var data map[string]int64
	if err := json.Unmarshal(e.Data, &data); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"from": before, "to": after, "last_seq": 5}
	if e.Seq != 6 || e.Actor != "racefree" || e.Subject != fmt.Sprint(after) || fmt.Sprint(data) != fmt.Sprint(want) {
		t.Fatalf("timeline entry %d by %q, subject %q, data %s; want 6 by racefree, subject %d, data %v", e.Seq, e.Actor, e.Subject, e.Data, after, want)
	}
	key, _ := k.scopeKey(e.KeyID, "s")
	if mac := newMacer(key).sum(&entryInput{tenant.Default, "s", e.Seq, e.PrevMAC, e.At.UnixMilli(), e.Actor, e.Action, e.Subject, e.Data}); string(mac) != string(e.MAC) {
		t.Fatal("the timeline entry's MAC is not the scope key's MAC of its fields")
	}
	wantLoss := []TimelineChange{{Seq: 6, From: before, To: after, LastSeq: 5}}
	for _, streams := range []int{1, 3} {
		res := verify(t, l, "s", &VerifyOptions{Streams: streams, minSpan: 2})
		wantIntact(t, res)
		if !slices.Equal(res.PossibleLoss, wantLoss) {
			t.Fatalf("%d streams: possible loss %+v, want %+v", streams, res.PossibleLoss, wantLoss)
		}
		if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "after entry 5 may have been lost") ||
			!strings.Contains(res.Warnings[0], fmt.Sprintf("from timeline %d to %d", before, after)) {
			t.Fatalf("%d streams: warnings %q", streams, res.Warnings)
		}
	}
	// The checkpoint of the lost tail, kept outside, tells the loss.
	if res := verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{lostCheckpoint}}); res.Break == nil ||
		res.Break.Kind != RolledBack && res.Break.Kind != Truncated {
		t.Fatalf("verify against a checkpoint of the lost tail: %+v; want rolled back or truncated", res)
	}

	// Each field of the entry alone, changed in the database, breaks the
	// chain at the entry.
	orig := string(e.Data)
	for field, v := range map[string]int64{"from": before + 7, "to": after + 7, "last_seq": 4} {
		d := map[string]int64{"from": before, "to": after, "last_seq": 5}
		d[field] = v
		forged, _ := json.Marshal(d)
		tamper(t, owner, fmt.Sprintf(`UPDATE racefree_audit SET data = %s WHERE scope = 's' AND seq = 6`, blob(owner, forged)))
		res := verify(t, l, "s", nil)
		wantBreak(t, res, Modified, 6)
		if res.PossibleLoss != nil {
			t.Fatalf("%s changed: possible loss %+v reported from a modified entry", field, res.PossibleLoss)
		}
		tamper(t, owner, fmt.Sprintf(`UPDATE racefree_audit SET data = %s WHERE scope = 's' AND seq = 6`, blob(owner, []byte(orig))))
		wantIntact(t, verify(t, l, "s", nil))
	}

	// A chain created on the new timeline, and one not appended to since
	// the failover, have no timeline entry.
	appendN(t, l, "fresh", 3)
	for _, s := range []string{"fresh", "quiet"} {
		if got := timelineEntries(t, l, s); len(got) != 0 {
			t.Fatalf("%s: timeline entries %+v, want none", s, got)
		}
		if res := verify(t, l, s, nil); res.Break != nil || res.PossibleLoss != nil || res.Warnings != nil {
			t.Fatalf("%s: %+v; want intact without possible loss", s, res)
		}
	}
	// The previous release wrote the head, this release appended once
	// before the failover: the move is recorded.
	appendN(t, l, "legacy", 1)
	res := verify(t, l, "legacy", nil)
	wantIntact(t, res)
	if want := []TimelineChange{{Seq: 4, From: before, To: after, LastSeq: 3}}; !slices.Equal(res.PossibleLoss, want) {
		t.Fatalf("legacy: possible loss %+v, want %+v", res.PossibleLoss, want)
	}
	// The previous release appends first on the new timeline: the entry
	// names the last entry before it.
	appendAs(t, l, "mixed", 1, shapeOneWrite)
	appendN(t, l, "mixed", 1)
	res = verify(t, l, "mixed", nil)
	wantIntact(t, res)
	if want := []TimelineChange{{Seq: 5, From: before, To: after, LastSeq: 4}}; !slices.Equal(res.PossibleLoss, want) {
		t.Fatalf("mixed: possible loss %+v, want %+v", res.PossibleLoss, want)
	}
}

// TestTimelineEntryMustNameAMove: an ActionTimelineChanged entry is
// written by racefree only (a caller's is an InputError, nothing
// written), and one MACed under the scope's key that does not name two
// different timelines and an entry before it (as only a bug could write)
// breaks the chain there, on both engines. On a single server (and on
// SQLite, which has no timelines) appends record no move.
func TestTimelineEntryMustNameAMove(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		if _, err := l.Append(ctx, db, "s", timelineEntry(1, 2, 0)); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Fatalf("a caller's timeline entry: %v; want an InputError", err)
		}
		appendN(t, l, "s", 20)
		res := verify(t, l, "s", nil)
		wantIntact(t, res)
		if res.PossibleLoss != nil || res.Warnings != nil || len(timelineEntries(t, l, "s")) != 0 {
			t.Fatalf("20 appends on one server: %+v; want no timeline entry", res)
		}
		bad := []struct {
			name    string
			e       Entry
			atEntry int64 // the scope's number of the entry written
		}{
			{"the same timeline", timelineEntry(2, 2, 20), 21},
			{"timeline 0", timelineEntry(0, 2, 20), 21},
			{"an entry after it", timelineEntry(1, 2, 21), 21},
			{"another subject", Entry{Actor: "racefree", Action: ActionTimelineChanged, Subject: "3", Data: timelineEntry(1, 2, 20).Data}, 21},
		}
		for i, b := range bad {
			scope := fmt.Sprint("bad", i)
			appendN(t, l, scope, 20)
			err := l.inTx(ctx, db, func(tx *sql.Tx) error {
				_, err := l.appendShaped(ctx, tx, tenant.Default, scope, b.e, shapeTimeline)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			wantBreak(t, verify(t, l, scope, nil), Modified, b.atEntry)
		}
		good := "good"
		appendN(t, l, good, 2)
		err := l.inTx(ctx, db, func(tx *sql.Tx) error {
			_, err := l.appendShaped(ctx, tx, tenant.Default, good, timelineEntry(1, 2, 1), shapeTimeline)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		res = verify(t, l, good, nil)
		if want := []TimelineChange{{Seq: 3, From: 1, To: 2, LastSeq: 1}}; res.Break != nil || !slices.Equal(res.PossibleLoss, want) {
			t.Fatalf("a well-formed timeline entry: %+v; want intact with %+v", res, want)
		}
	})
}

// TestTimelineAcrossARollout: before migration 018 Append appends as the
// previous release did (no timeline column) and the chain verifies; after
// it, the previous release's statements (both shapes) and this release's
// interleave on one chain, which stays gapless and intact, and this
// release's append records the server's timeline on the head row
// (PostgreSQL) or none (SQLite).
func TestTimelineAcrossARollout(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		// 17, spelled out: the last version before the timeline column.
		if _, err := db.MigrateUpTo(ctx, 17); err != nil {
			t.Fatal(err)
		}
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 3)
		wantIntact(t, verify(t, l, "s", nil))
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		headTimeline := func() sql.NullInt64 {
			t.Helper()
			var tl sql.NullInt64
			if err := db.QueryRowContext(ctx, `SELECT timeline FROM racefree_audit_heads WHERE scope = 's'`).Scan(&tl); err != nil {
				t.Fatal(err)
			}
			return tl
		}
		appendAs(t, l, "s", 2, shapeOneWrite)
		appendAs(t, l, "s", 1, shapeUpsert)
		if tl := headTimeline(); tl.Valid {
			t.Fatalf("the previous release's appends set the head's timeline to %d", tl.Int64)
		}
		appendN(t, l, "s", 2)
		appendAs(t, l, "s", 1, shapeOneWrite)
		appendN(t, l, "s", 1)
		tl := headTimeline()
		if db.Engine() == racefree.Postgres != tl.Valid || tl.Valid && tl.Int64 < 1 {
			t.Fatalf("%s: the head's timeline after this release's appends: %+v", db.Engine(), tl)
		}
		res := verify(t, l, "s", nil)
		wantIntact(t, res)
		if res.Rows != 10 || res.PossibleLoss != nil || len(timelineEntries(t, l, "s")) != 0 {
			t.Fatalf("across the rollout: %+v; want 10 entries intact, no timeline entry", res)
		}
	})
}
