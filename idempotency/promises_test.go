package idempotency_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// leaseRow returns the fence and expiry (unix ms) of the in-progress lease of
// (scope, key), read from the claims table.
func leaseRow(t *testing.T, db *racefree.DB, scope, key string) (fence, expiresAt int64) {
	t.Helper()
	err := db.QueryRowContext(context.Background(),
		`SELECT fence, expires_at FROM racefree_claims WHERE ns = 'idempotency' AND key = `+placeholder(db, 1),
		leaseKey(scope, key)).Scan(&fence, &expiresAt)
	if err != nil {
		t.Fatalf("lease of %q: %v", key, err)
	}
	return fence, expiresAt
}

// leaseKey is the claim key of (scope, key): how the package names it.
func leaseKey(scope, key string) string {
	h := sha256.Sum256([]byte(scope + "\x00" + key))
	return hex.EncodeToString(h[:])
}

func placeholder(db *racefree.DB, n int) string {
	if db.Engine() == racefree.Postgres {
		return fmt.Sprintf("$%d", n)
	}
	return fmt.Sprintf("?%d", n)
}

func countSteps(t *testing.T, db *racefree.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM racefree_idempotency_steps`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Invariant 9: once fn has returned, a caller that cancels (a client that
// hangs up) cannot stop the response from being stored and the lease from
// being released. The retry is a replay and fn ran once.
func TestDoRecordsTheOutcomeAfterTheCallerCancels(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var runs atomic.Int64
		fn := func(context.Context, *idempotency.Call) ([]byte, error) {
			runs.Add(1)
			cancel() // the caller hangs up once the side effect ran
			return []byte("charged"), nil
		}
		res, err := b.store.Do(ctx, "s", "k", "fp", fn)
		if err != nil || res.Replayed || string(res.Response) != "charged" {
			t.Fatalf("first: %+v, %v; want the fresh response", res, err)
		}
		res, err = b.store.Do(context.Background(), "s", "k", "fp", fn)
		if err != nil || !res.Replayed || string(res.Response) != "charged" {
			t.Fatalf("retry: %+v, %v; want a replay", res, err)
		}
		if got, want := runs.Load(), int64(1); got != want {
			t.Fatalf("fn ran %d times, want %d", got, want)
		}
	})
}

// A failed fn whose caller cancelled still frees the key at once.
func TestDoReleasesAfterTheCallerCancels(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Lease: time.Hour}, func(t *testing.T, b bundle) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		boom := errors.New("declined")
		_, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
			cancel()
			return nil, boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("first: %v, want %v", err, boom)
		}
		res, err := b.store.Do(context.Background(), "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) { return []byte("ok"), nil })
		if err != nil || res.Replayed {
			t.Fatalf("retry: %+v, %v; want a fresh run at once, not ErrInProgress", res, err)
		}
	})
}

// Item 4: a Step inside DoTx runs in the caller's transaction. A rollback
// leaves no recovery point, and SQLite does not deadlock on its own write
// lock.
func TestDoTxStepsCommitWithTheCaller(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		// A Step that left the caller's transaction would wait for the
		// caller's own write lock: fail fast instead.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rollback := errors.New("caller rolls back")
		var charges atomic.Int64
		run := func(fail bool) (*idempotency.Result, error) {
			var res *idempotency.Result
			err := b.db.InTx(ctx, func(tx *sql.Tx) error {
				var err error
				res, err = b.store.DoTx(ctx, tx, "s", "k", "fp", func(ctx context.Context, tx *sql.Tx, call *idempotency.Call) ([]byte, error) {
					id, err := call.Step(ctx, "charge", func(context.Context) (string, error) {
						return fmt.Sprintf("ch_%d", charges.Add(1)), nil
					})
					return []byte(id), err
				})
				if err == nil && fail {
					return rollback
				}
				return err
			})
			return res, err
		}
		if _, err := run(true); !errors.Is(err, rollback) {
			t.Fatalf("rolled-back DoTx: %v, want %v", err, rollback)
		}
		if got := countSteps(t, b.db); got != 0 {
			t.Fatalf("%d recovery points after the caller rolled back, want 0", got)
		}
		res, err := run(false)
		if err != nil || string(res.Response) != "ch_2" {
			t.Fatalf("committed DoTx: %+v, %v; want ch_2, the step run again", res, err)
		}
		if got := countSteps(t, b.db); got != 1 {
			t.Fatalf("%d recovery points after commit, want 1", got)
		}
	})
}

// The reaper never deletes a record that a transaction restarted while
// the reaper ran (invariant 10): on PostgreSQL it skips the locked row
// or re-checks expiry on the new version; on SQLite it waits for the
// write lock and sees the new version.
func TestReapSparesARecordRestartedInAnOpenTransaction(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Retention: time.Hour}, func(t *testing.T, b bundle) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ok := func(ctx context.Context, _ *sql.Tx, call *idempotency.Call) ([]byte, error) {
			_, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_first", nil })
			return []byte("first"), err
		}
		for _, key := range []string{"old", "restarted"} {
			if err := b.db.InTx(ctx, func(tx *sql.Tx) error {
				_, err := b.store.DoTx(ctx, tx, "s", key, "fp", ok)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		b.clock.Advance(time.Hour) // both expired, exactly

		tx, err := b.db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		res, err := b.store.DoTx(ctx, tx, "s", "restarted", "fp2", func(ctx context.Context, _ *sql.Tx, call *idempotency.Call) ([]byte, error) {
			_, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_second", nil })
			return []byte("second"), err
		})
		if err != nil || res.Replayed {
			t.Fatalf("restart: %+v, %v", res, err)
		}
		reaped := make(chan error, 1)
		go func() {
			_, err := b.store.Reap(ctx, 1000)
			reaped <- err
		}()
		if b.db.Engine() == racefree.Postgres {
			// Commit only once the reaper is done or waits on our row.
			pid := testdb.BackendPID(t, tx)
			waitReaperDoneOrBlockedBy(t, ctx, b.db, pid, reaped)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-reaped; err != nil && !errors.Is(err, errReapDone) {
			t.Fatalf("reap: %v", err)
		}
		got, err := b.store.Do(ctx, "s", "restarted", "fp2", nil)
		if err != nil || !got.Replayed || string(got.Response) != "second" {
			t.Fatalf("restarted record after the reap: %+v, %v; want the replay of \"second\"", got, err)
		}
		var step string
		if err := b.db.QueryRowContext(ctx, `SELECT value FROM racefree_idempotency_steps WHERE key = 'restarted'`).Scan(&step); err != nil || step != "ch_second" {
			t.Fatalf("restarted recovery point after the reap: %q, %v; want ch_second", step, err)
		}
		// The reaper did run: the other expired record and its step are gone.
		var n int
		if err := b.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM racefree_idempotency WHERE key = 'old') + (SELECT count(*) FROM racefree_idempotency_steps WHERE key = 'old')`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("expired record and step: %d rows, %v; want reaped", n, err)
		}
	})
}

var errReapDone = errors.New("reap done")

// waitReaperDoneOrBlockedBy waits until the reaper returned (its error is
// put back as errReapDone's wrapper) or a backend waits on a lock held by
// pid.
func waitReaperDoneOrBlockedBy(t *testing.T, ctx context.Context, db *racefree.DB, pid int, reaped chan error) {
	t.Helper()
	for {
		select {
		case err := <-reaped:
			if err != nil {
				reaped <- err
			} else {
				reaped <- errReapDone
			}
			return
		default:
		}
		var waiting int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatal("the reaper neither finished nor waited")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// The heartbeat renews the lease every Lease/3 while fn runs, so a live
// worker keeps its key however long it runs: every duplicate meanwhile
// gets ErrInProgress, never a takeover. Real clock, lease 1.5 s.
func TestHeartbeatKeepsTheLeaseOfALongRun(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		const lease = 1500 * time.Millisecond
		store := idempotency.New(db, &idempotency.Options{Lease: lease})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := store.Do(ctx, "s", "k", "fp", func(ctx context.Context, _ *idempotency.Call) ([]byte, error) {
				close(started)
				select {
				case <-release:
					return []byte("done"), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			})
			done <- err
		}()
		<-started
		_, last := leaseRow(t, db, "s", "k")
		renewals := 0
		begin := time.Now()
		for renewals < 4 { // more than three leases' worth of real time
			if _, err := store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
				return []byte("takeover"), nil
			}); !errors.Is(err, racefree.ErrInProgress) {
				t.Fatalf("duplicate after %v and %d renewals: %v, want ErrInProgress", time.Since(begin), renewals, err)
			}
			if _, exp := leaseRow(t, db, "s", "k"); exp > last {
				renewals, last = renewals+1, exp
			}
			if time.Since(begin) > 20*lease {
				t.Fatalf("%d renewals in %v, want 4", renewals, time.Since(begin))
			}
			time.Sleep(20 * time.Millisecond)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("the long run: %v", err)
		}
	})
}

// Without a heartbeat (a worker that died) the lease lapses after Lease
// and the next retry takes over with a higher fence.
func TestLapsedLeaseIsTakenOverWithAHigherFence(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Lease: time.Minute}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		finish := stalledDo(b, "s", "k", "fp", nil)
		b.clock.Advance(time.Minute - time.Millisecond)
		if _, err := b.store.Do(ctx, "s", "k", "fp", nil); !errors.Is(err, racefree.ErrInProgress) {
			t.Fatalf("1 ms before the lease lapses: %v, want ErrInProgress", err)
		}
		b.clock.Advance(time.Millisecond)
		res, err := b.store.Do(ctx, "s", "k", "fp", func(_ context.Context, call *idempotency.Call) ([]byte, error) {
			if got, want := call.Fence(), int64(2); got != want {
				t.Errorf("fence %d, want %d", got, want)
			}
			return []byte("successor"), nil
		})
		if err != nil || string(res.Response) != "successor" {
			t.Fatalf("takeover when the lease lapsed: %+v, %v", res, err)
		}
		if err := finish(); !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("stale worker: %v, want ErrStaleFence", err)
		}
	})
}

// A stale worker's Step is refused with ErrStaleFence and saves nothing:
// the successor runs the step itself.
func TestStaleWorkersStepIsRefused(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Lease: time.Hour}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		started, release := make(chan struct{}), make(chan struct{})
		stepErr := make(chan error, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = b.store.Do(ctx, "s", "k", "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
				close(started)
				<-release // stalls past its lease
				_, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_stale", nil })
				stepErr <- err
				return nil, err
			})
		}()
		<-started
		b.clock.Advance(time.Hour)
		successor := make(chan struct{})
		go func() {
			defer close(successor)
			_, err := b.store.Do(ctx, "s", "k", "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
				close(release)
				if err := <-stepErr; !errors.Is(err, racefree.ErrStaleFence) {
					t.Errorf("stale step: %v, want ErrStaleFence", err)
				}
				v, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_successor", nil })
				if v != "ch_successor" || call.ResumedSteps != 0 {
					t.Errorf("successor's step: %q (resumed %d), want its own value", v, call.ResumedSteps)
				}
				return []byte(v), err
			})
			if err != nil {
				t.Errorf("successor: %v", err)
			}
		}()
		<-successor
		<-done
	})
}

// The record is live while now < expires_at (the retention after the
// last write): at the exact millisecond it expires a retry runs afresh.
func TestRecordExpiresAtTheRetentionBoundary(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Retention: time.Hour}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		var runs atomic.Int64
		fn := func(context.Context, *idempotency.Call) ([]byte, error) {
			return []byte(fmt.Sprint("run ", runs.Add(1))), nil
		}
		if _, err := b.store.Do(ctx, "s", "k", "fp", fn); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Hour - time.Millisecond)
		res, err := b.store.Do(ctx, "s", "k", "fp", fn)
		if err != nil || !res.Replayed || string(res.Response) != "run 1" {
			t.Fatalf("1 ms before expiry: %+v, %v; want the replay", res, err)
		}
		b.clock.Advance(time.Millisecond)
		res, err = b.store.Do(ctx, "s", "k", "other-fp", fn)
		if err != nil || res.Replayed || string(res.Response) != "run 2" {
			t.Fatalf("at expiry: %+v, %v; want a fresh run, any fingerprint", res, err)
		}
	})
}

// Defaults: lease 30 s (the in-flight RetryAfter and the lease row),
// retention 24 h after completion.
func TestDefaults(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx := context.Background()
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
				close(started)
				<-release
				return []byte("r"), nil
			})
			done <- err
		}()
		<-started
		if _, exp := leaseRow(t, b.db, "s", "k"); exp != racefree.Millis(t0.Add(30*time.Second)) {
			t.Errorf("lease expires at %v, want 30 s after the start", racefree.FromMillis(exp))
		}
		var ip *idempotency.InProgressError
		if _, err := b.store.Do(ctx, "s", "k", "fp", nil); !errors.As(err, &ip) || ip.RetryAfter != 30*time.Second {
			t.Errorf("in flight: %v, want RetryAfter 30s", err)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(24*time.Hour - time.Millisecond)
		if res, err := b.store.Do(ctx, "s", "k", "fp", nil); err != nil || !res.Replayed {
			t.Fatalf("24 h less 1 ms after completion: %+v, %v; want a replay", res, err)
		}
		b.clock.Advance(time.Millisecond)
		if n, err := b.store.Reap(ctx, 0); err != nil || n != 1 {
			t.Fatalf("reap 24 h after completion: %d, %v; want 1", n, err)
		}
	})
}

// PostgreSQL's clock is clock_timestamp(), not now(): inside a
// transaction that began before a record expired, the record is expired
// all the same, and a restart is stamped with the time it happened.
func TestPostgresClockIsNotTheTransactionStart(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	const retention = time.Second
	store := idempotency.New(db, &idempotency.Options{Retention: retention})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := store.Do(ctx, "s", "k", "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
		_, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_first", nil })
		return []byte("first"), err
	}); err != nil {
		t.Fatal(err)
	}
	var expires int64
	if err := db.QueryRowContext(ctx, `SELECT expires_at FROM racefree_idempotency WHERE key = 'k'`).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var start int64
	if err := tx.QueryRowContext(ctx, `SELECT (extract(epoch FROM now()) * 1000)::bigint`).Scan(&start); err != nil {
		t.Fatal(err)
	}
	if start >= expires {
		t.Skip("the machine is too slow: the transaction began after the record expired")
	}
	var now int64
	for now <= expires { // wait until the record has expired, by the database's clock
		if err := tx.QueryRowContext(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	res, err := store.DoTx(ctx, tx, "s", "k", "fp", func(ctx context.Context, _ *sql.Tx, call *idempotency.Call) ([]byte, error) {
		v, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_second", nil })
		if v != "ch_second" || call.ResumedSteps != 0 {
			t.Errorf("expired step: %q (resumed %d), want run again", v, call.ResumedSteps)
		}
		return []byte(v), err
	})
	if err != nil || res.Replayed || string(res.Response) != "ch_second" {
		t.Fatalf("in a transaction older than the expiry: %+v, %v; want a fresh run", res, err)
	}
	var step string
	if err := tx.QueryRowContext(ctx, `SELECT value FROM racefree_idempotency_steps WHERE key = 'k'`).Scan(&step); err != nil || step != "ch_second" {
		t.Fatalf("saved step: %q, %v; want ch_second", step, err)
	}
	var restarted int64
	if err := tx.QueryRowContext(ctx, `SELECT expires_at FROM racefree_idempotency WHERE key = 'k'`).Scan(&restarted); err != nil {
		t.Fatal(err)
	}
	if restarted < now+retention.Milliseconds() {
		t.Fatalf("restarted record expires at %d, want at least %d (completion time + retention)", restarted, now+retention.Milliseconds())
	}
}

// A stale worker whose fn fails cannot release its successor's lease: a
// duplicate still gets ErrInProgress while the successor runs.
func TestStaleWorkerCannotRelease(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Lease: time.Hour}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		boom := errors.New("declined")
		started, release := make(chan struct{}), make(chan struct{})
		staleDone := make(chan error, 1)
		go func() {
			_, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
				close(started)
				<-release // stalls past its lease
				return nil, boom
			})
			staleDone <- err
		}()
		<-started
		b.clock.Advance(time.Hour)
		running, finish := make(chan struct{}), make(chan struct{})
		successorDone := make(chan error, 1)
		go func() {
			_, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
				close(running)
				<-finish
				return []byte("successor"), nil
			})
			successorDone <- err
		}()
		<-running
		close(release)
		if err := <-staleDone; !errors.Is(err, boom) {
			t.Fatalf("stale worker: %v, want %v", err, boom)
		}
		if _, err := b.store.Do(ctx, "s", "k", "fp", nil); !errors.Is(err, racefree.ErrInProgress) {
			t.Fatalf("duplicate after the stale worker's release: %v, want ErrInProgress", err)
		}
		close(finish)
		if err := <-successorDone; err != nil {
			t.Fatal(err)
		}
	})
}

// When the heartbeat finds the lease lost (here: it lapsed, by the
// injected clock), fn's context is cancelled and Do returns the lease
// error; nothing is stored.
func TestLostLeaseCancelsFn(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Lease: 300 * time.Millisecond}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		started := make(chan struct{})
		done := make(chan error, 1)
		cancelled := make(chan bool, 1)
		go func() {
			_, err := b.store.Do(ctx, "s", "k", "fp", func(ctx context.Context, _ *idempotency.Call) ([]byte, error) {
				close(started)
				select {
				case <-ctx.Done():
					cancelled <- true
					return []byte("too late"), nil
				case <-time.After(10 * time.Second):
					cancelled <- false
					return []byte("never cancelled"), nil
				}
			})
			done <- err
		}()
		<-started
		b.clock.Advance(300 * time.Millisecond) // the lease lapses before any renewal counts
		err := <-done
		if !<-cancelled {
			t.Fatal("fn's context was never cancelled after the lease was lost")
		}
		if !errors.Is(err, racefree.ErrNotHeld) && !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("Do after the lease was lost: %v, want the lease error", err)
		}
		res, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) { return []byte("retry"), nil })
		if err != nil || res.Replayed || string(res.Response) != "retry" {
			t.Fatalf("retry: %+v, %v; want a fresh run, nothing stored", res, err)
		}
	})
}

// CompleteTimeout bounds the recording of fn's outcome: with no time at
// all, Do reports that it could not record it.
func TestCompleteTimeoutBoundsTheRecording(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{CompleteTimeout: time.Nanosecond}, func(t *testing.T, b bundle) {
		_, err := b.store.Do(context.Background(), "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) { return []byte("r"), nil })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do with a 1 ns CompleteTimeout: %v, want context.DeadlineExceeded", err)
		}
	})
}

// StepKey is the same in every run of a request, and differs between
// steps, keys and scopes.
func TestStepKeyIsStable(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Lease: time.Minute}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		keys := map[string]string{}
		run := func(scope, key string, fail bool) {
			_, _ = b.store.Do(ctx, scope, key, "fp", func(_ context.Context, call *idempotency.Call) ([]byte, error) {
				for _, step := range []string{"charge", "ship"} {
					name := scope + "/" + key + "/" + step
					if k, ok := keys[name]; ok && k != call.StepKey(step) {
						t.Errorf("StepKey(%s) changed between runs: %s, then %s", name, k, call.StepKey(step))
					}
					keys[name] = call.StepKey(step)
				}
				if fail {
					return nil, errors.New("retry me")
				}
				return []byte("ok"), nil
			})
		}
		run("s", "k", true)
		run("s", "k", false) // the retry: the same StepKeys
		run("s", "k2", false)
		run("s2", "k", false)
		if len(keys) != 6 {
			t.Fatalf("%d step keys, want 6", len(keys))
		}
		seen := map[string]string{}
		for name, k := range keys {
			if other, dup := seen[k]; dup {
				t.Errorf("StepKey of %s equals that of %s", name, other)
			}
			seen[k] = name
		}
	})
}

// The in-progress leases live in the claim namespace "idempotency": a
// claim of the same key in another namespace does not hold a request up.
func TestLeasesLiveInTheirOwnNamespace(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx := context.Background()
		if _, err := claim.New(b.db).Acquire(ctx, b.db, leaseKey("s", "k"), "someone-else", time.Hour); err != nil {
			t.Fatal(err)
		}
		res, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) { return []byte("ran"), nil })
		if err != nil || res.Replayed {
			t.Fatalf("Do beside a claim of the same key in the default namespace: %+v, %v", res, err)
		}
		if got, want := idempotency.Namespace, "idempotency"; got != want {
			t.Fatalf("Namespace = %q, want %q", got, want)
		}
	})
}

// A step's value must be text without NUL bytes, on both engines alike.
func TestStepValueMustBeText(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		// A NUL in the middle, at either end, alone; and a byte that is no UTF-8.
		for _, value := range []string{"a\x00b", "\x00ab", "ab\x00", "\x00", "\xff"} {
			_, err := b.store.Do(context.Background(), "s", fmt.Sprintf("%q", value), "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
				_, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return value, nil })
				return nil, err
			})
			if !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("step value %q: %v, want ErrInvalidInput", value, err)
			}
		}
		if got := countSteps(t, b.db); got != 0 {
			t.Fatalf("%d recovery points saved", got)
		}
	})
}

// InProgressError.RetryAfter is the lease, and at least one second.
func TestRetryAfterIsTheLeaseAndAtLeastOneSecond(t *testing.T) {
	t.Parallel()
	t.Run("short", func(t *testing.T) { retryAfterCase(t, 300*time.Millisecond, time.Second) })
	t.Run("long", func(t *testing.T) { retryAfterCase(t, 90*time.Second, 90*time.Second) })
}

func retryAfterCase(t *testing.T, lease, want time.Duration) {
	each(t, &idempotency.Options{Lease: lease}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
				close(started)
				<-release
				return []byte("r"), nil
			})
			done <- err
		}()
		<-started
		var ip *idempotency.InProgressError
		if _, err := b.store.Do(ctx, "s", "k", "fp", nil); !errors.As(err, &ip) || ip.RetryAfter != want {
			t.Errorf("lease %v: %v, want RetryAfter %v", lease, err, want)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
