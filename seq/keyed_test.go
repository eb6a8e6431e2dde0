package seq_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/seq"
	"github.com/racefree/racefree/tenant"
)

// TestLostReplyLeavesAGapUnlessKeyed loses PostgreSQL's reply to the
// commit of a Next on the pool (testdb.CutReply forwards the COMMIT and
// cuts the connection before its reply): the number committed, Next says
// unavailable, and the next Next hands out the number after it, so the
// first is handed to nobody, a gap in what the caller recorded. NextKeyed
// settles the same loss: its retry with the same key gets the committed
// number back, on the pool and in the caller's transaction, and consumes
// none.
func TestLostReplyLeavesAGapUnlessKeyed(t *testing.T) {
	t.Parallel()
	proxy, dsn := testdb.NewCutReply(t, testdb.NewDSN(t, racefree.Postgres))
	db := testdb.Open(t, dsn, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, keys := seq.New(db), idempotency.New(db, nil)

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
	current := func(scope string, want int64) {
		t.Helper()
		if got, err := c.Current(ctx, db, scope, "invoice"); err != nil || got != want {
			t.Fatalf("Current(%s) = %d, %v; want %d", scope, got, err, want)
		}
	}

	// Next on the pool: the number commits, nobody gets it.
	lose("Next", "plain-scope", func() error { _, err := c.Next(ctx, db, "plain-scope", "invoice"); return err })
	current("plain-scope", 1)
	if got, err := c.Next(ctx, db, "plain-scope", "invoice"); err != nil || got != 2 {
		t.Fatalf("Next after the lost reply = %d, %v; want 2 (1 committed and went to nobody)", got, err)
	}

	// NextKeyed on the pool: the retry learns the committed number.
	lose("NextKeyed", "keyed-scope", func() error {
		_, _, err := c.NextKeyed(ctx, db, keys, "keyed-scope", "invoice", 2, "order-1")
		return err
	})
	current("keyed-scope", 2)
	if first, replayed, err := c.NextKeyed(ctx, db, keys, "keyed-scope", "invoice", 2, "order-1"); err != nil || first != 1 || !replayed {
		t.Fatalf("retried NextKeyed = %d, replayed %v, %v; want the committed 1, replayed", first, replayed, err)
	}
	current("keyed-scope", 2)

	// NextKeyed in the caller's transaction, whose commit's reply is lost.
	lose("NextKeyed in a transaction", "order-2", func() error {
		return tenant.InTx(ctx, db, tenant.Default, func(ctx context.Context, tx *sql.Tx) error {
			_, _, err := c.NextKeyed(ctx, tx, keys, "keyed-scope", "invoice", 1, "order-2")
			return err
		})
	})
	err := tenant.InTx(ctx, db, tenant.Default, func(ctx context.Context, tx *sql.Tx) error {
		first, replayed, err := c.NextKeyed(ctx, tx, keys, "keyed-scope", "invoice", 1, "order-2")
		if err == nil && (first != 3 || !replayed) {
			t.Errorf("retried NextKeyed in a transaction = %d, replayed %v; want the committed 3, replayed", first, replayed)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	current("keyed-scope", 3)
}

// TestKeyedRetryGetsTheSameNumbers: NextKeyed with a key it saw before
// replays the numbers it handed out and consumes none, under 16
// concurrent callers too; the same key with another n is ErrMismatch; a
// key names one request to one counter; a rolled-back transaction records
// neither numbers nor key; bad input changes nothing.
func TestKeyedRetryGetsTheSameNumbers(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{MaxOpenConns: 8, TxAttempts: 100}, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, keys := seq.New(db), idempotency.New(db, nil)
		next := func(scope, name string, n int64, key string, wantFirst int64, wantReplayed bool) {
			t.Helper()
			first, replayed, err := c.NextKeyed(ctx, db, keys, scope, name, n, key)
			if err != nil || first != wantFirst || replayed != wantReplayed {
				t.Fatalf("NextKeyed(%s, %s, %d, %s) = %d, replayed %v, %v; want %d, replayed %v", scope, name, n, key, first, replayed, err, wantFirst, wantReplayed)
			}
		}
		current := func(scope, name string, want int64) {
			t.Helper()
			if got, err := c.Current(ctx, db, scope, name); err != nil || got != want {
				t.Fatalf("Current(%s, %s) = %d, %v; want %d", scope, name, got, err, want)
			}
		}

		next("acme", "invoice", 3, "k1", 1, false)
		next("acme", "invoice", 3, "k1", 1, true)
		current("acme", "invoice", 3)
		if _, _, err := c.NextKeyed(ctx, db, keys, "acme", "invoice", 2, "k1"); !errors.Is(err, racefree.ErrMismatch) {
			t.Fatalf("the same key with another n: %v; want racefree.ErrMismatch", err)
		}
		current("acme", "invoice", 3)

		// A key names one request to one counter.
		next("acme", "ticket", 3, "k1", 1, false)
		next("globex", "invoice", 3, "k1", 1, false)
		next("acme", "invoice", 1, "k2", 4, false)

		// A rolled-back transaction records nothing.
		rollback := errors.New("roll back")
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if first, _, err := c.NextKeyed(ctx, tx, keys, "acme", "invoice", 1, "k3"); err != nil || first != 5 {
				t.Errorf("NextKeyed in a transaction = %d, %v; want 5", first, err)
			}
			return rollback
		})
		if !errors.Is(err, rollback) {
			t.Fatal(err)
		}
		current("acme", "invoice", 4)
		next("acme", "invoice", 1, "k3", 5, false)

		// 16 callers with one key: one number, handed to all of them.
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			fresh int
		)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				first, replayed, err := c.NextKeyed(ctx, db, keys, "acme", "invoice", 2, "k4")
				if err != nil || first != 6 {
					t.Errorf("concurrent NextKeyed = %d, %v; want 6", first, err)
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
			t.Errorf("%d of 16 concurrent calls with one key handed numbers out; want 1", fresh)
		}
		current("acme", "invoice", 7)

		// A key is the tenant's: another tenant's same key is its own request.
		acme, err := tenant.With(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if first, replayed, err := c.NextKeyed(acme, db, keys, "acme", "invoice", 3, "k1"); err != nil || first != 1 || replayed {
			t.Fatalf("another tenant's NextKeyed with k1 = %d, replayed %v, %v; want its own 1, not replayed", first, replayed, err)
		}
		current("acme", "invoice", 7)

		// Bad input changes nothing.
		for _, bad := range []struct {
			scope string
			n     int64
			key   string
		}{{"acme", 1, ""}, {"acme", 1, "k\x00"}, {"acme", 0, "k5"}, {"", 1, "k5"}} {
			if _, _, err := c.NextKeyed(ctx, db, keys, bad.scope, "invoice", bad.n, bad.key); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("NextKeyed(%q, %d, %q): %v; want an InputError", bad.scope, bad.n, bad.key, err)
			}
		}
		if _, _, err := c.NextKeyed(ctx, db, nil, "acme", "invoice", 1, "k5"); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("NextKeyed without keys: %v; want an InputError", err)
		}
		current("acme", "invoice", 7)
	})
}

// TestKeyedRetryAfterRetention: a key is kept for the idempotency store's
// Retention; once keys.Reap deleted it, a retry with the same key hands
// out new numbers, as NextKeyed's comment says.
func TestKeyedRetryAfterRetention(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		c, keys := seq.New(db), idempotency.New(db, &idempotency.Options{Retention: time.Hour})
		if first, _, err := c.NextKeyed(ctx, db, keys, "acme", "invoice", 1, "k1"); err != nil || first != 1 {
			t.Fatalf("NextKeyed = %d, %v; want 1", first, err)
		}
		clock.Advance(59 * time.Minute)
		if _, err := keys.Reap(ctx, 100); err != nil {
			t.Fatal(err)
		}
		if first, replayed, err := c.NextKeyed(ctx, db, keys, "acme", "invoice", 1, "k1"); err != nil || first != 1 || !replayed {
			t.Fatalf("within the retention: %d, replayed %v, %v; want 1, replayed", first, replayed, err)
		}
		clock.Advance(2 * time.Hour)
		if _, err := keys.Reap(ctx, 100); err != nil {
			t.Fatal(err)
		}
		if first, replayed, err := c.NextKeyed(ctx, db, keys, "acme", "invoice", 1, "k1"); err != nil || first != 2 || replayed {
			t.Fatalf("after the retention and a reap: %d, replayed %v, %v; want a new number 2", first, replayed, err)
		}
	})
}

// TestKeyedEdges tries NextKeyed at its edges, one dimension at a time: n
// at MaxN and one past it, and a key on two counters whose scope and name
// differ only in where the one ends and the other begins ("a/b", "c" and
// "a", "b/c"): two counters, so two requests, never the replay of the
// other's numbers.
func TestKeyedEdges(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, keys := seq.New(db), idempotency.New(db, nil)

		if _, _, err := c.NextKeyed(ctx, db, keys, "edge", "max", seq.MaxN+1, "k"); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Fatalf("NextKeyed(MaxN+1): %v; want an InputError", err)
		}
		if first, replayed, err := c.NextKeyed(ctx, db, keys, "edge", "max", seq.MaxN, "k"); err != nil || first != 1 || replayed {
			t.Fatalf("NextKeyed(MaxN) = %d, replayed %v, %v; want 1, not replayed", first, replayed, err)
		}
		if got, err := c.Current(ctx, db, "edge", "max"); err != nil || got != seq.MaxN {
			t.Fatalf("Current after NextKeyed(MaxN) = %d, %v; want %d", got, err, seq.MaxN)
		}

		if first, replayed, err := c.NextKeyed(ctx, db, keys, "a/b", "c", 1, "k"); err != nil || first != 1 || replayed {
			t.Fatalf(`NextKeyed("a/b", "c") = %d, replayed %v, %v; want 1, not replayed`, first, replayed, err)
		}
		if first, replayed, err := c.NextKeyed(ctx, db, keys, "a/b", "c", 1, "k"); err != nil || first != 1 || !replayed {
			t.Fatalf(`NextKeyed("a/b", "c") again = %d, replayed %v, %v; want 1, replayed`, first, replayed, err)
		}
		if _, err := c.Next(ctx, db, "a", "b/c"); err != nil { // the other counter moves on first
			t.Fatal(err)
		}
		if first, replayed, err := c.NextKeyed(ctx, db, keys, "a", "b/c", 1, "k"); err != nil || first != 2 || replayed {
			t.Fatalf(`NextKeyed("a", "b/c") with the key of ("a/b", "c") = %d, replayed %v, %v; want its own 2, not replayed`, first, replayed, err)
		}
	})
}
