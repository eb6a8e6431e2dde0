package seq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/seq"
)

// TestCancelledCallerAtEachStage cancels a caller at each stage: before
// Next is sent (nothing consumed, on both engines); in the caller's
// transaction after its NextN, before the commit (rolled back, nothing
// consumed); and on PostgreSQL while it waits for the row lock of an open
// transaction that then commits: NextKeyed consumes nothing and its retry
// gets the next number, while Next on the pool, pipelined with its COMMIT,
// may be committed by the server after the caller gave up (an unknown
// outcome, like a lost reply: ErrUnavailable), but no number is ever
// handed out twice.
func TestCancelledCallerAtEachStage(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := seq.New(db)
		current := func(want int64) {
			t.Helper()
			if got, err := c.Current(ctx, db, "acme", "invoice"); err != nil || got != want {
				t.Fatalf("Current = %d, %v; want %d", got, err, want)
			}
		}

		// Queued: cancelled before it is sent.
		gone, stop := context.WithCancel(ctx)
		stop()
		if _, err := c.Next(gone, db, "acme", "invoice"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Next with a cancelled context: %v; want context.Canceled", err)
		}
		if _, _, err := c.NextKeyed(gone, db, nil, "acme", "invoice", 1, "k"); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Fatalf("NextKeyed without keys, cancelled: %v; want the InputError first", err)
		}
		current(0)

		// In flight in the caller's transaction: the context ends after
		// NextN, before the commit; database/sql rolls the transaction back.
		txCtx, stopTx := context.WithCancel(ctx)
		tx, err := db.SQL().BeginTx(txCtx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := c.NextN(txCtx, tx, "acme", "invoice", 3); err != nil || n != 1 {
			t.Fatalf("NextN in the transaction = %d, %v; want 1", n, err)
		}
		stopTx()
		if err := tx.Commit(); err == nil {
			t.Fatal("the commit of a transaction whose context ended succeeded")
		}
		current(0)
		if n, err := c.Next(ctx, db, "acme", "invoice"); err != nil || n != 1 {
			t.Fatalf("Next after the cancelled transaction = %d, %v; want 1", n, err)
		}

		if db.Engine() != racefree.Postgres {
			return
		}
		// Waiting on the row lock (PostgreSQL), behind a transaction that
		// took number 2 and then commits.
		holder, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Rollback() }()
		if n, err := c.Next(ctx, holder, "acme", "invoice"); err != nil || n != 2 {
			t.Fatalf("Next in the holder = %d, %v; want 2", n, err)
		}
		waitOnLock := func(call func(context.Context) error) error {
			t.Helper()
			waitCtx, stopWait := context.WithCancel(ctx)
			defer stopWait()
			done := make(chan error, 1)
			go func() { done <- call(waitCtx) }()
			if !testdb.BlockedBy(t, db, backendPID(t, holder), nil) {
				t.Fatal("the call did not wait for the holder's row lock")
			}
			stopWait()
			return <-done
		}
		// NextKeyed runs its own transaction, whose COMMIT is not sent
		// before the increment answers: cancelled on the lock, it commits
		// nothing, and its retry with the same key hands out the number
		// after the holder's.
		keys := idempotency.New(db, nil)
		if err := waitOnLock(func(ctx context.Context) error {
			_, _, err := c.NextKeyed(ctx, db, keys, "acme", "invoice", 1, "k")
			return err
		}); !errors.Is(err, context.Canceled) || errors.Is(err, racefree.ErrUnavailable) {
			t.Fatalf("NextKeyed cancelled on the row lock: %v; want context.Canceled alone (nothing committed)", err)
		}
		// Next on the pool is pipelined: its COMMIT left with its
		// increment, so the server commits it once the lock is free even
		// though the caller gave up. Its error is the context's with
		// ErrUnavailable, an outcome unknown like a lost reply: the number
		// may be committed and reach nobody (what NextKeyed exists for),
		// but never twice.
		if err := waitOnLock(func(ctx context.Context) error {
			_, err := c.Next(ctx, db, "acme", "invoice")
			return err
		}); !errors.Is(err, context.Canceled) || !errors.Is(err, racefree.ErrUnavailable) {
			t.Fatalf("Next cancelled on the row lock: %v; want context.Canceled and ErrUnavailable (an unknown outcome)", err)
		}
		pid := backendPID(t, holder)
		if err := holder.Commit(); err != nil {
			t.Fatal(err)
		}
		testdb.Unblocked(t, db, pid, 10*time.Second)
		first, replayed, err := c.NextKeyed(ctx, db, keys, "acme", "invoice", 1, "k")
		if err != nil || replayed {
			t.Fatalf("NextKeyed retried after the cancel = %d, replayed %v, %v; want a fresh number", first, replayed, err)
		}
		cur, err := c.Current(ctx, db, "acme", "invoice")
		if err != nil || cur != first || first != 3 && first != 4 {
			t.Fatalf("NextKeyed retried = %d, Current %d, %v; want 3 (or 4, after the cancelled Next's number) and Current the same", first, cur, err)
		}
	})
}
