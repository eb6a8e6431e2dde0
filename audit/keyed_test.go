package audit

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// sameRecord fails unless got is want (the stored record, replayed).
func sameRecord(t *testing.T, what string, got, want Record) {
	t.Helper()
	if got.Seq != want.Seq || got.Scope != want.Scope || got.Tenant != want.Tenant || !got.At.Equal(want.At) || got.Actor != want.Actor ||
		got.Action != want.Action || got.Subject != want.Subject || !bytes.Equal(got.Data, want.Data) || got.KeyID != want.KeyID ||
		!bytes.Equal(got.PrevMAC, want.PrevMAC) || !bytes.Equal(got.MAC, want.MAC) {
		t.Fatalf("%s: %+v; want %+v", what, got, want)
	}
}

// TestLostReplyAppendsTwiceUnlessKeyed loses PostgreSQL's reply to the
// commit of an Append on the pool (testdb.CutReply forwards the COMMIT and
// cuts the connection before its reply): the entry committed, Append says
// unavailable, and Append run again appends the same entry a second time
// under the next number. AppendKeyed settles the same loss: its retry with
// the same key gets the committed record back, on the pool and in the
// caller's transaction, and appends nothing.
func TestLostReplyAppendsTwiceUnlessKeyed(t *testing.T) {
	t.Parallel()
	proxy, dsn := testdb.NewCutReply(t, testdb.NewDSN(t, racefree.Postgres))
	db := testdb.Open(t, dsn, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, keys := newLog(t, db, ring(t, "k1")), idempotency.New(db, nil)

	lose := func(what, marker string, call func() error) {
		t.Helper()
		before := proxy.Cuts()
		proxy.LoseNextCommit(marker)
		err := call()
		proxy.Disarm()
		if proxy.Cuts() != before+1 {
			t.Fatalf("%s: no COMMIT reply was lost (err %v)", what, err)
		}
		if !errors.Is(err, racefree.ErrUnavailable) {
			t.Fatalf("%s with its COMMIT reply lost: %v; want racefree.ErrUnavailable", what, err)
		}
	}
	entries := func(scope string, want int) []Record {
		t.Helper()
		rs, err := l.List(ctx, scope, 0, 10)
		if err != nil || len(rs) != want {
			t.Fatalf("List(%s): %d entries, %v; want %d", scope, len(rs), err, want)
		}
		return rs
	}

	// Append on the pool: the entry commits, the caller cannot know it,
	// and the rerun appends it again.
	e := Entry{Actor: "alice", Action: "paid", Subject: "invoice-1"}
	lose("Append", "plain-scope", func() error { _, err := l.Append(ctx, db, "plain-scope", e); return err })
	entries("plain-scope", 1)
	if r, err := l.Append(ctx, db, "plain-scope", e); err != nil || r.Seq != 2 {
		t.Fatalf("Append again after the lost reply: %+v, %v; want entry 2, the same entry twice", r, err)
	}

	// AppendKeyed on the pool: the retry learns the committed record.
	lose("AppendKeyed", "keyed-scope", func() error {
		_, _, err := l.AppendKeyed(ctx, db, keys, "keyed-scope", e, "pay-1")
		return err
	})
	committed := entries("keyed-scope", 1)[0]
	r, replayed, err := l.AppendKeyed(ctx, db, keys, "keyed-scope", e, "pay-1")
	if err != nil || !replayed {
		t.Fatalf("retried AppendKeyed: replayed %v, %v; want the committed entry, replayed", replayed, err)
	}
	sameRecord(t, "retried AppendKeyed", r, committed)
	entries("keyed-scope", 1)

	// AppendKeyed in the caller's transaction, whose commit's reply is lost.
	e2 := Entry{Actor: "alice", Action: "refunded", Subject: "invoice-1"}
	lose("AppendKeyed in a transaction", "pay-2", func() error {
		return tenant.InTx(ctx, db, tenant.Default, func(ctx context.Context, tx *sql.Tx) error {
			_, _, err := l.AppendKeyed(ctx, tx, keys, "keyed-scope", e2, "pay-2")
			return err
		})
	})
	committed = entries("keyed-scope", 2)[1]
	err = tenant.InTx(ctx, db, tenant.Default, func(ctx context.Context, tx *sql.Tx) error {
		r, replayed, err = l.AppendKeyed(ctx, tx, keys, "keyed-scope", e2, "pay-2")
		return err
	})
	if err != nil || !replayed {
		t.Fatalf("retried AppendKeyed in a transaction: replayed %v, %v", replayed, err)
	}
	sameRecord(t, "retried AppendKeyed in a transaction", r, committed)
	entries("keyed-scope", 2)
	wantIntact(t, verify(t, l, "keyed-scope", nil))
}

// TestAppendKeyedRetryGetsTheSameEntry: AppendKeyed with a key it saw
// before replays the record it appended and appends nothing, under 16
// concurrent callers too; the same key with another entry is ErrMismatch;
// a key names one request to one scope; a rolled-back transaction records
// neither entry nor key; bad input changes nothing; the chain verifies.
func TestAppendKeyedRetryGetsTheSameEntry(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{MaxOpenConns: 8, TxAttempts: 100}, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, keys := newLog(t, db, ring(t, "k1")), idempotency.New(db, nil)
		length := func(scope string, want int64) {
			t.Helper()
			if n, err := l.Length(ctx, scope); err != nil || n != want {
				t.Fatalf("Length(%s) = %d, %v; want %d", scope, n, err, want)
			}
		}
		e := Entry{Actor: "alice", Action: "paid", Subject: "invoice-1", Data: []byte(`{"eur":5}`)}
		first, replayed, err := l.AppendKeyed(ctx, db, keys, "s", e, "k1")
		if err != nil || replayed || first.Seq != 1 {
			t.Fatalf("AppendKeyed: %+v, replayed %v, %v; want entry 1", first, replayed, err)
		}
		again, replayed, err := l.AppendKeyed(ctx, db, keys, "s", e, "k1")
		if err != nil || !replayed {
			t.Fatalf("AppendKeyed again: replayed %v, %v", replayed, err)
		}
		sameRecord(t, "AppendKeyed again", again, first)
		sameRecord(t, "the stored entry", entryRow(t, l, "s", 1), first)
		length("s", 1)
		for _, other := range []Entry{
			{Actor: "bob", Action: e.Action, Subject: e.Subject, Data: e.Data},
			{Actor: e.Actor, Action: "refunded", Subject: e.Subject, Data: e.Data},
			{Actor: e.Actor, Action: e.Action, Subject: "invoice-2", Data: e.Data},
			{Actor: e.Actor, Action: e.Action, Subject: e.Subject, Data: []byte(`{"eur":6}`)},
		} {
			if _, _, err := l.AppendKeyed(ctx, db, keys, "s", other, "k1"); !errors.Is(err, racefree.ErrMismatch) {
				t.Fatalf("the same key with %+v: %v; want racefree.ErrMismatch", other, err)
			}
		}
		length("s", 1)

		// A key names one request to one scope.
		if r, replayed, err := l.AppendKeyed(ctx, db, keys, "t", e, "k1"); err != nil || replayed || r.Seq != 1 {
			t.Fatalf("the same key in another scope: %+v, replayed %v, %v; want its entry 1", r, replayed, err)
		}

		// A rolled-back transaction records nothing.
		rollback := errors.New("roll back")
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			if r, _, err := l.AppendKeyed(ctx, tx, keys, "s", e, "k2"); err != nil || r.Seq != 2 {
				t.Errorf("AppendKeyed in a transaction: %+v, %v; want entry 2", r, err)
			}
			return rollback
		})
		if !errors.Is(err, rollback) {
			t.Fatal(err)
		}
		length("s", 1)
		if r, replayed, err := l.AppendKeyed(ctx, db, keys, "s", e, "k2"); err != nil || replayed || r.Seq != 2 {
			t.Fatalf("AppendKeyed after the rollback: %+v, replayed %v, %v; want a new entry 2", r, replayed, err)
		}

		// 16 callers with one key: one entry, handed to all of them.
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			fresh int
		)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, replayed, err := l.AppendKeyed(ctx, db, keys, "s", e, "k3")
				if err != nil || r.Seq != 3 {
					t.Errorf("concurrent AppendKeyed: entry %d, %v; want 3", r.Seq, err)
				}
				mu.Lock()
				defer mu.Unlock()
				if !replayed {
					fresh++
				}
			}()
		}
		wg.Wait()
		if fresh != 1 {
			t.Errorf("%d of 16 concurrent calls with one key appended; want 1", fresh)
		}
		length("s", 3)

		// A key is the tenant's: another tenant's same key is its own request.
		acme, err := tenant.With(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if r, replayed, err := l.AppendKeyed(acme, db, keys, "s", e, "k1"); err != nil || replayed || r.Seq != 1 || r.Tenant != "acme" {
			t.Fatalf("another tenant's AppendKeyed with k1: %+v, replayed %v, %v; want its own entry 1", r, replayed, err)
		}
		length("s", 3)

		// Bad input changes nothing.
		if _, _, err := l.AppendKeyed(ctx, db, keys, "s", e, ""); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("empty key: %v; want an InputError", err)
		}
		if _, _, err := l.AppendKeyed(ctx, db, keys, "s", Entry{Actor: "a"}, "k4"); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("no action: %v; want an InputError", err)
		}
		if _, _, err := l.AppendKeyed(ctx, db, nil, "s", e, "k4"); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("no keys: %v; want an InputError", err)
		}
		length("s", 3)
		wantIntact(t, verify(t, l, "s", nil))
	})
}
