package audit

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if d := os.Getenv(childEnv); d != "" {
		os.Exit(childMain(d))
	}
	goleak.VerifyTestMain(m)
}

// Fixed test keys: k1 and k2 are mac keys, s1 signs checkpoints.
var (
	keyK1 = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	keyK2 = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
	keyS1 = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32))
)

// ring returns a keyring of the fixed test keys; t may be nil (in a child
// process).
func ring(_ testing.TB, macIDs ...string) *Keyring {
	text := ""
	for _, id := range macIDs {
		text += map[string]string{"k1": "mac k1 " + keyK1, "k2": "mac k2 " + keyK2}[id] + "\n"
	}
	k, err := ParseKeyring(text + "sign s1 " + keyS1 + "\n")
	if err != nil {
		panic(err) // the fixed test keys always parse
	}
	return k
}

func newLog(_ testing.TB, db *racefree.DB, k *Keyring) *Log {
	l, err := New(db, k)
	if err != nil {
		panic(err) // only for a nil keyring
	}
	return l
}

// appendN appends n entries to scope, actions "a1", "a2", ….
func appendN(t testing.TB, l *Log, scope string, n int) {
	t.Helper()
	appendIn(context.Background(), t, l, scope, n)
}

// appendIn is appendN for the tenant ctx names.
func appendIn(ctx context.Context, t testing.TB, l *Log, scope string, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		if _, err := l.Append(ctx, l.db, scope, Entry{Actor: "alice", Action: fmt.Sprintf("a%d", i), Subject: "doc", Data: []byte(`{"i":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
}

// tamper runs stmts as someone who can write the tables directly: the
// triggers are disabled first (the owner can on PostgreSQL; whoever writes
// the file can on SQLite). The chaining trigger is back afterwards, so
// that later appends chain as before; the append-only ones stay off.
func tamper(t testing.TB, db *racefree.DB, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	pre := []string{`ALTER TABLE racefree_audit DISABLE TRIGGER USER`, `ALTER TABLE racefree_audit_checkpoints DISABLE TRIGGER USER`}
	post := []string{`ALTER TABLE racefree_audit ENABLE TRIGGER racefree_audit_chain`}
	if db.Engine() == racefree.SQLite {
		var chain string
		if err := db.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'racefree_audit_chain'`).Scan(&chain); err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		pre = []string{`DROP TRIGGER IF EXISTS racefree_audit_no_update`, `DROP TRIGGER IF EXISTS racefree_audit_no_delete`,
			`DROP TRIGGER IF EXISTS racefree_audit_checkpoints_no_update`, `DROP TRIGGER IF EXISTS racefree_audit_checkpoints_no_delete`,
			`DROP TRIGGER IF EXISTS racefree_audit_chain`}
		post = nil
		if chain != "" {
			post = []string{chain}
		}
	}
	testdb.ExecAll(t, db, append(append(pre, stmts...), post...)...)
}

// blob returns b as a SQL literal of the engine.
func blob(db *racefree.DB, b []byte) string {
	if db.Engine() == racefree.Postgres {
		return `'\x` + hex.EncodeToString(b) + `'::bytea`
	}
	return `X'` + hex.EncodeToString(b) + `'`
}

func verify(t testing.TB, l *Log, scope string, opts *VerifyOptions) Result {
	t.Helper()
	return verifyIn(context.Background(), t, l, scope, opts)
}

// verifyIn is verify for the tenant ctx names.
func verifyIn(ctx context.Context, t testing.TB, l *Log, scope string, opts *VerifyOptions) Result {
	t.Helper()
	res, err := l.Verify(ctx, scope, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func wantBreak(t testing.TB, res Result, kind Kind, seq int64) {
	t.Helper()
	if res.Break == nil || res.Break.Kind != kind || res.Break.Seq != seq {
		t.Fatalf("verify: %+v (break %+v); want %s at %d", res, res.Break, kind, seq)
	}
}

func wantIntact(t testing.TB, res Result) {
	t.Helper()
	if res.Break != nil {
		t.Fatalf("verify: break %+v; want intact", res.Break)
	}
}

func entryRow(t testing.TB, l *Log, scope string, seq int64) Record {
	t.Helper()
	rs, err := l.List(context.Background(), scope, seq-1, 1)
	if err != nil || len(rs) != 1 || rs[0].Seq != seq {
		t.Fatalf("entry %d: %+v, %v", seq, rs, err)
	}
	return rs[0]
}

// TestAppendConcurrentOneScope: 64 goroutines appending to one scope get
// the numbers 1..N exactly once each, and the chain verifies.
func TestAppendConcurrentOneScope(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		const workers, each = 64, 4
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			seqs = map[int64]int{}
			errs []error
		)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					r, err := l.Append(context.Background(), db, "one", Entry{Actor: fmt.Sprint("w", w), Action: "write", Data: []byte(fmt.Sprint(i))})
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else {
						seqs[r.Seq]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("%d appends failed, first: %v", len(errs), errs[0])
		}
		for n := int64(1); n <= workers*each; n++ {
			if seqs[n] != 1 {
				t.Fatalf("number %d handed out %d times", n, seqs[n])
			}
		}
		res := verify(t, l, "one", nil)
		wantIntact(t, res)
		if got, want := res.Rows, int64(workers*each); got != want {
			t.Fatalf("verified %d rows, want %d", got, want)
		}
	})
}

// TestAppendRollback: an append in a transaction that rolls back leaves no
// entry and consumes no number; one that commits commits with the caller's
// own writes.
func TestAppendRollback(t *testing.T) {
	t.Parallel()
	// One attempt per transaction: nothing here conflicts, and an append
	// that wrongly waits for the caller's own write lock (SQLite) fails
	// after one busy timeout rather than after every retry.
	testdb.Each(t, &racefree.Config{TxAttempts: 1}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		if _, err := db.ExecContext(ctx, `CREATE TABLE effects (n INTEGER)`); err != nil {
			t.Fatal(err)
		}
		appendN(t, l, "s", 2)
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := l.Append(ctx, tx, "s", Entry{Actor: "a", Action: "rolled back"}); err != nil || r.Seq != 3 {
			t.Fatalf("append in tx: %+v, %v", r, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO effects (n) VALUES (1)`); err != nil {
				return err
			}
			r, err := l.Append(ctx, tx, "s", Entry{Actor: "a", Action: "committed"})
			if err == nil && r.Seq != 3 {
				err = fmt.Errorf("seq %d after a rollback, want 3", r.Seq)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := l.List(ctx, "s", 0, 10)
		if err != nil || len(rs) != 3 || rs[2].Action != "committed" {
			t.Fatalf("list: %+v, %v; want 3 entries, the last committed", rs, err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM effects`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("effects: %d, %v", n, err)
		}
		wantIntact(t, verify(t, l, "s", nil))
	})
}

// TestAppendClockAndRecord: the entry's time is the engine's clock (the
// injected one here), and Append returns what List returns.
func TestAppendClockAndRecord(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	testdb.Each(t, &racefree.Config{Clock: racefree.NewManualClock(at)}, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		r, err := l.Append(context.Background(), db, "s", Entry{Actor: "a", Action: "b", Subject: "c", Data: []byte("d")})
		if err != nil {
			t.Fatal(err)
		}
		got := entryRow(t, l, "s", 1)
		if !got.At.Equal(at) || !r.At.Equal(at) || !bytes.Equal(got.MAC, r.MAC) || got.KeyID != "k1" || len(got.PrevMAC) != 0 || got.Data == nil || string(got.Data) != "d" {
			t.Fatalf("appended %+v, listed %+v; want at %v", r, got, at)
		}
	})
}

// TestAppendRejectsBadInput: bad input is an *InputError and writes nothing.
func TestAppendRejectsBadInput(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		for name, c := range map[string]struct {
			scope string
			e     Entry
		}{
			"empty scope":    {"", Entry{Actor: "a", Action: "b"}},
			"NUL scope":      {"s\x00", Entry{Actor: "a", Action: "b"}},
			"empty actor":    {"s", Entry{Action: "b"}},
			"empty action":   {"s", Entry{Actor: "a"}},
			"bad UTF-8":      {"s", Entry{Actor: "a\xff", Action: "b"}},
			"NUL subject":    {"s", Entry{Actor: "a", Action: "b", Subject: "\x00"}},
			"too much data":  {"s", Entry{Actor: "a", Action: "b", Data: make([]byte, MaxDataLen+1)}},
			"rotation entry": {"s", Entry{Actor: "a", Action: ActionKeyRotated}},
		} {
			if _, err := l.Append(context.Background(), db, c.scope, c.e); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%s: %v, want ErrInvalidInput", name, err)
			}
		}
		if s, err := l.Scopes(context.Background()); err != nil || len(s) != 0 {
			t.Fatalf("scopes after bad input: %v, %v", s, err)
		}
	})
}

// TestScopesIndependent: 16 scopes appended to concurrently each number
// from 1, and VerifyAll verifies them all in parallel.
func TestScopesIndependent(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		var wg sync.WaitGroup
		errs := make(chan error, 16*5)
		for s := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					if _, err := l.Append(context.Background(), db, fmt.Sprint("scope", s), Entry{Actor: "a", Action: "b"}); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		res, err := l.VerifyAll(context.Background(), 4, nil)
		if err != nil || len(res) != 16 {
			t.Fatalf("verify all: %d results, %v", len(res), err)
		}
		for _, r := range res {
			if r.Break != nil || r.Rows != 5 {
				t.Fatalf("scope %s: %+v", r.Scope, r)
			}
		}
	})
}

// TestVerifyIncremental: verifying from a reported position checks only the
// entries appended since, and still finds a break among them.
func TestVerifyIncremental(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 5)
		first := verify(t, l, "s", nil)
		wantIntact(t, first)
		appendN(t, l, "s", 3)
		second := verify(t, l, "s", &VerifyOptions{After: &first.Verified})
		wantIntact(t, second)
		if second.Rows != 3 || second.Verified.Seq != 8 {
			t.Fatalf("incremental: %+v; want 3 rows up to 8", second)
		}
		tamper(t, db, `UPDATE racefree_audit SET data = `+blob(db, []byte("x"))+` WHERE seq = 7`)
		wantBreak(t, verify(t, l, "s", &VerifyOptions{After: &first.Verified}), Modified, 7)
		var progress []int64
		verify(t, l, "s", &VerifyOptions{Progress: func(n int64) { progress = append(progress, n) }})
		if len(progress) == 0 || progress[len(progress)-1] != 6 {
			t.Fatalf("progress %v, want ending at the 6 rows checked", progress)
		}
	})
}

// TestAppendOnly: the triggers refuse UPDATE and DELETE of entries and
// checkpoints on both engines, and TRUNCATE on PostgreSQL, and an entry
// that does not carry its scope's head number.
func TestAppendOnly(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 2)
		if _, err := l.Checkpoint(context.Background(), db, "s"); err != nil {
			t.Fatal(err)
		}
		stmts := []string{
			`UPDATE racefree_audit SET actor = 'mallory'`, `DELETE FROM racefree_audit WHERE seq = 2`, `DELETE FROM racefree_audit`,
			`UPDATE racefree_audit_checkpoints SET seq = 1`, `DELETE FROM racefree_audit_checkpoints`,
		}
		if db.Engine() == racefree.Postgres {
			stmts = append(stmts, `TRUNCATE racefree_audit`, `TRUNCATE racefree_audit_checkpoints`)
		}
		for _, s := range stmts {
			if _, err := db.ExecContext(context.Background(), s); err == nil || !strings.Contains(err.Error(), "append-only") {
				t.Errorf("%s: %v, want refused as append-only", s, err)
			}
		}
		// An entry inserted past the head's number is refused too.
		insert := fmt.Sprintf(`INSERT INTO racefree_audit (tenant, scope, seq, at, actor, action, subject, data, key_id, prev_mac, mac) VALUES ('default', 's', 9, 0, 'a', 'b', '', %s, 'k1', %s, %s)`,
			blob(db, []byte("x")), blob(db, []byte("x")), blob(db, []byte("x")))
		if _, err := db.ExecContext(context.Background(), insert); err == nil || !strings.Contains(err.Error(), "head number") {
			t.Errorf("an entry past the head: %v, want refused", err)
		}
		wantIntact(t, verify(t, l, "s", nil))
	})
}

// The attacks: each is detected by Verify with its kind.

func TestAttackModifyData(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 6)
		tamper(t, db, `UPDATE racefree_audit SET data = `+blob(db, []byte(`{"i":2}`))+` WHERE seq = 3`)
		wantBreak(t, verify(t, l, "s", nil), Modified, 3)
	})
}

// TestAttackModifyPrevMAC: the stored prev_mac, which the MAC does not
// cover (the verifier uses the predecessor's MAC), must match it too.
func TestAttackModifyPrevMAC(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 4)
		tamper(t, db, `UPDATE racefree_audit SET prev_mac = `+blob(db, []byte("not the mac of 1"))+` WHERE seq = 2`)
		wantBreak(t, verify(t, l, "s", nil), Modified, 2)
	})
}

// TestAttackFieldBoundary: moving a byte from one field to the next keeps
// the concatenation of the fields, and is still detected.
func TestAttackFieldBoundary(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 6) // actor "alice", action "a3"
		tamper(t, db, `UPDATE racefree_audit SET actor = 'alic', action = 'ea3' WHERE seq = 3`)
		wantBreak(t, verify(t, l, "s", nil), Modified, 3)
	})
}

// TestAttackReMACWithoutKey: an attacker who recomputes the MAC without the
// key (here with a key of their own) is detected.
func TestAttackReMACWithoutKey(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 6)
		r := entryRow(t, l, "s", 3)
		forged := newMacer(bytes.Repeat([]byte{9}, 32)).sum(&entryInput{tenant.Default, "s", 3, r.PrevMAC, r.At.UnixMilli(), r.Actor, r.Action, r.Subject, []byte("forged")})
		tamper(t, db, `UPDATE racefree_audit SET data = `+blob(db, []byte("forged"))+`, mac = `+blob(db, forged)+` WHERE seq = 3`)
		wantBreak(t, verify(t, l, "s", nil), Modified, 3)
	})
}

func TestAttackDeleteMiddle(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 6)
		tamper(t, db, `DELETE FROM racefree_audit WHERE seq = 3`)
		wantBreak(t, verify(t, l, "s", nil), Missing, 3)
	})
}

// TestAttackSwap: two entries' contents, MACs included, swapped.
func TestAttackSwap(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 6)
		r3, r4 := entryRow(t, l, "s", 3), entryRow(t, l, "s", 4)
		set := func(seq int64, r Record) string {
			return fmt.Sprintf(`UPDATE racefree_audit SET at = %d, actor = '%s', action = '%s', subject = '%s', data = %s, prev_mac = %s, mac = %s WHERE seq = %d`,
				r.At.UnixMilli(), r.Actor, r.Action, r.Subject, blob(db, r.Data), blob(db, r.PrevMAC), blob(db, r.MAC), seq)
		}
		tamper(t, db, set(3, r4), set(4, r3))
		res := verify(t, l, "s", nil)
		wantBreak(t, res, Reordered, 3)
		if !strings.Contains(res.Break.Detail, "belongs at 4") {
			t.Fatalf("detail %q, want it to say the entry belongs at 4", res.Break.Detail)
		}
	})
}

// TestAttackSplice: an entry of another scope, MAC included, put in place
// of one of this scope's.
func TestAttackSplice(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "a", 6)
		appendN(t, l, "b", 6)
		tamper(t, db,
			`DELETE FROM racefree_audit WHERE scope = 'a' AND seq = 3`,
			`INSERT INTO racefree_audit (tenant, scope, seq, at, actor, action, subject, data, key_id, prev_mac, mac) SELECT tenant, 'a', seq, at, actor, action, subject, data, key_id, prev_mac, mac FROM racefree_audit WHERE scope = 'b' AND seq = 3`)
		wantBreak(t, verify(t, l, "a", nil), Modified, 3)
		wantIntact(t, verify(t, l, "b", nil))
	})
}

func TestAttackUnknownKey(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 3)
		tamper(t, db, `UPDATE racefree_audit SET key_id = 'zz' WHERE seq = 2`)
		wantBreak(t, verify(t, l, "s", nil), UnknownKey, 2)
	})
}

// TestRotation: a new current key makes Append link the old key id to the
// new in a rotation entry; the chain verifies across the epochs; an entry
// re-MACed with the retired key is outside its epoch.
func TestRotation(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		appendN(t, newLog(t, db, ring(t, "k1")), "s", 3)
		l := newLog(t, db, ring(t, "k1", "k2"))
		appendN(t, l, "s", 3)
		rot := entryRow(t, l, "s", 4)
		if rot.Action != ActionKeyRotated || rot.KeyID != "k1" || string(rot.Data) != `{"from":"k1","to":"k2"}` {
			t.Fatalf("entry 4: %+v; want the rotation from k1 to k2 under k1", rot)
		}
		if r := entryRow(t, l, "s", 5); r.KeyID != "k2" {
			t.Fatalf("entry 5 under %q, want k2", r.KeyID)
		}
		wantIntact(t, verify(t, l, "s", nil))
		if _, err := newLog(t, db, ring(t, "k2")).Append(ctx, db, "s", Entry{Actor: "a", Action: "b"}); err != nil {
			t.Fatalf("append without the retired key: %v", err)
		}
		// Entry 6 re-MACed under the retired key k1 by someone who has it.
		r := entryRow(t, l, "s", 6)
		k1, _ := l.ring.scopeKey("k1", "s")
		forged := newMacer(k1).sum(&entryInput{tenant.Default, "s", 6, r.PrevMAC, r.At.UnixMilli(), r.Actor, r.Action, r.Subject, []byte("forged")})
		tamper(t, db, `UPDATE racefree_audit SET data = `+blob(db, []byte("forged"))+`, key_id = 'k1', mac = `+blob(db, forged)+` WHERE seq = 6`)
		wantBreak(t, verify(t, l, "s", nil), KeyOutsideEpoch, 6)
		// Kept under k2's id, a MAC made with k1 is a modification.
		tamper(t, db, `UPDATE racefree_audit SET key_id = 'k2' WHERE seq = 6`)
		wantBreak(t, verify(t, l, "s", nil), Modified, 6)
	})
}

// TestAttackCutTail: a tail cut off with the head row cut to match is a
// valid chain, which Verify honestly reports intact but not anchored; a
// checkpoint taken before the cut reveals it.
func TestAttackCutTail(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 6)
		cp, err := l.Checkpoint(ctx, db, "s")
		if err != nil {
			t.Fatal(err)
		}
		r4 := entryRow(t, l, "s", 4)
		tamper(t, db, `DELETE FROM racefree_audit WHERE seq > 4`)
		wantBreak(t, verify(t, l, "s", nil), Truncated, 5) // the head row still counts 6
		tamper(t, db, `UPDATE racefree_audit_heads SET last_seq = 4, last_mac = `+blob(db, r4.MAC))
		res := verify(t, l, "s", nil)
		wantIntact(t, res)
		if res.Anchored || res.Verified.Seq != 4 {
			t.Fatalf("without a checkpoint: %+v; want intact up to 4, not anchored", res)
		}
		wantBreak(t, verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp}}), Truncated, 5)
	})
}

// TestAttackRestoreOlderCopy: the whole log, checkpoints included, restored
// from an older copy is a valid chain; the latest checkpoint kept elsewhere
// reveals the rollback, and so does a log that grew again since.
func TestAttackRestoreOlderCopy(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 4)
		if _, err := l.Checkpoint(ctx, db, "s"); err != nil {
			t.Fatal(err)
		}
		tables := []string{"racefree_audit", "racefree_audit_heads", "racefree_audit_checkpoints"}
		var restore []string
		for _, tb := range tables {
			if _, err := db.ExecContext(ctx, `CREATE TABLE bak_`+tb+` AS SELECT * FROM `+tb); err != nil {
				t.Fatal(err)
			}
			restore = append(restore, `DELETE FROM `+tb, `INSERT INTO `+tb+` SELECT * FROM bak_`+tb)
		}
		appendN(t, l, "s", 2)
		cp2, err := l.Checkpoint(ctx, db, "s")
		if err != nil {
			t.Fatal(err)
		}
		wantIntact(t, verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp2}}))
		tamper(t, db, restore...)
		res := verify(t, l, "s", nil)
		if res.Break != nil || res.Anchored {
			t.Fatalf("restored copy without a checkpoint: %+v; want intact, not anchored", res)
		}
		wantBreak(t, verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp2}}), RolledBack, 4)
		// The restored log grows again: entries 5 and 6 differ from the
		// ones checkpoint 2 vouched for.
		l2 := newLog(t, db, ring(t, "k1"))
		appendN(t, l2, "s", 3)
		if _, err := l2.Checkpoint(ctx, db, "s"); err != nil { // checkpoint 2 again, of another history
			t.Fatal(err)
		}
		wantBreak(t, verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp2}}), RolledBack, 6)
	})
}

// TestCheckpointChain: checkpoints are signed and chained; Verify refuses a
// list with one left out, one forged, or of another scope, and accepts the
// exported list read back.
func TestCheckpointChain(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		var cps []Checkpoint
		for range 3 {
			appendN(t, l, "s", 2)
			cp, err := l.Checkpoint(ctx, db, "s")
			if err != nil {
				t.Fatal(err)
			}
			cps = append(cps, cp)
		}
		if cps[0].N != 1 || len(cps[0].Prev) != 0 || cps[2].N != 3 || !bytes.Equal(cps[2].Prev, cps[1].Hash()) || cps[2].Seq != 6 {
			t.Fatalf("checkpoints: %+v", cps)
		}
		var buf bytes.Buffer
		if err := WriteCheckpoints(&buf, cps...); err != nil {
			t.Fatal(err)
		}
		read, err := ReadCheckpoints(&buf)
		if err != nil || len(read) != 3 {
			t.Fatalf("read back: %d, %v", len(read), err)
		}
		res := verify(t, l, "s", &VerifyOptions{Checkpoints: read})
		if res.Break != nil || !res.Anchored {
			t.Fatalf("verify against the exported checkpoints: %+v", res)
		}
		stored, err := l.Checkpoints(ctx, "s", 0)
		if err != nil || len(stored) != 3 || !bytes.Equal(stored[2].Sig, cps[2].Sig) {
			t.Fatalf("stored checkpoints: %+v, %v", stored, err)
		}
		if latest, err := l.LatestCheckpoint(ctx, "s"); err != nil || latest.N != 3 {
			t.Fatalf("latest: %+v, %v", latest, err)
		}
		forged := cps[2]
		forged.Seq = 5
		for name, list := range map[string][]Checkpoint{
			"one left out": {cps[0], cps[2]},
			"out of order": {cps[1], cps[0]},
			"forged":       {cps[0], cps[1], forged},
		} {
			if res := verify(t, l, "s", &VerifyOptions{Checkpoints: list}); res.Break == nil || res.Break.Kind != BadCheckpoint {
				t.Errorf("%s: %+v, want %s", name, res.Break, BadCheckpoint)
			}
		}
		appendN(t, l, "t", 1)
		if res := verify(t, l, "t", &VerifyOptions{Checkpoints: cps[:1]}); res.Break == nil || res.Break.Kind != BadCheckpoint {
			t.Errorf("another scope's checkpoint: %+v, want %s", res.Break, BadCheckpoint)
		}
		if _, err := l.Checkpoint(ctx, db, "nothing"); !errors.Is(err, racefree.ErrNotFound) {
			t.Errorf("checkpoint of an empty scope: %v, want ErrNotFound", err)
		}
	})
}

// TestKeyringNeverShowsKeys: parse errors, String and %#v name key ids only.
func TestKeyringNeverShowsKeys(t *testing.T) {
	t.Parallel()
	k := ring(t, "k1", "k2")
	for _, s := range []string{k.String(), fmt.Sprintf("%v %+v %#v", k, k, k)} {
		if strings.Contains(s, keyK1) || strings.Contains(s, keyK2) || strings.Contains(s, keyS1) || !strings.Contains(s, "k2") {
			t.Fatalf("keyring shown as %q", s)
		}
	}
	// Every verb prints the ids alone: a key's bytes appear in no encoding
	// (base64 above; here as fmt prints a []byte or a struct holding one).
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(verb, k); s != k.String() {
			t.Fatalf("keyring shown by %s as %q; want %q", verb, s, k.String())
		}
	}
	short := base64.StdEncoding.EncodeToString([]byte("sixteen bytes..."))
	for _, text := range []string{"mac k1 " + short, "mac k1 " + keyK1 + " extra", "hmac k1 " + keyK1, "mac k1 " + keyK1 + "\nmac k1 " + keyK2, "sign s1 " + keyS1} {
		_, err := ParseKeyring(text)
		if err == nil {
			t.Errorf("%q parsed", text)
			continue
		}
		for _, secret := range []string{short, keyK1, keyK2, keyS1} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q shows a key", err)
			}
		}
	}
	var buf bytes.Buffer
	if err := Keygen(&buf, "m1", "s1"); err != nil {
		t.Fatal(err)
	}
	if k, err := ParseKeyring(buf.String()); err != nil || k.Current() != "m1" || k.Signer() != "s1" {
		t.Fatalf("keygen's keyring: %v, %v", k, err)
	}
}

// TestKeyringErrorsNameTheirLine: a keyring's error names the line it is
// on, counting comments and blank lines, as an editor numbers them (a
// gremlins survivor: the line counter counting down went unseen).
func TestKeyringErrorsNameTheirLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		text string
		line int
	}{
		{"bad", 1},
		{"mac k1 " + keyK1 + "\nbad", 2},
		{"# the keyring\n\nmac k1 " + keyK1 + "\n  \nmac k2 " + keyK2 + " extra", 5},
	} {
		_, err := ParseKeyring(c.text)
		if want := fmt.Sprintf("keyring line %d:", c.line); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%d lines: %v; want an error naming %q", strings.Count(c.text, "\n")+1, err, want)
		}
	}
}

// TestKeyringFromEnv: the environment holds a keyring, lines separated by
// semicolons; the last mac key is current.
func TestKeyringFromEnv(t *testing.T) {
	t.Setenv(EnvKeys, "mac k1 "+keyK1+";mac k2 "+keyK2)
	if k, err := KeyringFromEnv(); err != nil || k.Current() != "k2" || k.Signer() != "" {
		t.Fatalf("from the environment: %v, %v", k, err)
	}
}

// TestMACBindsEveryField: changing any field of an entry, its tenant
// included, or moving a byte across a field boundary, changes its MAC
// under the same key; the default tenant's MAC input is the one of the
// entries written before tenancy (known answers for both formats).
func TestMACBindsEveryField(t *testing.T) {
	t.Parallel()
	m := newMacer(bytes.Repeat([]byte{7}, 32))
	for _, tn := range []string{tenant.Default, "acme"} {
		base := entryInput{tn, "scope", 3, []byte("prev"), 1000, "actor", "action", "subject", []byte("data")}
		variants := map[string]entryInput{}
		for name, f := range map[string]func(e *entryInput){
			"tenant":                func(e *entryInput) { e.tenant = "globex" },
			"scope":                 func(e *entryInput) { e.scope = "other" },
			"seq":                   func(e *entryInput) { e.seq = 4 },
			"prev":                  func(e *entryInput) { e.prev = []byte("prev2") },
			"at":                    func(e *entryInput) { e.at = 1001 },
			"actor":                 func(e *entryInput) { e.actor = "actor2" },
			"action":                func(e *entryInput) { e.action = "action2" },
			"subject":               func(e *entryInput) { e.subject = "subject2" },
			"data":                  func(e *entryInput) { e.data = []byte("data2") },
			"actor|action boundary": func(e *entryInput) { e.actor, e.action = "actora", "ction" },
			"subject|data boundary": func(e *entryInput) { e.subject, e.data = "subjectd", []byte("ata") },
			"scope|seq boundary":    func(e *entryInput) { e.scope = "scop" },
			"prev|at boundary":      func(e *entryInput) { e.prev = []byte("pre") },
			"tenant|scope boundary": func(e *entryInput) { e.tenant, e.scope = e.tenant+"s", "cope" },
		} {
			e := base
			e.prev = append([]byte(nil), base.prev...)
			e.data = append([]byte(nil), base.data...)
			f(&e)
			variants[name] = e
		}
		want := bytes.Clone(m.sum(&base))
		for name, e := range variants {
			if hmac.Equal(m.sum(&e), want) {
				t.Errorf("tenant %s: %s changed, MAC unchanged", tn, name)
			}
		}
	}
	// Known answers: a log written by this version verifies in the next,
	// and the default tenant's entries are MACed as before tenancy.
	const fields = "\x05scope\x00\x00\x00\x00\x00\x00\x00\x03\x04prev\x00\x00\x00\x00\x00\x00\x03\xe8\x05actor\x06action\x07subject\x04data"
	for tn, input := range map[string]string{tenant.Default: "\x01" + fields, "acme": "\x02\x04acme" + fields} {
		h := hmac.New(sha256.New, bytes.Repeat([]byte{7}, 32))
		h.Write([]byte(input))
		e := entryInput{tn, "scope", 3, []byte("prev"), 1000, "actor", "action", "subject", []byte("data")}
		if got := m.sum(&e); !hmac.Equal(got, h.Sum(nil)) {
			t.Fatalf("tenant %s: MAC of the known input %x, want %x", tn, got, h.Sum(nil))
		}
	}
}

// TestPreviousAppendShapeOnTheCurrentSchema: during a rollout the previous
// release's Append (the head row's upsert takes the number, the insert's
// trigger sets the MAC) and this release's (the insert's trigger moves the
// head once) interleave on one scope: the numbers stay gapless, the chain
// verifies, and a number that follows neither is refused.
func TestPreviousAppendShapeOnTheCurrentSchema(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		e := Entry{Actor: "alice", Action: "login", Data: []byte{}}
		for i := range 6 {
			err := l.inTx(ctx, db, func(tx *sql.Tx) error {
				r, err := l.appendShaped(ctx, tx, tenant.Default, "s", e, []appendShape{shapeTimeline, shapeUpsert}[i%2])
				if err == nil && r.Seq != int64(i+1) {
					err = fmt.Errorf("entry %d numbered %d", i+1, r.Seq)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if res := verify(t, l, "s", nil); res.Break != nil || res.Rows != 6 {
			t.Fatalf("interleaved shapes: %+v; want 6 entries intact", res)
		}
		for _, seq := range []int64{5, 8} {
			insert := fmt.Sprintf(`INSERT INTO racefree_audit (tenant, scope, seq, at, actor, action, subject, data, key_id, prev_mac, mac) VALUES ('default', 's', %d, 0, 'a', 'b', '', %s, 'k1', %s, %s)`,
				seq, blob(db, []byte("x")), blob(db, []byte("x")), blob(db, []byte("x")))
			if _, err := db.ExecContext(ctx, insert); err == nil {
				t.Errorf("entry %d after head 6 accepted", seq)
			}
		}
	})
}

// TestAttackNULInAField: a NUL byte written into a text field (which
// CheckText never lets Append write; SQLite stores it, PostgreSQL text
// refuses it) is reported modified, wherever it sits.
func TestAttackNULInAField(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	l := newLog(t, db, ring(t, "k1"))
	appendN(t, l, "s", 4)
	for seq, col := range map[int]string{2: "actor", 3: "subject", 4: "key_id"} {
		tamper(t, db, fmt.Sprintf(`UPDATE racefree_audit SET %s = %s || char(0) || 'x' WHERE seq = %d`, col, col, seq))
	}
	wantBreak(t, verify(t, l, "s", nil), Modified, 2)
	for _, seq := range []int{2, 3} {
		col := map[int]string{2: "actor", 3: "subject"}[seq]
		tamper(t, db, fmt.Sprintf(`UPDATE racefree_audit SET %s = substr(%s, 1, instr(%s, char(0)) - 1) WHERE seq = %d`, col, col, col, seq))
		wantBreak(t, verify(t, l, "s", nil), Modified, int64(seq+1))
	}
}

// TestAppendWritesTheHeadOncePerEntry counts the writes to the head row
// that Append makes, in the caller's transaction: one an entry, the
// insert's trigger (lock_head only reads the head under its lock), on a
// schema at exactly OneWriteVersion and on the current one. One version
// below, the previous release's shape, the upsert that takes the number
// and then the trigger, writes it twice. PostgreSQL counts the
// transaction's row writes itself (pg_stat_xact_user_tables); on SQLite
// a temporary trigger, on the transaction's own connection, counts them.
func TestAppendWritesTheHeadOncePerEntry(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		for _, c := range []struct {
			version  int64 // 0: the current schema
			perEntry int64
		}{{OneWriteVersion - 1, 2}, {OneWriteVersion, 1}, {0, 1}} {
			t.Run(fmt.Sprint("schema ", c.version), func(t *testing.T) {
				ctx := context.Background()
				db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated, TxAttempts: 1})
				if c.version > 0 {
					if _, err := db.MigrateUpTo(ctx, c.version); err != nil {
						t.Fatal(err)
					}
				}
				l := newLog(t, db, ring(t, "k1"))
				appendN(t, l, "s", 1) // the head exists: the next appends only move it
				pg := db.Engine() == "postgres"
				count := func(tx *sql.Tx) int64 {
					t.Helper()
					q := `SELECT COUNT(*) FROM temp.head_writes`
					if pg {
						q = `SELECT COALESCE(SUM(n_tup_upd + n_tup_ins), 0) FROM pg_stat_xact_user_tables WHERE relname = 'racefree_audit_heads'`
					}
					var n int64
					if err := tx.QueryRowContext(ctx, q).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				}
				tx, err := db.SQL().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback() // the temporary trigger and table go with it
				if !pg {
					testdb.ExecAll(t, tx,
						`CREATE TEMP TABLE head_writes (n INTEGER)`,
						`CREATE TEMP TRIGGER head_updated AFTER UPDATE ON main.racefree_audit_heads BEGIN INSERT INTO head_writes VALUES (1); END`,
						`CREATE TEMP TRIGGER head_inserted AFTER INSERT ON main.racefree_audit_heads BEGIN INSERT INTO head_writes VALUES (1); END`,
					)
				}
				before := count(tx)
				const entries = 3
				for i := range entries {
					if _, err := l.Append(ctx, tx, "s", Entry{Actor: "a", Action: fmt.Sprint("once ", i)}); err != nil {
						t.Fatal(err)
					}
				}
				if got, want := count(tx)-before, entries*c.perEntry; got != want {
					t.Errorf("%d appends wrote the head row %d times, want %d", entries, got, want)
				}
			})
		}
	})
}
