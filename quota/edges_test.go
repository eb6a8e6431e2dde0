package quota_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
)

// The tests of this file try the quota promises at their edges (the
// boundary matrix of docs/contributing.md): each limit at the limit and
// one past it, two values that differ in one dimension alone, the
// caller's transaction committed and rolled back, a caller cancelled at
// each stage, and each class of error the degraded decision tells apart.

// scopeRows counts the rows of scope in table.
func scopeRows(t *testing.T, db *racefree.DB, table, scope string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), bind(db, `SELECT count(*) FROM `+table+` WHERE scope = $1`), scope).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEdgesScopesKindsAndKeysAreApart charges one key of one tenant
// under two scopes (two Limiters), under two kinds, and beside another
// key: each is a counter of its own, a consumption key of one scope is a
// first charge in the other, and a Limiter's Refund and Reap touch its
// own scope's rows alone.
func TestEdgesScopesKindsAndKeysAreApart(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		a, err := quota.New(db, &quota.Options{Scope: "a", LedgerKeep: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		b, err := quota.New(db, &quota.Options{Scope: "b", LedgerKeep: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []quota.Policy{gcra, window, sliding} {
			if d := consume(t, a, db, "k", 5, p); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("%s: scope a's whole limit: %+v", p.Kind, d)
			}
			if d := consume(t, a, db, "k", 1, p); d.Allowed {
				t.Fatalf("%s: scope a past its limit: %+v", p.Kind, d)
			}
			// One dimension changed at a time: the scope, then the key.
			if d := consume(t, b, db, "k", 5, p); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("%s: the same key under scope b after a's limit: %+v, want its own whole limit", p.Kind, d)
			}
			if d := consume(t, a, db, "k2", 5, p); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("%s: another key of scope a: %+v, want its own whole limit", p.Kind, d)
			}
			// Refund in b gives b its units back and leaves a's counter full.
			if d, err := b.Refund(ctx, db, "k", 5, p); err != nil || d.Remaining != 5 {
				t.Fatalf("%s: refund in scope b: %+v, %v", p.Kind, d, err)
			}
			if d := consume(t, a, db, "k", 1, p); d.Allowed {
				t.Fatalf("%s: scope a after b's refund: %+v, want still denied", p.Kind, d)
			}
		}
		// The kinds: one key of one scope under a GCRA and a fixed-window
		// policy is two counters.
		if d := consume(t, b, db, "kinds", 5, gcra); !d.Allowed {
			t.Fatalf("gcra: %+v", d)
		}
		if d := consume(t, b, db, "kinds", 5, window); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("the same key as a fixed window after the bucket emptied: %+v, want its own limit", d)
		}
		if d := consume(t, b, db, "kinds", 1, gcra); d.Allowed || d.RetryAfter != 100*time.Millisecond {
			t.Fatalf("the bucket after the window's charge: %+v, want denied for 100ms", d)
		}
		// One consumption key, two scopes: each a first charge.
		for _, l := range []*quota.Limiter{a, b} {
			d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "c", N: 1, Policy: window, ConsumptionKey: "req-1"}})
			if err != nil || !d.Allowed || d.Replayed {
				t.Fatalf("consumption key req-1: %+v, %v; want a first charge in each scope", d, err)
			}
		}
		// Reap: a's Limiter deletes a's expired rows and leaves b's.
		clock.Advance(2 * time.Second)
		aQuotas, aLedger := scopeRows(t, db, "racefree_quotas", "a"), scopeRows(t, db, "racefree_quota_ledger", "a")
		bQuotas, bLedger := scopeRows(t, db, "racefree_quotas", "b"), scopeRows(t, db, "racefree_quota_ledger", "b")
		if aQuotas == 0 || aLedger != 1 || bQuotas == 0 || bLedger != 1 {
			t.Fatalf("rows before the reap: a %d+%d, b %d+%d", aQuotas, aLedger, bQuotas, bLedger)
		}
		// The sliding windows still count (their window began at t0, they
		// count until t0 + 2s): a reap at t0 + 2s takes every row of a.
		n, err := a.Reap(ctx, db)
		if err != nil || n != int64(aQuotas+aLedger) {
			t.Fatalf("reap of scope a: %d, %v; want %d", n, err, aQuotas+aLedger)
		}
		if got, got2 := scopeRows(t, db, "racefree_quotas", "b"), scopeRows(t, db, "racefree_quota_ledger", "b"); got != bQuotas || got2 != bLedger {
			t.Fatalf("scope b after a's reap: %d counters and %d keys, want %d and %d", got, got2, bQuotas, bLedger)
		}
	})
}

// TestEdgesConsumeInTheCallersTransaction charges and refunds in the
// caller's transaction, of each kind: rolled back, a later reader on the
// pool sees the key as it was; committed, it sees the charge.
func TestEdgesConsumeInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		l := setup(t, db)
		begin := func() *sql.Tx {
			t.Helper()
			tx, err := db.SQL().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return tx
		}
		for _, p := range []quota.Policy{gcra, window, sliding} {
			key := "tx-" + string(p.Kind)
			tx := begin()
			if d := consume(t, l, tx, key, 5, p); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("%s: the whole limit in the transaction: %+v", p.Kind, d)
			}
			if d := consume(t, l, tx, key, 1, p); d.Allowed {
				t.Fatalf("%s: past the limit in the same transaction: %+v", p.Kind, d)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if tat, used := row(t, db, key, p.Kind); tat != -1 || used != -1 {
				t.Fatalf("%s: a rolled-back charge left a counter (%d, %d)", p.Kind, tat, used)
			}
			if d := consume(t, l, db, key, 5, p); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("%s: the pool after the rollback: %+v, want the whole limit", p.Kind, d)
			}
			// Now the key is empty: a refund rolled back gives nothing back,
			// a refund committed does.
			tx = begin()
			if d, err := l.Refund(ctx, tx, key, 5, p); err != nil || d.Remaining != 5 {
				t.Fatalf("%s: refund in the transaction: %+v, %v", p.Kind, d, err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if d := consume(t, l, db, key, 1, p); d.Allowed {
				t.Fatalf("%s: after a rolled-back refund: %+v, want denied", p.Kind, d)
			}
			tx = begin()
			if d, err := l.Refund(ctx, tx, key, 2, p); err != nil || d.Remaining != 2 {
				t.Fatalf("%s: refund 2 in the transaction: %+v, %v", p.Kind, d, err)
			}
			if d := consume(t, l, tx, key, 1, p); !d.Allowed || d.Remaining != 1 {
				t.Fatalf("%s: a charge after the refund, in the transaction: %+v", p.Kind, d)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if d := consume(t, l, db, key, 1, p); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("%s: the pool after the commit: %+v, want the last unit", p.Kind, d)
			}
			if d := consume(t, l, db, key, 1, p); d.Allowed {
				t.Fatalf("%s: the pool past the limit after the commit: %+v", p.Kind, d)
			}
		}
	})
}

// TestEdgesCancelledCaller cancels a charge before it is sent, in the
// caller's transaction before its commit, and (on PostgreSQL) while it
// waits for the row lock of a transaction that charged the same key: the
// caller gets the context's error, never a decision of OnUnavailable's,
// under FailClosed and FailOpen alike; on the lock, with
// racefree.ErrUnavailable too, since its pipelined COMMIT may still
// commit the charge.
func TestEdgesCancelledCaller(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	cfg.Combine = racefree.CombineOff // a charge alone on the pool
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l := setup(t, db)
		open := gcra
		open.OnUnavailable = quota.FailOpen

		// Before it is sent.
		gone, stop := context.WithCancel(ctx)
		stop()
		for _, p := range []quota.Policy{gcra, open, window, sliding} {
			if d, err := l.Consume(gone, db, "k", 1, p); !errors.Is(err, context.Canceled) || d.Allowed || d.Degraded {
				t.Fatalf("%s (on unavailable %d) with a cancelled context: %+v, %v; want context.Canceled", p.Kind, p.OnUnavailable, d, err)
			}
		}
		if d, err := l.ConsumeAll(gone, db, []quota.Request{{Key: "k", N: 1, Policy: open}}); !errors.Is(err, context.Canceled) || d.Allowed {
			t.Fatalf("ConsumeAll with a cancelled context: %+v, %v; want context.Canceled", d, err)
		}
		if n := count(t, db, "racefree_quotas"); n != 0 {
			t.Fatalf("%d counters after cancelled charges, want none", n)
		}

		// In the caller's transaction, cancelled before the commit.
		txCtx, stopTx := context.WithCancel(ctx)
		tx, err := db.SQL().BeginTx(txCtx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := l.Consume(txCtx, tx, "k", 5, gcra); err != nil || !d.Allowed {
			t.Fatalf("charge in the transaction: %+v, %v", d, err)
		}
		stopTx()
		if err := tx.Commit(); err == nil {
			t.Fatal("the commit of a transaction whose context ended succeeded")
		}
		if d := consume(t, l, db, "k", 5, gcra); !d.Allowed {
			t.Fatalf("after the cancelled transaction: %+v, want the whole bucket", d)
		}

		// The combiner is off here: with it, a charge waits for the row
		// lock inside its batch, which ends at the charge's Policy.Wait
		// (TestACombinedChargeGivesUpAtItsWait tries that).
		if db.Engine() != racefree.Postgres {
			return
		}
		// Waiting on the row lock, behind a transaction that refunded the
		// key and then commits.
		holder, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Rollback() }()
		if d, err := l.Refund(ctx, holder, "k", 5, gcra); err != nil || d.Remaining != 5 {
			t.Fatalf("refund in the holder: %+v, %v", d, err)
		}
		pid := testdb.BackendPID(t, holder)
		for _, p := range []quota.Policy{gcra, open} {
			waitCtx, stopWait := context.WithCancel(ctx)
			done := make(chan error, 1)
			var d quota.Decision
			go func() {
				var err error
				d, err = l.Consume(waitCtx, db, "k", 1, p)
				done <- err
			}()
			if !testdb.BlockedBy(t, db, pid, nil) {
				t.Fatal("the charge did not wait for the holder's row lock")
			}
			stopWait()
			if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, racefree.ErrUnavailable) || d.Allowed || d.Degraded {
				t.Fatalf("on unavailable %d, cancelled on the row lock: %+v, %v; want context.Canceled and ErrUnavailable (an unknown outcome), no decision", p.OnUnavailable, d, err)
			}
		}
		if err := holder.Commit(); err != nil {
			t.Fatal(err)
		}
		testdb.Unblocked(t, db, pid, 10*time.Second)
		// The cancelled charges were sent: each may have been charged
		// (outcome unknown, as a lost reply), none twice.
		d := consume(t, l, db, "k", 1, gcra)
		if !d.Allowed || d.Remaining < 2 || d.Remaining > 4 {
			t.Fatalf("after the holder's refund and two cancelled charges: %+v, want 2 to 4 remaining", d)
		}
	})
}

// TestEdgesDegradedOnlyWhenTheDatabaseDidNotAnswer tells the classes of
// error apart under FailOpen: a database that did not answer within Wait
// is the policy's admitting decision, Degraded; bad input, a schema too
// old and a cancelled caller are errors, never admitted.
func TestEdgesDegradedOnlyWhenTheDatabaseDidNotAnswer(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(ctx, 10); err != nil {
			t.Fatal(err)
		}
		l := setup(t, db)
		open, slidingOpen := gcra, sliding
		open.OnUnavailable, slidingOpen.OnUnavailable = quota.FailOpen, quota.FailOpen
		for _, p := range []quota.Policy{open, slidingOpen} {
			d, err := l.Consume(ctx, db, "k", 1, p)
			if !errors.Is(err, racefree.ErrSchemaOutdated) || errors.Is(err, racefree.ErrUnavailable) || d.Allowed || d.Degraded {
				t.Errorf("%s, fail open, at schema 10: %+v, %v; want ErrSchemaOutdated, not admitted", p.Kind, d, err)
			}
			d, err = l.ConsumeAll(ctx, db, []quota.Request{{Key: "k", N: 1, Policy: p}})
			if !errors.Is(err, racefree.ErrSchemaOutdated) || errors.Is(err, racefree.ErrUnavailable) || d.Allowed || d.Degraded {
				t.Errorf("ConsumeAll %s, fail open, at schema 10: %+v, %v; want ErrSchemaOutdated, not admitted", p.Kind, d, err)
			}
		}
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		if d, err := l.Consume(ctx, db, "k", 6, open); !errors.Is(err, racefree.ErrInvalidInput) || d.Allowed || d.Degraded {
			t.Errorf("fail open, n past the burst: %+v, %v; want ErrInvalidInput", d, err)
		}
		// The database does not answer: the counter's row (PostgreSQL) or
		// the write lock (SQLite) is held.
		consume(t, l, db, "k", 1, gcra)
		holdTheCounters(t, db)
		short := open
		short.Wait = 200 * time.Millisecond
		if d, err := l.Consume(ctx, db, "k", 1, short); err != nil || !d.Allowed || !d.Degraded {
			t.Errorf("fail open, no answer within Wait: %+v, %v; want admitted, Degraded", d, err)
		}
	})
}

// TestEdgesInputBounds tries each documented input limit at the limit and
// one past it: a key and a consumption key of MaxKeyBytes, a Scope of
// MaxKeyBytes, a policy name of 64 bytes, a Per of MaxPer, New's
// ReapBatch (100,000) and LedgerKeep (1 ms to 10 years), and a Wait of
// NoWait. What is refused is an InputError and writes nothing.
func TestEdgesInputBounds(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := setup(t, db)
		atMax, pastMax := strings.Repeat("k", quota.MaxKeyBytes), strings.Repeat("k", quota.MaxKeyBytes+1)
		refused := func(what string, call func() error) {
			t.Helper()
			before := snapshot(t, db, "default")
			if err := call(); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("%s: %v, want ErrInvalidInput", what, err)
			}
			if after := snapshot(t, db, "default"); after != before {
				t.Fatalf("%s wrote:\n%s\nwas\n%s", what, after, before)
			}
		}

		if d := consume(t, l, db, atMax, 1, gcra); !d.Allowed {
			t.Fatalf("a key of MaxKeyBytes: %+v", d)
		}
		if tat, _ := row(t, db, atMax, quota.GCRA); tat == -1 {
			t.Fatal("a key of MaxKeyBytes stored no counter")
		}
		refused("a key of MaxKeyBytes + 1", func() error {
			_, err := l.Consume(ctx, db, pastMax, 1, gcra)
			return err
		})
		if d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "c", N: 1, Policy: window, ConsumptionKey: atMax}}); err != nil || !d.Allowed {
			t.Fatalf("a consumption key of MaxKeyBytes: %+v, %v", d, err)
		}
		refused("a consumption key of MaxKeyBytes + 1", func() error {
			_, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "c", N: 1, Policy: window, ConsumptionKey: pastMax}})
			return err
		})

		named := gcra
		named.Name = strings.Repeat("n", 64)
		if d := consume(t, l, db, "named", 1, named); !d.Allowed {
			t.Fatalf("a policy name of 64 bytes: %+v", d)
		}
		named.Name += "n"
		refused("a policy name of 65 bytes", func() error {
			_, err := l.Consume(ctx, db, "named", 1, named)
			return err
		})
		long := quota.Policy{Kind: quota.FixedWindow, Rate: 1, Per: quota.MaxPer, Wait: time.Minute}
		if d := consume(t, l, db, "long", 1, long); !d.Allowed {
			t.Fatalf("a window of MaxPer: %+v", d)
		}
		long.Per += time.Millisecond
		refused("a window of MaxPer + 1ms", func() error {
			_, err := l.Consume(ctx, db, "long", 1, long)
			return err
		})
		noWait := gcra
		noWait.Wait = quota.NoWait
		if d := consume(t, l, db, "nowait", 1, noWait); !d.Allowed {
			t.Fatalf("Wait NoWait: %+v", d)
		}
		noWait.Wait = quota.NoWait - 1
		refused("a Wait below NoWait", func() error {
			_, err := l.Consume(ctx, db, "nowait", 1, noWait)
			return err
		})
		before := snapshot(t, db, "default")
		for _, o := range []quota.Options{
			{Scope: strings.Repeat("s", quota.MaxKeyBytes)},
			{ReapBatch: 1},
			{ReapBatch: 100_000},
			{LedgerKeep: time.Millisecond},
			{LedgerKeep: 10 * 365 * 24 * time.Hour},
		} {
			if _, err := quota.New(db, &o); err != nil {
				t.Errorf("New(%+v): %v, want a Limiter", o, err)
			}
		}
		for _, o := range []quota.Options{
			{Scope: strings.Repeat("s", quota.MaxKeyBytes+1)},
			{ReapBatch: -1},
			{ReapBatch: 100_001},
			{LedgerKeep: time.Millisecond - 1},
			{LedgerKeep: 10*365*24*time.Hour + time.Millisecond},
		} {
			if _, err := quota.New(db, &o); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("New(%+v): %v, want ErrInvalidInput", o, err)
			}
		}
		// A scope of MaxKeyBytes charges.
		s, err := quota.New(db, &quota.Options{Scope: strings.Repeat("s", quota.MaxKeyBytes)})
		if err != nil {
			t.Fatal(err)
		}
		if d := consume(t, s, db, atMax, 5, gcra); !d.Allowed {
			t.Fatalf("a key and a scope of MaxKeyBytes: %+v", d)
		}
		if got := snapshot(t, db, "default"); got == before {
			t.Fatal("the charge of the long scope wrote nothing")
		}
	})
}

// TestEdgesReapAtTheExactMillisecond reaps a consumption key and a
// fixed-window counter 1 ms before they mean the same as no row, and at
// that millisecond: LedgerKeep after the charge, the window's end.
func TestEdgesReapAtTheExactMillisecond(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0.Add(250 * time.Millisecond))
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0.Add(250 * time.Millisecond))
		ctx := context.Background()
		l, err := quota.New(db, &quota.Options{LedgerKeep: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		// A fixed window of an hour whose window began at t0: its counter
		// means nothing from t0 + 1h, the ledger row from t0 + 250ms + 1h.
		hourly := quota.Policy{Kind: quota.FixedWindow, Rate: 5, Per: time.Hour, Wait: time.Minute}
		if d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "w", N: 1, Policy: hourly, ConsumptionKey: "once"}}); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		reap := func(want int64) {
			t.Helper()
			if n, err := l.Reap(ctx, db); err != nil || n != want {
				t.Fatalf("reap at %s: %d, %v; want %d", clock.Now().Sub(t0), n, err, want)
			}
		}
		clock.Set(t0.Add(time.Hour - time.Millisecond))
		reap(0)
		clock.Set(t0.Add(time.Hour))
		reap(1) // the counter
		if got := count(t, db, "racefree_quota_ledger"); got != 1 {
			t.Fatalf("%d consumption keys at the window's end, want 1", got)
		}
		clock.Set(t0.Add(250*time.Millisecond + time.Hour - time.Millisecond))
		reap(0)
		if d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "w", N: 1, Policy: hourly, ConsumptionKey: "once"}}); err != nil || !d.Replayed {
			t.Fatalf("the consumption key 1 ms before LedgerKeep: %+v, %v; want a replay", d, err)
		}
		clock.Set(t0.Add(250*time.Millisecond + time.Hour))
		reap(1) // the consumption key
		if got := count(t, db, "racefree_quota_ledger"); got != 0 {
			t.Fatalf("%d consumption keys at LedgerKeep, want 0", got)
		}
	})
}

// TestEdgesAChargePastItsWait holds the counters while a charge waits
// past its Policy.Wait, then lets them go, and reads what the charge left
// behind, under a clock that stands still. On SQLite the charge gave up
// before it wrote: nothing charged. On PostgreSQL the charge on the pool
// was sent with its COMMIT, and the server runs it once the lock is free:
// it may be charged after its caller got the degraded decision, once at
// most, which is what Degraded says ("the units may have been charged").
func TestEdgesAChargePastItsWait(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		consume(t, l, db, "k", 1, window)
		tx := holdTheCounters(t, db)
		short := window
		short.Wait = 200 * time.Millisecond
		d, err := l.Consume(context.Background(), db, "k", 3, short)
		if !errors.Is(err, racefree.ErrUnavailable) || d.Allowed || !d.Degraded {
			t.Fatalf("a charge past its Wait: %+v, %v; want denied, Degraded, ErrUnavailable", d, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		want := []int64{1} // SQLite: nothing more charged
		if db.Engine() == racefree.Postgres {
			want = []int64{1, 4} // charged once the lock was free, or not
			// Wait until no other session runs a statement on the
			// counters: the charge's, if the server still runs it.
			for deadline := time.Now().Add(10 * time.Second); ; {
				var n int
				err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM pg_stat_activity
					WHERE pid <> pg_backend_pid() AND state = 'active' AND query LIKE '%racefree_quotas%'`).Scan(&n)
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d sessions still run a statement on the counters", n)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		if _, used := row(t, db, "k", quota.FixedWindow); !slices.Contains(want, used) {
			t.Fatalf("after the charge past its Wait: %d used, want one of %v", used, want)
		}
	})
}

// TestEdgesShadowAtTheLimit charges each kind up to its limit and one
// past it, with Shadow and without: at the limit both charge and neither
// is ShadowDenied; one past, the Shadow policy admits with ShadowDenied
// and the figures of the refusal, writing nothing, where the policy
// without it refuses. In ConsumeAll a Shadow request over its limit
// leaves the call admitted and charges the others; the same request
// without Shadow refuses the call and charges nothing.
func TestEdgesShadowAtTheLimit(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		l := setup(t, db)
		for _, p := range []quota.Policy{gcra, window, sliding} {
			var refusal quota.Decision
			for _, shadow := range []bool{false, true} {
				p := p
				p.Shadow = shadow
				key := fmt.Sprintf("%s-%v", p.Kind, shadow)
				if d := consume(t, l, db, key, 5, p); !d.Allowed || d.ShadowDenied || d.Remaining != 0 {
					t.Fatalf("%s shadow %v: the whole limit: %+v, want admitted, not ShadowDenied", p.Kind, shadow, d)
				}
				tat, used := row(t, db, key, p.Kind)
				d := consume(t, l, db, key, 1, p)
				if got, _ := row(t, db, key, p.Kind); got != tat {
					t.Fatalf("%s shadow %v: one past the limit charged: tat %d, was %d", p.Kind, shadow, got, tat)
				}
				if _, got := row(t, db, key, p.Kind); got != used {
					t.Fatalf("%s shadow %v: one past the limit charged: used %d, was %d", p.Kind, shadow, got, used)
				}
				if !shadow {
					if d.Allowed || d.ShadowDenied || d.RetryAfter <= 0 {
						t.Fatalf("%s: one past the limit: %+v, want refused", p.Kind, d)
					}
					refusal = d
					continue
				}
				want := refusal
				want.Allowed, want.ShadowDenied = true, true
				if d != want {
					t.Fatalf("%s shadow: one past the limit: %+v, want %+v (the refusal's figures, admitted)", p.Kind, d, want)
				}
			}
		}
		// ConsumeAll: a full sliding window beside a fixed window with room.
		for _, shadow := range []bool{false, true} {
			s := sliding
			s.Shadow = shadow
			full, other := fmt.Sprintf("all-full-%v", shadow), fmt.Sprintf("all-other-%v", shadow)
			consume(t, l, db, full, 5, s)
			d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: other, N: 1, Policy: window}, {Key: full, N: 1, Policy: s}})
			if err != nil {
				t.Fatal(err)
			}
			_, used := row(t, db, other, quota.FixedWindow)
			if _, u := row(t, db, full, quota.SlidingWindow); u != 5 {
				t.Fatalf("shadow %v: ConsumeAll charged the full sliding window: used %d, want 5", shadow, u)
			}
			if shadow && (!d.Allowed || !d.ShadowDenied || used != 1) {
				t.Fatalf("ConsumeAll with a Shadow request over its limit: %+v, the other request used %d; want admitted, ShadowDenied, 1", d, used)
			}
			if !shadow && (d.Allowed || d.ShadowDenied || used != -1) {
				t.Fatalf("ConsumeAll with a request over its limit: %+v, the other request used %d; want refused, nothing charged", d, used)
			}
		}
	})
}

// TestEdgesSlidingConsumeAllInTheCallersTransaction runs ConsumeAll with
// a sliding window in the caller's transaction: a refusal (the sliding
// window one unit past its limit) rolls back its savepoint alone, so the
// caller's own write and the charges before it commit; a call at the
// limit, rolled back with the caller's transaction, leaves no counter.
func TestEdgesSlidingConsumeAllInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		l := setup(t, db)
		reqs := func(n int64) []quota.Request {
			return []quota.Request{{Key: "w", N: 1, Policy: window}, {Key: "s", N: n, Policy: sliding}}
		}
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if d, err := l.Consume(ctx, tx, "own", 1, gcra); err != nil || !d.Allowed {
				return fmt.Errorf("the caller's own charge: %+v, %v", d, err)
			}
			if d, err := l.ConsumeAll(ctx, tx, reqs(5)); err != nil || !d.Allowed || d.Remaining != 0 {
				return fmt.Errorf("the sliding window's whole limit: %+v, %v", d, err)
			}
			if d, err := l.ConsumeAll(ctx, tx, reqs(1)); err != nil || d.Allowed {
				return fmt.Errorf("one past the sliding window's limit: %+v, %v; want refused", d, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if tat, _ := row(t, db, "own", quota.GCRA); tat == -1 {
			t.Fatal("the caller's own charge did not commit beside a refused ConsumeAll")
		}
		if _, used := row(t, db, "w", quota.FixedWindow); used != 1 {
			t.Fatalf("the fixed window after one admitted and one refused call: used %d, want 1", used)
		}
		if _, used := row(t, db, "s", quota.SlidingWindow); used != 5 {
			t.Fatalf("the sliding window: used %d, want 5", used)
		}
		// Rolled back: the call at the limit leaves nothing.
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := l.ConsumeAll(ctx, tx, []quota.Request{{Key: "w2", N: 5, Policy: window}, {Key: "s2", N: 5, Policy: sliding}}); err != nil || !d.Allowed {
			t.Fatalf("the whole limits in the transaction: %+v, %v", d, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		for _, k := range []struct {
			key  string
			kind quota.Kind
		}{{"w2", quota.FixedWindow}, {"s2", quota.SlidingWindow}} {
			if tat, used := row(t, db, k.key, k.kind); tat != -1 || used != -1 {
				t.Fatalf("%s: a rolled-back ConsumeAll left a counter (%d, %d)", k.key, tat, used)
			}
		}
	})
}

// lockWaitCase is a charge of n units to a key that u units were charged
// to on the pool, and one more in a transaction the charge waits for.
type lockWaitCase struct{ u, n int64 }

// lockWaitCases: one unit that fits the committed counter exactly (and
// the snapshot's), two that are one past it (and fit the snapshot's), and
// two past a full committed counter that the snapshot refuses too, with
// other figures.
var lockWaitCases = []lockWaitCase{{u: 1, n: 1}, {u: 1, n: 2}, {u: 2, n: 2}}

// lockWaitPolicies have a limit of 3, one unit back per second.
var lockWaitPolicies = []quota.Policy{
	{Kind: quota.GCRA, Rate: 1, Per: time.Second, Burst: 3, Wait: time.Minute},
	{Kind: quota.FixedWindow, Rate: 3, Per: time.Second, Wait: time.Minute},
}

// TestEdgesALockWaitDecidesAtTheLimit charges, on PostgreSQL, keys whose
// row lock a transaction holds after charging one unit: alone (one
// statement each) and combined (one statement over arrays for the three
// keys), once the transaction commits, a charge that fits the committed
// counter exactly is admitted with nothing left, one unit past it is
// refused, and every refusal's figures are the committed counter's, of
// each kind.
func TestEdgesALockWaitDecidesAtTheLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, combine := range []bool{false, true} {
		_, cfg := manual(t0)
		cfg.Combine, cfg.CombineBatches = policyOf(combine), 1
		db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), cfg)
		l := setup(t, db)
		for _, p := range lockWaitPolicies {
			keys := make([]string, len(lockWaitCases))
			for i, c := range lockWaitCases {
				keys[i] = fmt.Sprintf("%s-%v-%d", p.Kind, combine, i)
				consume(t, l, db, keys[i], c.u, p)
			}
			got := make([]quota.Decision, len(lockWaitCases))
			call := func(i int) func() {
				return func() {
					var err error
					if got[i], err = l.Consume(ctx, db, keys[i], lockWaitCases[i].n, p); err != nil {
						t.Errorf("%s: %v", keys[i], err)
					}
				}
			}
			// hold charges one unit to each key in a transaction, runs the
			// calls, and commits once they wait for its locks.
			hold := func(keys []string, run func() (wait func())) {
				tx, err := db.SQL().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				for _, k := range keys {
					consume(t, l, tx, k, 1, p)
				}
				pid := testdb.BackendPID(t, tx)
				wait := run()
				testdb.BlockedBy(t, db, pid, nil)
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				wait()
			}
			if combine {
				calls := make([]func(), len(keys))
				for i := range keys {
					calls[i] = call(i)
				}
				hold(keys, func() func() { return together(t, ctx, l, db, calls...) })
			} else {
				for i := range keys {
					hold(keys[i:i+1], func() func() {
						done := make(chan struct{})
						go func() { defer close(done); call(i)() }()
						return func() { <-done }
					})
				}
			}
			for i, c := range lockWaitCases {
				if want := expect(p, c.u+1, c.n); got[i] != want {
					t.Errorf("%s: %d units on %d committed after the lock wait: %+v, want %+v", keys[i], c.n, c.u+1, got[i], want)
				}
			}
		}
	}
}

// TestEdgesPolicyBoundsAtTheLimitAndOnePast tries the bounds of a policy
// that no other test tries one past: Rate at MaxUnits and MaxUnits + 1,
// and a sliding window's Rate × Per at the largest product under 2^61 and
// one unit more, with Per at MaxPer. The limit is valid; one past is an
// InputError on policy.rate from Validate, Consume, Refund and
// ConsumeAll, and writes nothing, on both engines.
func TestEdgesPolicyBoundsAtTheLimitAndOnePast(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := setup(t, db)
		perMax := quota.MaxPer.Milliseconds()
		for _, c := range []struct {
			name    string
			atLimit quota.Policy
		}{
			{"a fixed window of MaxUnits", quota.Policy{Kind: quota.FixedWindow, Rate: quota.MaxUnits, Per: time.Second, Wait: time.Minute}},
			{"a gcra policy of MaxUnits", quota.Policy{Kind: quota.GCRA, Rate: quota.MaxUnits, Per: 2 * quota.MaxUnits * time.Millisecond, Burst: 1, Wait: time.Minute}},
			{"a sliding window of 2^61 unit-ms", quota.Policy{Kind: quota.SlidingWindow, Rate: (1 << 61) / perMax, Per: quota.MaxPer, Wait: time.Minute}},
		} {
			p := c.atLimit
			if err := p.Validate(); err != nil {
				t.Fatalf("%s: Validate: %v, want valid", c.name, err)
			}
			if d := consume(t, l, db, "at-limit", 1, p); !d.Allowed {
				t.Fatalf("%s: %+v, want allowed", c.name, d)
			}
			p.Rate++
			if err := p.Validate(); !isRateError(err) {
				t.Errorf("%s, one unit more: Validate: %v, want an InputError on policy.rate", c.name, err)
			}
			_, err1 := l.Consume(ctx, db, "past", 1, p)
			_, err2 := l.Refund(ctx, db, "past", 1, p)
			_, err3 := l.ConsumeAll(ctx, db, []quota.Request{{Key: "past", N: 1, Policy: p}})
			for i, err := range []error{err1, err2, err3} {
				if !isRateError(err) {
					t.Errorf("%s, one unit more: operation %d: %v, want an InputError on policy.rate", c.name, i+1, err)
				}
			}
			if tat, _ := row(t, db, "past", p.Kind); tat != -1 {
				t.Fatalf("%s, one unit more: a refused policy wrote a counter (tat %d)", c.name, tat)
			}
		}
	})
}

func isRateError(err error) bool {
	var ie *racefree.InputError
	return errors.As(err, &ie) && ie.Field == "policy.rate"
}

// TestEdgesTwoScopesOfOneKeyEachExplainTheirOwnCounter charges one key
// under two scopes by different amounts, of each kind, so that the two
// counters differ in the scope alone: a refusal in each scope says
// exactly what a refusal of another key of the same count says (its own
// counter's RetryAfter, Remaining and ResetAt, never the other scope's),
// and one consumption key sent with different requests in the two scopes
// replays, in each, that scope's own first charge.
func TestEdgesTwoScopesOfOneKeyEachExplainTheirOwnCounter(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		a, err := quota.New(db, &quota.Options{Scope: "a"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := quota.New(db, &quota.Options{Scope: "b"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []quota.Policy{gcra, window, sliding} {
			key := "k-" + string(p.Kind)
			consume(t, a, db, key, 4, p)
			consume(t, b, db, key, 2, p)
			// The references: other keys of scope a, charged the same.
			consume(t, a, db, key+"-ref4", 4, p)
			consume(t, a, db, key+"-ref2", 2, p)
			// Either scope is refused on its own counter, whichever of
			// the two rows a read that lost the scope would meet first.
			gotA, wantA := consume(t, a, db, key, 2, p), consume(t, a, db, key+"-ref4", 2, p)
			gotB, wantB := consume(t, b, db, key, 4, p), consume(t, a, db, key+"-ref2", 4, p)
			if wantA.Allowed || wantB.Allowed || wantA == wantB {
				t.Fatalf("%s: the references %+v and %+v must be two different refusals", p.Kind, wantA, wantB)
			}
			if gotA != wantA {
				t.Errorf("%s: scope a's refusal: %+v, want its own counter's %+v", p.Kind, gotA, wantA)
			}
			if gotB != wantB {
				t.Errorf("%s: scope b's refusal: %+v, want its own counter's %+v", p.Kind, gotB, wantB)
			}
		}
		// One consumption key, two scopes, two requests: each scope
		// replays its own.
		firstA := []quota.Request{{Key: "c", N: 1, Policy: window, ConsumptionKey: "req"}}
		firstB := []quota.Request{{Key: "d", N: 3, Policy: gcra, ConsumptionKey: "req"}}
		for i := range 2 {
			for _, c := range []struct {
				l         *quota.Limiter
				reqs      []quota.Request
				remaining int64
			}{{a, firstA, 4}, {b, firstB, 2}} {
				d, err := c.l.ConsumeAll(ctx, db, c.reqs)
				if err != nil || !d.Allowed || d.Replayed != (i == 1) || d.Remaining != c.remaining {
					t.Fatalf("send %d of %s under req in its scope: %+v, %v; want allowed, replayed %v, %d remaining",
						i+1, c.reqs[0].Key, d, err, i == 1, c.remaining)
				}
			}
		}
	})
}

// TestEdgesABatchKeepsScopesApart sends, in one batch of the combiner,
// a charge of one key under each of two scopes whose counters differ (on
// PostgreSQL one statement over arrays, each charge's limit read from its
// own element): each caller gets the decision of its own scope's counter,
// one allowed and one refused, to the millisecond.
func TestEdgesABatchKeepsScopesApart(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	cfg.Combine, cfg.CombineBatches = racefree.CombineOn, 1
	testdb.EachDSN(t, func(t *testing.T, d string) {
		clock.Set(t0)
		db := testdb.Open(t, d, cfg)
		ctx := context.Background()
		a, err := quota.New(db, &quota.Options{Scope: "a"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := quota.New(db, &quota.Options{Scope: "b"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []quota.Policy{
			{Kind: quota.GCRA, Rate: 10, Per: time.Second, Burst: 10, Wait: time.Minute},
			{Kind: quota.FixedWindow, Rate: 10, Per: time.Second, Wait: time.Minute},
		} {
			key := "k-" + string(p.Kind)
			consume(t, a, db, key, 2, p)
			consume(t, b, db, key, 9, p)
			var gotA, gotB quota.Decision
			gated(t, ctx, a, db, []func(){
				func() {
					var err error
					if gotA, err = a.Consume(ctx, db, key, 3, p); err != nil {
						t.Errorf("%s: scope a: %v", p.Kind, err)
					}
				},
				func() {
					var err error
					if gotB, err = b.Consume(ctx, db, key, 3, p); err != nil {
						t.Errorf("%s: scope b: %v", p.Kind, err)
					}
				},
			})
			if want := expect(p, 2, 3); gotA != want {
				t.Errorf("%s: scope a in the batch: %+v, want %+v", p.Kind, gotA, want)
			}
			if want := expect(p, 9, 3); gotB != want {
				t.Errorf("%s: scope b in the batch: %+v, want %+v", p.Kind, gotB, want)
			}
		}
	})
}

// TestEdgesALoweredLimitLeavesNothingRemaining lowers a policy's limit
// while its key is counted past the new one (a deploy that tightens a
// quota mid-window), for each kind on both engines: the refusal says 0
// remaining, never a negative figure, and so does the middleware's
// RateLimit header; the refusal still says when the key may be charged.
func TestEdgesALoweredLimitLeavesNothingRemaining(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		for _, was := range []quota.Policy{
			{Name: "api", Kind: quota.GCRA, Rate: 10, Per: time.Second, Burst: 8, Wait: time.Minute},
			{Name: "api", Kind: quota.FixedWindow, Rate: 8, Per: time.Second, Wait: time.Minute},
			{Name: "api", Kind: quota.SlidingWindow, Rate: 8, Per: time.Second, Wait: time.Minute},
		} {
			key := "lowered-" + string(was.Kind)
			consume(t, l, db, key, 7, was)
			now := was
			now.Rate, now.Burst = 5, min(was.Burst, 5)
			if now.Kind == quota.GCRA {
				now.Rate = was.Rate
			}
			d := consume(t, l, db, key, 1, now)
			if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
				t.Errorf("%s: a charge past the lowered limit: %+v; want refused, 0 remaining, a RetryAfter", was.Kind, d)
			}
			mw, err := l.Middleware(db, now, func(*http.Request) (string, error) { return key, nil })
			if err != nil {
				t.Fatal(err)
			}
			w := httptest.NewRecorder()
			mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
			if h := w.Header().Get("RateLimit"); w.Code != http.StatusTooManyRequests || !strings.HasPrefix(h, `"api";r=0;`) {
				t.Errorf("%s: the middleware past the lowered limit: %d RateLimit %q; want 429 with r=0", was.Kind, w.Code, h)
			}
		}
	})
}
