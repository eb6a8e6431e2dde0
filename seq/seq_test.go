package seq_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/seq"
)

// checkGapless fails unless the ranges [first, first+n) cover exactly
// 1..total, each number once.
func checkGapless(t *testing.T, got [][2]int64) int64 {
	t.Helper()
	slices.SortFunc(got, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	want := int64(1)
	for _, r := range got {
		if r[0] != want {
			t.Fatalf("range [%d, %d) where %d was due: a gap or a duplicate; all: %v", r[0], r[0]+r[1], want, got)
		}
		want += r[1]
	}
	return want - 1
}

func backendPID(t *testing.T, tx *sql.Tx) int {
	t.Helper()
	pid := testdb.BackendPID(t, tx)
	return pid
}

// TestNextCountsFromOne: each (scope, name) counter starts at 1, NextN
// returns the first of n consecutive numbers, Current reads the last one
// handed out (0 before the first), and counters are apart.
func TestNextCountsFromOne(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		c := seq.New(db)
		if cur, err := c.Current(ctx, db, "acme", "invoice"); err != nil || cur != 0 {
			t.Fatalf("current before the first: %d, %v; want 0", cur, err)
		}
		steps := []struct {
			scope, name string
			n, first    int64
		}{
			{"acme", "invoice", 1, 1},
			{"acme", "invoice", 1, 2},
			{"acme", "invoice", 5, 3},
			{"acme", "invoice", 1, 8},
			{"acme", "ticket", 1, 1},
			{"globex", "invoice", 3, 1},
			{"globex", "invoice", 1, 4},
		}
		for _, s := range steps {
			got, err := c.NextN(ctx, db, s.scope, s.name, s.n)
			if err != nil || got != s.first {
				t.Fatalf("NextN(%s, %s, %d) = %d, %v; want %d", s.scope, s.name, s.n, got, err, s.first)
			}
		}
		if got, err := c.Next(ctx, db, "acme", "invoice"); err != nil || got != 9 {
			t.Fatalf("Next = %d, %v; want 9", got, err)
		}
		for _, w := range []struct {
			scope, name string
			last        int64
		}{{"acme", "invoice", 9}, {"acme", "ticket", 1}, {"globex", "invoice", 4}, {"initech", "invoice", 0}} {
			if got, err := c.Current(ctx, db, w.scope, w.name); err != nil || got != w.last {
				t.Fatalf("Current(%s, %s) = %d, %v; want %d", w.scope, w.name, got, err, w.last)
			}
		}
	})
}

// TestConcurrentNextIsGapless: 64 goroutines on one counter, half of them
// in transactions of their own (racefree.DB.InTx), half on the pool, with
// n from 1 to 3: the numbers handed out are exactly 1..N, no gap, no
// duplicate, and Current is N.
func TestConcurrentNextIsGapless(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{MaxOpenConns: 16, TxAttempts: 100}, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a deadlock fails, never hangs
		defer cancel()
		c := seq.New(db)
		const workers, rounds = 64, 8
		var (
			mu  sync.Mutex
			got [][2]int64
			wg  sync.WaitGroup
		)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					n := int64(1 + (w+r)%3)
					var first int64
					var err error
					if w%2 == 0 {
						err = db.InTx(ctx, func(tx *sql.Tx) error {
							first, err = c.NextN(ctx, tx, "acme", "invoice", n)
							return err
						})
					} else {
						first, err = c.NextN(ctx, db, "acme", "invoice", n)
					}
					if err != nil {
						t.Errorf("worker %d: %v", w, err)
						return
					}
					mu.Lock()
					got = append(got, [2]int64{first, n})
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		total := checkGapless(t, got)
		if cur, err := c.Current(ctx, db, "acme", "invoice"); err != nil || cur != total {
			t.Fatalf("Current = %d, %v; want %d", cur, err, total)
		}
	})
}

// TestRollbackConsumesNothing: a transaction that took numbers and rolled
// back leaves no gap: the next caller gets the same numbers, also when it
// was already waiting for the rolled-back transaction (PostgreSQL: it is
// seen waiting on the row lock before the rollback).
func TestRollbackConsumesNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a deadlock fails, never hangs
		defer cancel()
		c := seq.New(db)
		errRollback := errors.New("roll back")
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if n, err := c.NextN(ctx, tx, "acme", "invoice", 3); err != nil || n != 1 {
				t.Fatalf("NextN in the doomed tx = %d, %v; want 1", n, err)
			}
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatalf("InTx = %v", err)
		}
		if n, err := c.Next(ctx, db, "acme", "invoice"); err != nil || n != 1 {
			t.Fatalf("Next after the rollback = %d, %v; want 1", n, err)
		}

		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := c.NextN(ctx, tx, "acme", "invoice", 2); err != nil || n != 2 {
			t.Fatalf("NextN in the open tx = %d, %v; want 2", n, err)
		}
		type result struct {
			n   int64
			err error
		}
		done := make(chan result, 1)
		started := make(chan struct{})
		go func() {
			close(started)
			n, err := c.Next(ctx, db, "acme", "invoice")
			done <- result{n, err}
		}()
		<-started
		if db.Engine() == racefree.Postgres {
			pid := backendPID(t, tx)
			if !testdb.BlockedBy(t, db, pid, nil) {
				t.Fatal("Next did not wait for the open transaction")
			}
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if r := <-done; r.err != nil || r.n != 2 {
			t.Fatalf("Next behind the rolled-back tx = %d, %v; want 2", r.n, r.err)
		}
		if cur, err := c.Current(ctx, db, "acme", "invoice"); err != nil || cur != 2 {
			t.Fatalf("Current = %d, %v; want 2", cur, err)
		}
	})
}

// TestBadInputChangesNothing: empty, over-long, non-UTF-8 or NUL-bearing
// scopes and names, and n outside 1..MaxN, are an *racefree.InputError on
// both engines, and no number is consumed.
func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		c := seq.New(db)
		long := strings.Repeat("x", seq.MaxScopeBytes+1)
		for _, in := range []struct {
			scope, name string
			n           int64
		}{
			{"", "invoice", 1}, {long, "invoice", 1}, {"a\x00b", "invoice", 1}, {"\xff", "invoice", 1},
			{"acme", "", 1}, {"acme", strings.Repeat("y", seq.MaxNameBytes+1), 1}, {"acme", "in\x00voice", 1}, {"acme", "\xfe", 1},
			{"acme", "invoice", 0}, {"acme", "invoice", -1}, {"acme", "invoice", seq.MaxN + 1},
		} {
			_, err := c.NextN(ctx, db, in.scope, in.name, in.n)
			var ie *racefree.InputError
			if !errors.As(err, &ie) || !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("NextN(%q, %q, %d) = %v; want an InputError", in.scope, in.name, in.n, err)
			}
			if in.n == 1 {
				if _, err := c.Current(ctx, db, in.scope, in.name); !errors.As(err, &ie) {
					t.Fatalf("Current(%q, %q) = %v; want an InputError", in.scope, in.name, err)
				}
			}
		}
		var rows int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_sequences`).Scan(&rows); err != nil || rows != 0 {
			t.Fatalf("%d counter rows, %v; want none", rows, err)
		}
		if n, err := c.NextN(ctx, db, "acme", "invoice", seq.MaxN); err != nil || n != 1 {
			t.Fatalf("NextN(MaxN) = %d, %v; want 1", n, err)
		}
	})
}

// TestExhaustedConsumesNothing: a counter never passes the largest BIGINT;
// the call that would is ErrExhausted on both engines and leaves the
// counter as it was.
func TestExhaustedConsumesNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		c := seq.New(db)
		if _, err := c.Next(ctx, db, "acme", "invoice"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`UPDATE racefree_sequences SET last = %d`, int64(math.MaxInt64-2))); err != nil {
			t.Fatal(err)
		}
		if _, err := c.NextN(ctx, db, "acme", "invoice", 3); !errors.Is(err, seq.ErrExhausted) {
			t.Fatalf("NextN past the maximum = %v; want ErrExhausted", err)
		}
		if n, err := c.NextN(ctx, db, "acme", "invoice", 2); err != nil || n != math.MaxInt64-1 {
			t.Fatalf("NextN up to the maximum = %d, %v; want %d", n, err, int64(math.MaxInt64-1))
		}
		if _, err := c.Next(ctx, db, "acme", "invoice"); !errors.Is(err, seq.ErrExhausted) {
			t.Fatalf("Next at the maximum = %v; want ErrExhausted", err)
		}
		if cur, err := c.Current(ctx, db, "acme", "invoice"); err != nil || cur != math.MaxInt64 {
			t.Fatalf("Current = %d, %v; want the maximum", cur, err)
		}
	})
}

// TestScopesDoNotWait (PostgreSQL): 16 transactions each hold their own
// scope's counter locked (one also a second name), and each one's Next
// completes while all the others are still open: no counter waits for
// another. SQLite has one writer per file and cannot promise this.
func TestScopesDoNotWait(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	db := testdb.Open(t, d, &racefree.Config{MaxOpenConns: 20})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := seq.New(db)
	const scopes = 16
	for s := range scopes { // the rows exist, so each Next below takes a row lock
		if _, err := c.Next(ctx, db, fmt.Sprintf("tenant-%02d", s), "invoice"); err != nil {
			t.Fatal(err)
		}
	}
	txs := make([]*sql.Tx, scopes)
	defer func() {
		for _, tx := range txs {
			if tx != nil {
				_ = tx.Rollback()
			}
		}
	}()
	for s := range scopes {
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		txs[s] = tx
		// Any lock wait fails at once instead of at the deadline: none is
		// expected, so the timeout only shortens a failure.
		if _, err := tx.ExecContext(ctx, `SET LOCAL lock_timeout = '3s'`); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Next(ctx, tx, fmt.Sprintf("tenant-%02d", s), "invoice"); err != nil || n != 2 {
			t.Fatalf("scope %d waited or failed with %d others open: %d, %v; want 2", s, s, n, err)
		}
	}
	if n, err := c.Next(ctx, txs[0], "tenant-01", "ticket"); err != nil || n != 1 {
		t.Fatalf("another name of a locked scope: %d, %v; want 1", n, err)
	}
	for _, tx := range txs {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	txs = nil
	for s := range scopes {
		if cur, err := c.Current(ctx, db, fmt.Sprintf("tenant-%02d", s), "invoice"); err != nil || cur != 2 {
			t.Fatalf("scope %d: Current = %d, %v; want 2", s, cur, err)
		}
	}
}

// TestRepeatableReadIsRetried (PostgreSQL): at REPEATABLE READ and
// SERIALIZABLE, an increment committed after the transaction's snapshot
// makes Next fail with ErrRetryable (40001) and nothing consumed; run in
// racefree.DB.InTx (SET TRANSACTION first), 16 concurrent callers each get
// their numbers gapless, the retries absorbed.
func TestRepeatableReadIsRetried(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	db := testdb.Open(t, d, &racefree.Config{MaxOpenConns: 16, TxAttempts: 1000, TxBackoff: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a deadlock fails, never hangs
	defer cancel()
	c := seq.New(db)
	for _, level := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
		name := level.String()
		if _, err := c.Next(ctx, db, "acme", name); err != nil {
			t.Fatal(err)
		}
		tx, err := db.SQL().BeginTx(ctx, &sql.TxOptions{Isolation: level})
		if err != nil {
			t.Fatal(err)
		}
		if cur, err := c.Current(ctx, tx, "acme", name); err != nil || cur != 1 { // takes the snapshot
			t.Fatalf("%s: Current = %d, %v", name, cur, err)
		}
		if n, err := c.Next(ctx, db, "acme", name); err != nil || n != 2 {
			t.Fatalf("%s: concurrent Next = %d, %v; want 2", name, n, err)
		}
		if n, err := c.Next(ctx, tx, "acme", name); !errors.Is(err, racefree.ErrRetryable) {
			t.Fatalf("%s: Next behind a newer increment = %d, %v; want ErrRetryable", name, n, err)
		}
		_ = tx.Rollback()
		if cur, err := c.Current(ctx, db, "acme", name); err != nil || cur != 2 {
			t.Fatalf("%s: Current after the refused Next = %d, %v; want 2", name, cur, err)
		}

		var (
			mu  sync.Mutex
			got = [][2]int64{{1, 2}}
			wg  sync.WaitGroup
		)
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 4 {
					var first int64
					err := db.InTx(ctx, func(tx *sql.Tx) error {
						if _, err := tx.ExecContext(ctx, `SET TRANSACTION ISOLATION LEVEL `+strings.ToUpper(name)); err != nil {
							return err
						}
						var err error
						first, err = c.Next(ctx, tx, "acme", name)
						return err
					})
					if err != nil {
						t.Errorf("%s: worker %d: %v", name, w, err)
						return
					}
					mu.Lock()
					got = append(got, [2]int64{first, 1})
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		if total := checkGapless(t, got); total != 2+16*4 {
			t.Fatalf("%s: %d numbers; want %d", name, total, 2+16*4)
		}
	}
}
