package quota_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
)

func count(t *testing.T, db *racefree.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestReapDeletesExpiredCountersInBatches(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		l, err := quota.New(db, &quota.Options{ReapBatch: 3, LedgerKeep: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 7 {
			consume(t, l, db, fmt.Sprintf("old%d", i), 1, gcra) // full again at +100ms
		}
		if d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "c", N: 1, Policy: window, ConsumptionKey: "once"}}); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		consume(t, l, db, "young", 5, gcra) // full again at +500ms
		clock.Advance(99 * time.Millisecond)
		if n, err := l.Reap(ctx, db); err != nil || n != 0 {
			t.Fatalf("reap 1ms before expiry: %d, %v; want 0", n, err)
		}
		clock.Advance(time.Millisecond)
		if n, err := l.Reap(ctx, db); err != nil || n != 7 {
			t.Fatalf("reap at expiry: %d, %v; want 7", n, err)
		}
		if got, want := count(t, db, "racefree_quotas"), 2; got != want {
			t.Fatalf("%d counters left, want %d", got, want)
		}
		// A reaped counter is a full bucket, as it was before the reap.
		if d := consume(t, l, db, "old0", 5, gcra); !d.Allowed {
			t.Fatalf("reaped key: %+v", d)
		}
		clock.Advance(time.Hour)
		if n, err := l.Reap(ctx, db); err != nil || n != 4 {
			t.Fatalf("reap after the ledger's hour: %d, %v; want 4 (3 counters, 1 consumption key)", n, err)
		}
		if got := count(t, db, "racefree_quota_ledger"); got != 0 {
			t.Fatalf("%d consumption keys left, want 0", got)
		}
	})
}

// TestReapSkipsLockedCounters holds an expired counter locked in an open
// transaction: Reap deletes the others without waiting for it, and the
// next run takes it.
func TestReapSkipsLockedCounters(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), cfg)
	ctx := context.Background()
	l := setup(t, db)
	for _, k := range []string{"a", "b", "c"} {
		consume(t, l, db, k, 1, gcra)
	}
	clock.Advance(time.Second)
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if d := consume(t, l, tx, "b", 1, gcra); !d.Allowed {
		t.Fatal(d)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := l.Reap(rctx, db)
	if err != nil || n != 2 {
		t.Fatalf("reap beside a locked counter: %d, %v; want 2 without waiting", n, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if n, err := l.Reap(ctx, db); err != nil || n != 1 {
		t.Fatalf("next reap: %d, %v; want 1", n, err)
	}
}

// holdTheCounters opens a transaction that holds the write lock (SQLite)
// or every counter's row lock (PostgreSQL), so that no charge is answered
// until it ends: it is rolled back when the test ends, or before by the
// caller.
func holdTheCounters(t *testing.T, db *racefree.DB) *sql.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	if db.Engine() == racefree.SQLite {
		_, err = tx.ExecContext(ctx, `UPDATE racefree_quotas SET used = used`)
	} else {
		_, err = tx.ExecContext(ctx, `SELECT 1 FROM racefree_quotas FOR UPDATE`)
	}
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// TestUnansweredDatabaseFollowsThePolicy holds the write lock (SQLite) or
// the counter's row lock (PostgreSQL) in an open transaction, so that a
// charge cannot be answered within its Wait.
func TestUnansweredDatabaseFollowsThePolicy(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := setup(t, db)
		consume(t, l, db, "k", 1, gcra)
		tx := holdTheCounters(t, db)
		closed, open := gcra, gcra
		closed.Wait, open.Wait = 200*time.Millisecond, 200*time.Millisecond
		open.OnUnavailable = quota.FailOpen
		start := time.Now()
		d, err := l.Consume(ctx, db, "k", 1, closed)
		if !errors.Is(err, racefree.ErrUnavailable) || d.Allowed || !d.Degraded {
			t.Fatalf("fail closed: %+v, %v; want denied, Degraded, ErrUnavailable", d, err)
		}
		d, err = l.Consume(ctx, db, "k", 1, open)
		if err != nil || !d.Allowed || !d.Degraded {
			t.Fatalf("fail open: %+v, %v; want allowed, Degraded", d, err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("two charges bounded by 200ms took %s", took)
		}
		// NoWait: the caller's deadline is the bound.
		callerOpen := open
		callerOpen.Wait = quota.NoWait
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		d, err = l.Consume(cctx, db, "k", 1, callerOpen)
		cancel()
		if err != nil || !d.Allowed || !d.Degraded {
			t.Fatalf("fail open on the caller's deadline: %+v, %v; want allowed, Degraded", d, err)
		}
		d, err = l.ConsumeAll(ctx, db, []quota.Request{{Key: "k", N: 1, Policy: open}})
		if err != nil || !d.Allowed || !d.Degraded {
			t.Fatalf("ConsumeAll fail open: %+v, %v; want allowed, Degraded", d, err)
		}
		_ = tx.Rollback()
		// A minute's Wait: on a loaded machine 200 ms may pass before the
		// pool answers even with the lock gone.
		if d := consume(t, l, db, "k", 1, gcra); !d.Allowed || d.Degraded {
			t.Fatalf("after the lock: %+v", d)
		}
	})
}
