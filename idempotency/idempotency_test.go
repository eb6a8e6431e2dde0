package idempotency_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"go.uber.org/goleak"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// TestMain runs the tests, or, in a child started by
// TestKilledWorkerResumesFromItsRecoveryPoint, a worker that dies after
// its first side effect.
func TestMain(m *testing.M) {
	if os.Getenv("RACEFREE_IDEM_CHILD") == "1" {
		dieAfterFirstStep()
		return
	}
	goleak.VerifyTestMain(m)
}

type bundle struct {
	db    *racefree.DB
	clock *racefree.ManualClock
	store *idempotency.Store
}

func each(t *testing.T, opts *idempotency.Options, body func(t *testing.T, b bundle)) {
	t.Helper()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		body(t, bundle{db: db, clock: clock, store: idempotency.New(db, opts)})
	})
}

// doUntilDone retries Do while the first request is in progress.
func doUntilDone(ctx context.Context, s *idempotency.Store, key, fp string, fn func(context.Context, *idempotency.Call) ([]byte, error)) (*idempotency.Result, error) {
	for {
		res, err := s.Do(ctx, "tenant-1", key, fp, fn)
		if !errors.Is(err, racefree.ErrInProgress) {
			return res, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConcurrentDuplicatesRunOnceAndAllGetTheSameResponse(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs atomic.Int64
		fn := func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
			n := runs.Add(1)
			time.Sleep(50 * time.Millisecond) // stay in progress while duplicates arrive
			return []byte(fmt.Sprintf("order #%d", n)), nil
		}
		const n = 64
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			responses = map[string]int{}
			replays   int
		)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := doUntilDone(context.Background(), b.store, "pay-1", "fp", fn)
				if err != nil {
					t.Errorf("do: %v", err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				responses[string(res.Response)]++
				if res.Replayed {
					replays++
				}
			}()
		}
		wg.Wait()
		if got := runs.Load(); got != 1 {
			t.Fatalf("fn ran %d times, want 1", got)
		}
		if len(responses) != 1 || responses["order #1"] != n || replays != n-1 {
			t.Fatalf("responses %v with %d replays; want %d of one response, %d replays", responses, replays, n, n-1)
		}
	})
}

func TestMismatchAndInProgress(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx := context.Background()
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := b.store.Do(ctx, "s", "k", "fp-a", func(context.Context, *idempotency.Call) ([]byte, error) {
				close(started)
				<-release
				return []byte("a"), nil
			})
			done <- err
		}()
		<-started
		_, err := b.store.Do(ctx, "s", "k", "fp-a", nil)
		var ip *idempotency.InProgressError
		if !errors.As(err, &ip) || !errors.Is(err, racefree.ErrInProgress) || ip.RetryAfter <= 0 {
			t.Fatalf("duplicate in flight: %v, want an InProgressError", err)
		}
		if _, err := b.store.Do(ctx, "s", "k", "fp-b", nil); !errors.Is(err, racefree.ErrMismatch) {
			t.Fatalf("other payload in flight: %v, want ErrMismatch", err)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.Do(ctx, "s", "k", "fp-b", nil); !errors.Is(err, racefree.ErrMismatch) {
			t.Fatalf("other payload after completion: %v, want ErrMismatch", err)
		}
		res, err := b.store.Do(ctx, "s", "k", "fp-a", nil)
		if err != nil || !res.Replayed || string(res.Response) != "a" {
			t.Fatalf("replay: %+v, %v", res, err)
		}
		// Another scope is another key.
		res, err = b.store.Do(ctx, "other", "k", "fp-b", func(context.Context, *idempotency.Call) ([]byte, error) { return []byte("b"), nil })
		if err != nil || res.Replayed {
			t.Fatalf("other scope: %+v, %v", res, err)
		}
	})
}

func TestFailureIsNotStoredAndTheRetryRuns(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx := context.Background()
		boom := errors.New("downstream unavailable")
		if _, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
			t.Fatalf("got %v, want %v", err, boom)
		}
		res, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) { return []byte("ok"), nil })
		if err != nil || res.Replayed || string(res.Response) != "ok" {
			t.Fatalf("retry: %+v, %v; want a fresh run", res, err)
		}
	})
}

// stalledDo runs b.store.Do(scope, key, fp) in the background with an fn
// that stalls (a worker that died, or hung past its lease) until finish is
// called; it returns once fn runs, that is once the call holds the key's
// lease. finish lets fn return response and returns Do's error.
func stalledDo(b bundle, scope, key, fp string, response []byte) (finish func() error) {
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := b.store.Do(context.Background(), scope, key, fp, func(context.Context, *idempotency.Call) ([]byte, error) {
			close(started)
			<-release
			return response, nil
		})
		done <- err
	}()
	<-started
	return func() error {
		close(release)
		return <-done
	}
}

func TestStaleWorkerCannotComplete(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Lease: time.Hour}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		finish := stalledDo(b, "s", "k", "fp", []byte("zombie")) // stalls past its lease
		b.clock.Advance(time.Hour)
		res, err := b.store.Do(ctx, "s", "k", "fp", func(_ context.Context, call *idempotency.Call) ([]byte, error) {
			if call.Fence() != 2 {
				t.Errorf("takeover fence = %d, want 2", call.Fence())
			}
			return []byte("successor"), nil
		})
		if err != nil || string(res.Response) != "successor" {
			t.Fatalf("takeover: %+v, %v", res, err)
		}
		if err := finish(); !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("stale completion: %v, want ErrStaleFence", err)
		}
		res, err = b.store.Do(ctx, "s", "k", "fp", nil)
		if err != nil || string(res.Response) != "successor" {
			t.Fatalf("stored: %+v, %v; want the successor's response", res, err)
		}
	})
}

func TestDoTxCommitsWithTheCallersWrites(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx := context.Background()
		if _, err := b.db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int64
		order := func(fail bool) error {
			return b.db.InTx(ctx, func(tx *sql.Tx) error {
				_, err := b.store.DoTx(ctx, tx, "s", "order-1", "fp", func(ctx context.Context, tx *sql.Tx, _ *idempotency.Call) ([]byte, error) {
					runs.Add(1)
					if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES ('o-1')`); err != nil {
						return nil, err
					}
					if fail {
						return nil, errors.New("fail after the write")
					}
					return []byte("o-1"), nil
				})
				return err
			})
		}
		if err := order(true); err == nil {
			t.Fatal("want the failure")
		}
		var n int
		if err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("after a failed DoTx: %d orders, %v; want 0", n, err)
		}
		runs.Store(0)
		var wg sync.WaitGroup
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := order(false); err != nil {
					t.Errorf("order: %v", err)
				}
			}()
		}
		wg.Wait()
		if err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil || n != 1 || runs.Load() != 1 {
			t.Fatalf("%d orders, fn ran %d times; want 1 and 1", n, runs.Load())
		}
	})
}

func TestReapDeletesExpiredRecords(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Retention: time.Hour}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		for i := range 5 {
			_, err := b.store.Do(ctx, "s", strconv.Itoa(i), "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
				_, err := call.Step(ctx, "one", func(context.Context) (string, error) { return "x", nil })
				return []byte("r"), err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if n, err := b.store.Reap(ctx, 2); err != nil || n != 0 {
			t.Fatalf("reap before expiry: %d, %v", n, err)
		}
		b.clock.Advance(time.Hour)
		if n, err := b.store.Reap(ctx, 2); err != nil || n != 10 {
			t.Fatalf("reap after expiry: %d, %v; want 10 (5 records, 5 steps)", n, err)
		}
		var leases int
		if err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_claims WHERE ns = 'idempotency'`).Scan(&leases); err != nil || leases != 0 {
			t.Fatalf("%d leases left, %v; want 0", leases, err)
		}
		// An expired key is a fresh key.
		res, err := b.store.Do(ctx, "s", "0", "another-fp", func(context.Context, *idempotency.Call) ([]byte, error) { return []byte("new"), nil })
		if err != nil || res.Replayed {
			t.Fatalf("reuse after retention: %+v, %v", res, err)
		}
	})
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx := context.Background()
		for _, tc := range [][3]string{
			{"s", "", "fp"}, {"s", string(make([]byte, 256)), "fp"}, {"s", "k", ""}, {"\xff", "k", "fp"},
			{"s", "k\x00", "fp"}, {"s\x00", "k", "fp"}, {"s", "k", "fp\x00"}, {"s", "\xff", "fp"}, {"s", "k", "\xff"},
			{strings.Repeat("s", 513), "k", "fp"}, {"s", "k", strings.Repeat("f", 257)},
		} {
			if _, err := b.store.Do(ctx, tc[0], tc[1], tc[2], nil); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Do(%q): %v, want ErrInvalidInput", tc, err)
			}
		}
		var n int
		if err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_idempotency`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d records, %v", n, err)
		}
		// Limits are inclusive: a 255-byte key, 512-byte scope and
		// 256-byte fingerprint are taken.
		if _, err := b.store.Do(ctx, strings.Repeat("s", 512), strings.Repeat("k", 255), strings.Repeat("f", 256), func(context.Context, *idempotency.Call) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatalf("at the limits: %v", err)
		}
		// A step name is checked before its side effect runs.
		_, err := b.store.Do(ctx, "s", "steps", "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
			for _, step := range []string{"", "a\x00b", "\xff", strings.Repeat("x", 129)} {
				if _, err := call.Step(ctx, step, func(context.Context) (string, error) {
					t.Errorf("step %q ran", step)
					return "", nil
				}); !errors.Is(err, racefree.ErrInvalidInput) {
					t.Errorf("Step(%q): %v, want ErrInvalidInput", step, err)
				}
			}
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := countSteps(t, b.db); got != 0 {
			t.Fatalf("%d recovery points after bad step names", got)
		}
	})
}

// dieAfterFirstStep is the child worker: it charges (a side effect
// recorded in the database), saves the charge as a recovery point, and
// dies before completing, without releasing anything.
func dieAfterFirstStep() {
	ctx := context.Background()
	db, err := dsn.Open(ctx, os.Getenv("RF_DSN"), &racefree.Config{Clock: racefree.NewManualClock(t0)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	store := idempotency.New(db, &idempotency.Options{Lease: time.Minute})
	_, err = store.Do(ctx, "s", "checkout-1", "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
		_, err := call.Step(ctx, "charge", func(ctx context.Context) (string, error) { return charge(ctx, db) })
		if err != nil {
			return nil, err
		}
		os.Exit(0) // killed after its first side effect
		return nil, nil
	})
	fmt.Fprintln(os.Stderr, "unreachable:", err)
	os.Exit(2)
}

func charge(ctx context.Context, db *racefree.DB) (string, error) {
	if _, err := db.ExecContext(ctx, `INSERT INTO charges (id) VALUES ('ch_1')`); err != nil {
		return "", err
	}
	return "ch_1", nil
}

func TestKilledWorkerResumesFromItsRecoveryPoint(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		clock := racefree.NewManualClock(t0)
		db := testdb.Open(t, d, &racefree.Config{Clock: clock})
		if _, err := db.ExecContext(ctx, `CREATE TABLE charges (id TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "RACEFREE_IDEM_CHILD=1", "RF_DSN="+d)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("worker: %v: %s", err, out)
		}

		store := idempotency.New(db, &idempotency.Options{Lease: time.Minute})
		if _, err := store.Do(ctx, "s", "checkout-1", "fp", nil); !errors.Is(err, racefree.ErrInProgress) {
			t.Fatalf("before the dead worker's lease lapses: %v, want ErrInProgress", err)
		}
		clock.Advance(time.Minute)
		var shipped string
		res, err := store.Do(ctx, "s", "checkout-1", "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
			id, err := call.Step(ctx, "charge", func(ctx context.Context) (string, error) { return charge(ctx, db) })
			if err != nil {
				return nil, err
			}
			shipped, err = call.Step(ctx, "ship", func(context.Context) (string, error) { return "shp_" + id, nil })
			if call.ResumedSteps != 1 {
				t.Errorf("resumed %d steps, want 1", call.ResumedSteps)
			}
			return []byte(shipped), err
		})
		if err != nil || string(res.Response) != "shp_ch_1" {
			t.Fatalf("retry: %+v, %v", res, err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM charges`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d charges, %v; want exactly 1", n, err)
		}
	})
}
