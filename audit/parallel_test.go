package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// parallelOpts streams a chain in parts of at least span entries, streams
// at once, so that tests split short chains, and reports progress every 4
// entries.
func parallelOpts(streams int, span int64) *VerifyOptions {
	return &VerifyOptions{Streams: streams, minSpan: span, every: 4}
}

// verifyBoth verifies scope in one stream and in parallel with popts (plus
// base's After and Checkpoints), fails unless both report the same, and
// returns the result.
func verifyBoth(t testing.TB, l *Log, scope string, base, popts VerifyOptions) Result {
	t.Helper()
	single := base
	single.Streams = 1
	popts.After, popts.Checkpoints = base.After, base.Checkpoints
	var (
		calls    []int64
		inFlight atomic.Int32
	)
	popts.Progress = func(n int64) {
		if inFlight.Add(1) != 1 {
			t.Errorf("progress called by two goroutines at once")
		}
		calls = append(calls, n)
		inFlight.Add(-1)
	}
	one, par := verify(t, l, scope, &single), verify(t, l, scope, &popts)
	if !reflect.DeepEqual(one, par) {
		t.Fatalf("parallel verify (streams %d, parts of %d at least) differs from one stream:\nparallel: %+v break %+v\nsingle:   %+v break %+v",
			popts.Streams, popts.minSpan, par, par.Break, one, one.Break)
	}
	// Every report but the last counts another popts.every entries
	// checked, in whichever part; the last counts the rows verified.
	for i, n := range calls[:max(len(calls)-1, 0)] {
		if n != int64(i+1)*popts.every {
			t.Fatalf("progress %v, want steps of %d", calls, popts.every)
		}
	}
	if len(calls) == 0 || calls[len(calls)-1] != par.Rows {
		t.Fatalf("progress %v, want it to end at the %d rows checked", calls, par.Rows)
	}
	return par
}

// rotatedChain appends a entries under key k1, then, with k2 current, the
// rotation entry and b entries under k2: a+1+b entries. It returns the
// Log with both keys.
func rotatedChain(t testing.TB, db *racefree.DB, scope string, a, b int) *Log {
	t.Helper()
	appendN(t, newLog(t, db, ring(t, "k1")), scope, a)
	l := newLog(t, db, ring(t, "k1", "k2"))
	appendN(t, l, scope, b)
	return l
}

// reMAC rewrites entries from through to under their own keys, as someone
// who holds the keys could, starting from prev as entry from's prev_mac
// and keeping each entry's key id unless keyIDs names another.
func reMAC(t testing.TB, l *Log, scope string, from, to int64, prev []byte, keyIDs map[int64]string) {
	t.Helper()
	var stmts []string
	for seq := from; seq <= to; seq++ {
		r := entryRow(t, l, scope, seq)
		if id, ok := keyIDs[seq]; ok {
			r.KeyID = id
		}
		key, _ := l.ring.scopeKey(r.KeyID, scope)
		mac := bytes.Clone(newMacer(key).sum(&entryInput{tenant.Default, scope, seq, prev, r.At.UnixMilli(), r.Actor, r.Action, r.Subject, r.Data}))
		stmts = append(stmts, fmt.Sprintf(`UPDATE racefree_audit SET key_id = '%s', prev_mac = %s, mac = %s WHERE scope = '%s' AND seq = %d`,
			r.KeyID, blob(l.db, prev), blob(l.db, mac), scope, seq))
		prev = mac
	}
	tamper(t, l.db, stmts...)
}

// TestVerifyParallelIntact: a chain streamed in parts, across a key
// rotation that falls on a part's last entry, or inside one, verifies
// intact with the rows, position and progress of one stream, from the
// start, from a verified position (After) and against a checkpoint.
func TestVerifyParallelIntact(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		// Entry 10 is the rotation: the last of the first part of 10.
		l := rotatedChain(t, db, "s", 9, 30)
		cp, err := l.Checkpoint(ctx, db, "s")
		if err != nil {
			t.Fatal(err)
		}
		for _, streams := range []int{2, 3, 4, 7} {
			res := verifyBoth(t, l, "s", VerifyOptions{}, *parallelOpts(streams, 10))
			wantIntact(t, res)
			if res.Rows != 40 || res.Verified.Seq != 40 || res.Verified.KeyID != "k2" {
				t.Fatalf("streams %d: %+v; want 40 rows up to 40 in k2's epoch", streams, res)
			}
			res = verifyBoth(t, l, "s", VerifyOptions{Checkpoints: []Checkpoint{cp}}, *parallelOpts(streams, 5))
			if !res.Anchored || res.Break != nil {
				t.Fatalf("streams %d against a checkpoint: %+v; want intact and anchored", streams, res)
			}
		}
		r := entryRow(t, l, "s", 7)
		res := verifyBoth(t, l, "s", VerifyOptions{After: &Position{Seq: 7, MAC: r.MAC, KeyID: "k1"}}, *parallelOpts(3, 5))
		if res.Break != nil || res.Rows != 33 {
			t.Fatalf("from 7: %+v; want 33 rows intact", res)
		}
	})
}

// TestVerifyParallelLowestBreak: with a break in every part, the break
// reported is the lowest, as one stream reports it, whichever part
// finishes first.
func TestVerifyParallelLowestBreak(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 40) // parts (0,10] (10,20] (20,30] (30,40]
		for _, seq := range []int64{36, 27, 14, 3} {
			tamper(t, db, fmt.Sprintf(`UPDATE racefree_audit SET data = %s WHERE seq = %d`, blob(db, []byte("x")), seq))
			res := verifyBoth(t, l, "s", VerifyOptions{}, *parallelOpts(4, 10))
			wantBreak(t, res, Modified, seq)
			if res.Rows != seq-1 || res.Verified.Seq != seq-1 {
				t.Fatalf("%+v; want %d rows verified before the break", res, seq-1)
			}
		}
	})
}

// TestVerifyParallelBoundary: breaks exactly at a boundary between two
// parts (entries 10 and 11 of parts of 10) are reported as one stream
// reports them: a gap, a changed prev_mac, a re-MACed tail that chains to
// another predecessor, and an entry under the retired key right after the
// rotation entry that ends a part.
func TestVerifyParallelBoundary(t *testing.T) {
	t.Parallel()
	del := func(where string) string { return `DELETE FROM racefree_audit WHERE scope = 's' AND ` + where }
	cases := []struct {
		name   string
		attack func(t *testing.T, l *Log)
		kind   Kind
		seq    int64
		detail string
	}{
		{"first of a part gone", func(t *testing.T, l *Log) { tamper(t, l.db, del(`seq = 11`)) }, Missing, 11, "the next is 12"},
		{"last of a part gone", func(t *testing.T, l *Log) { tamper(t, l.db, del(`seq = 10`)) }, Missing, 10, "the next is 11"},
		{"a whole part gone", func(t *testing.T, l *Log) { tamper(t, l.db, del(`seq BETWEEN 10 AND 21`)) }, Missing, 10, "the next is 22"},
		{"the tail from a boundary gone", func(t *testing.T, l *Log) { tamper(t, l.db, del(`seq > 20`)) }, Truncated, 21, "the chain ends at 20"},
		{"prev_mac changed", func(t *testing.T, l *Log) {
			tamper(t, l.db, `UPDATE racefree_audit SET prev_mac = `+blob(l.db, bytes.Repeat([]byte{7}, 32))+` WHERE seq = 11`)
		}, Modified, 11, "prev_mac is not entry 10's MAC"},
		{"a tail re-MACed over another predecessor", func(t *testing.T, l *Log) {
			reMAC(t, l, "s", 11, 40, bytes.Repeat([]byte{7}, 32), nil)
		}, Modified, 11, "the MAC does not match"},
		{"the retired key after the rotation", func(t *testing.T, l *Log) {
			reMAC(t, l, "s", 11, 11, entryRow(t, l, "s", 10).MAC, map[int64]string{11: "k1"})
		}, KeyOutsideEpoch, 11, `under key "k1" in the epoch of key "k2"`},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
				l := rotatedChain(t, db, "s", 9, 30) // entry 10 rotates to k2
				c.attack(t, l)
				for _, streams := range []int{4, 2} { // parts of 10; of 20
					res := verifyBoth(t, l, "s", VerifyOptions{}, *parallelOpts(streams, 10))
					wantBreak(t, res, c.kind, c.seq)
					if !strings.Contains(res.Break.Detail, c.detail) {
						t.Fatalf("detail %q, want %q in it", res.Break.Detail, c.detail)
					}
				}
			})
		})
	}
}

// TestVerifyParallelResumedAtAnEntryUnderAnotherKey resumes a parallel
// Verify after entry 5, in key k1's epoch, where entry 6 names k2, a key
// of the keyring, over k1's MAC. One stream reports the epoch first
// (KeyOutsideEpoch, before the MAC), and so must the parts: the first
// starts at the resumed position, not at the beginning of the chain.
func TestVerifyParallelResumedAtAnEntryUnderAnotherKey(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := rotatedChain(t, db, "s", 19, 20) // entry 20 rotates to k2
		after := Position{Seq: 5, MAC: entryRow(t, l, "s", 5).MAC, KeyID: "k1"}
		tamper(t, db, `UPDATE racefree_audit SET key_id = 'k2' WHERE scope = 's' AND seq = 6`)
		res := verifyBoth(t, l, "s", VerifyOptions{After: &after}, *parallelOpts(2, 10))
		wantBreak(t, res, KeyOutsideEpoch, 6)
	})
}

// TestVerifyParallelWhileAppending: appends that commit while Verify reads
// a chain in parts never look like a break: the last part runs to the end
// of the chain, past the head Verify read first.
func TestVerifyParallelWhileAppending(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 40)
		done := make(chan error, 1)
		go func() {
			for i := range 30 {
				if _, err := l.Append(context.Background(), db, "s", Entry{Actor: "bob", Action: fmt.Sprintf("b%d", i)}); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		for verified := int64(0); ; {
			res := verify(t, l, "s", parallelOpts(4, 5))
			wantIntact(t, res)
			if res.Rows < max(40, verified) {
				t.Fatalf("%+v; want at least %d rows", res, max(40, verified))
			}
			verified = res.Rows
			if verified == 70 {
				break
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				done <- nil // verify once more: every append has committed
			default:
			}
		}
	})
}

// TestVerifyParallelMatchesOneStream: on chains (with a key rotation, a
// pruned prefix or a checkpoint, at random) tampered at random, Verify in
// parts at random sizes reports exactly what one stream reports.
func TestVerifyParallelMatchesOneStream(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(11, uint64(len(db.Engine()))))
		kinds := map[Kind]int{}
		for round := range 14 {
			scope := fmt.Sprintf("p%d", round)
			a, b := 5+rng.IntN(25), 5+rng.IntN(15)
			l := rotatedChain(t, db, scope, a, b)
			n := int64(a + 1 + b)
			var base VerifyOptions
			switch rng.IntN(3) {
			case 0:
				cp, err := l.Checkpoint(ctx, db, scope)
				if err != nil {
					t.Fatal(err)
				}
				base.Checkpoints = []Checkpoint{cp}
			case 1:
				if _, err := l.Prune(ctx, db, scope, 1+rng.Int64N(8), "ops"); err != nil {
					t.Fatal(err)
				}
				n++ // the pruned entry
			}
			seq := func() int64 { return 10 + rng.Int64N(n-10) + 1 } // past any floor
			set := func(col, val string, at int64) string {
				return fmt.Sprintf(`UPDATE racefree_audit SET %s = %s WHERE scope = '%s' AND seq = %d`, col, val, scope, at)
			}
			var attacks []string
			for range 1 + rng.IntN(3) {
				switch at := seq(); rng.IntN(8) {
				case 0:
					tamper(t, db, set("data", blob(db, []byte("x")), at))
					attacks = append(attacks, fmt.Sprintf("data %d", at))
				case 1:
					tamper(t, db, set("prev_mac", blob(db, []byte("junk")), at))
					attacks = append(attacks, fmt.Sprintf("prev_mac %d", at))
				case 2:
					tamper(t, db, fmt.Sprintf(`DELETE FROM racefree_audit WHERE scope = '%s' AND seq BETWEEN %d AND %d`, scope, at, at+rng.Int64N(3)))
					attacks = append(attacks, fmt.Sprintf("delete from %d", at))
				case 3:
					tamper(t, db, fmt.Sprintf(`DELETE FROM racefree_audit WHERE scope = '%s' AND seq >= %d`, scope, at))
					attacks = append(attacks, fmt.Sprintf("cut at %d", at))
				case 4:
					tamper(t, db, set("key_id", "'zz'", at))
					attacks = append(attacks, fmt.Sprintf("unknown key %d", at))
				case 5:
					tamper(t, db, set("mac", blob(db, []byte{1}), at))
					attacks = append(attacks, fmt.Sprintf("short mac %d", at))
				case 6:
					if rs, err := l.List(ctx, scope, at-1, 2); err == nil && len(rs) == 2 && rs[0].Seq == at && rs[1].Seq == at+1 {
						row := func(r Record) string {
							return fmt.Sprintf(`at = %d, actor = '%s', action = '%s', subject = '%s', data = %s, key_id = '%s', prev_mac = %s, mac = %s`,
								r.At.UnixMilli(), r.Actor, r.Action, r.Subject, blob(db, r.Data), r.KeyID, blob(db, r.PrevMAC), blob(db, r.MAC))
						}
						swap := func(r Record, at int64) string {
							return fmt.Sprintf(`UPDATE racefree_audit SET %s WHERE scope = '%s' AND seq = %d`, row(r), scope, at)
						}
						tamper(t, db, swap(rs[1], at), swap(rs[0], at+1))
						attacks = append(attacks, fmt.Sprintf("swap %d", at))
					}
				default:
					if rs, err := l.List(ctx, scope, at-1, 1); err == nil && len(rs) == 1 && rs[0].Seq == at {
						reMAC(t, l, scope, at, at, bytes.Repeat([]byte{7}, 32), nil)
						attacks = append(attacks, fmt.Sprintf("re-MAC %d over another predecessor", at))
					}
				}
			}
			streams, span := 2+rng.IntN(4), 3+rng.Int64N(8)
			res := verifyBoth(t, l, scope, base, *parallelOpts(streams, span))
			t.Logf("round %d: %d entries, %v, streams %d, parts of %d at least: %+v", round, n, attacks, streams, span, res.Break)
			if res.Break != nil {
				kinds[res.Break.Kind]++
			}
		}
		if len(kinds) < 4 {
			t.Fatalf("breaks of kinds %v; want the random attacks to reach at least 4 kinds", kinds)
		}
	})
}

// TestVerifyParallelCancelled: a Verify in parts whose context is
// cancelled mid-way (from its first progress report) returns the
// context's error, and never a verdict: no break and no intact chain.
func TestVerifyParallelCancelled(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 40)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		opts := parallelOpts(4, 5)
		opts.Progress = func(int64) { cancel() }
		res, err := l.Verify(ctx, "s", opts)
		if !errors.Is(err, context.Canceled) || res.Break != nil || res.Rows != 0 {
			t.Fatalf("%+v, %v; want no result and context.Canceled", res, err)
		}
		wantIntact(t, verify(t, l, "s", parallelOpts(4, 5))) // and the chain is still whole
	})
}
