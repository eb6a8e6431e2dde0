package idempotency_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// The tests of this file try the idempotency promises at their edges (the
// boundary matrix of docs/contributing.md): each limit at the limit and
// one past it, two requests that differ in one dimension alone, the
// caller's transaction committed and rolled back, a caller cancelled at
// each stage, and the middleware with and without each option.

// TestEdgesOneKeyInTwoScopesIsTwoRequests runs one key with one
// fingerprint in two scopes at the same time: the second neither waits
// for nor refuses the first (its own lease), its step of the same name is
// its own (no resume of the other's recovery point), each completes its
// own record, and each replays its own response.
func TestEdgesOneKeyInTwoScopesIsTwoRequests(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx := context.Background()
		started, release := make(chan struct{}), make(chan struct{})
		stop := sync.OnceFunc(func() { close(release) })
		defer stop()
		done := make(chan error, 1)
		go func() {
			res, err := b.store.Do(ctx, "a", "k", "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
				v, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_a", nil })
				close(started)
				<-release
				return []byte(v), err
			})
			if err == nil && (res.Replayed || string(res.Response) != "ch_a") {
				err = fmt.Errorf("scope a: %+v, want its own fresh run", res)
			}
			done <- err
		}()
		<-started
		res, err := b.store.Do(ctx, "b", "k", "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
			v, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_b", nil })
			if call.ResumedSteps != 0 {
				t.Errorf("scope b resumed %d steps of scope a", call.ResumedSteps)
			}
			return []byte(v), err
		})
		if err != nil || res.Replayed || string(res.Response) != "ch_b" {
			t.Fatalf("the same key in scope b while a's runs: %+v, %v; want its own run, ch_b", res, err)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for scope, want := range map[string]string{"a": "ch_a", "b": "ch_b"} {
			res, err := b.store.Do(ctx, scope, "k", "fp", nil)
			if err != nil || !res.Replayed || string(res.Response) != want {
				t.Errorf("replay in scope %s: %+v, %v; want %s", scope, res, err, want)
			}
		}
		// The fingerprint alone differs: a mismatch, nothing changed.
		if _, err := b.store.Do(ctx, "a", "k", "fp2", nil); !errors.Is(err, racefree.ErrMismatch) {
			t.Fatalf("scope a, another fingerprint: %v, want ErrMismatch", err)
		}
	})
}

// TestEdgesInputBounds tries each documented limit at the limit and one
// past it, for Do and DoTx: a key of MaxKeyBytes, a scope of
// MaxScopeBytes, a fingerprint of MaxFingerprintBytes and a step name of
// MaxStepBytes are taken; one byte more (of ordinary characters) is an
// InputError that writes nothing and runs nothing.
func TestEdgesInputBounds(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx := context.Background()
		key := strings.Repeat("k", idempotency.MaxKeyBytes)
		scope := strings.Repeat("s", idempotency.MaxScopeBytes)
		fp := strings.Repeat("f", idempotency.MaxFingerprintBytes)
		step := strings.Repeat("x", idempotency.MaxStepBytes)
		ran := func(context.Context, *idempotency.Call) ([]byte, error) {
			t.Error("fn ran on refused input")
			return nil, nil
		}
		ranTx := func(context.Context, *sql.Tx, *idempotency.Call) ([]byte, error) {
			t.Error("fn ran on refused input")
			return nil, nil
		}
		for _, tc := range [][3]string{{scope, key + "k", fp}, {scope + "s", key, fp}, {scope, key, fp + "f"}} {
			if _, err := b.store.Do(ctx, tc[0], tc[1], tc[2], ran); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Do with sizes %d/%d/%d: %v, want an InputError", len(tc[0]), len(tc[1]), len(tc[2]), err)
			}
			err := b.db.InTx(ctx, func(tx *sql.Tx) error {
				_, err := b.store.DoTx(ctx, tx, tc[0], tc[1], tc[2], ranTx)
				return err
			})
			if !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("DoTx with sizes %d/%d/%d: %v, want an InputError", len(tc[0]), len(tc[1]), len(tc[2]), err)
			}
		}
		var n int
		if err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_idempotency`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d records after refusals, %v; want 0", n, err)
		}
		res, err := b.store.Do(ctx, scope, key, fp, func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
			if _, err := call.Step(ctx, step+"x", func(context.Context) (string, error) {
				t.Error("a step name of MaxStepBytes + 1 ran")
				return "", nil
			}); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("a step name of MaxStepBytes + 1: %v, want an InputError", err)
			}
			v, err := call.Step(ctx, step, func(context.Context) (string, error) { return "v", nil })
			return []byte(v), err
		})
		if err != nil || string(res.Response) != "v" {
			t.Fatalf("Do at every limit: %+v, %v", res, err)
		}
		if got := countSteps(t, b.db); got != 1 {
			t.Fatalf("%d recovery points, want the one of MaxStepBytes", got)
		}
		err = b.db.InTx(ctx, func(tx *sql.Tx) error {
			res, err := b.store.DoTx(ctx, tx, scope, key, fp, ranTx)
			if err == nil && (!res.Replayed || string(res.Response) != "v") {
				err = fmt.Errorf("DoTx at every limit: %+v, want the replay", res)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestEdgesStepExpiresAtTheRetentionBoundary: a recovery point is kept
// for the retention after it was saved: a retry 1 ms before resumes it,
// a retry at the exact millisecond runs the step again.
func TestEdgesStepExpiresAtTheRetentionBoundary(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Retention: time.Hour}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		boom := errors.New("the provider is down")
		var charges atomic.Int64
		run := func() (resumed int, err error) {
			_, err = b.store.Do(ctx, "s", "k", "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
				if _, err := call.Step(ctx, "charge", func(context.Context) (string, error) {
					return fmt.Sprint("ch_", charges.Add(1)), nil
				}); err != nil {
					return nil, err
				}
				resumed = call.ResumedSteps
				return nil, boom // released: the retry runs again
			})
			return resumed, err
		}
		if r, err := run(); !errors.Is(err, boom) || r != 0 {
			t.Fatalf("first run: %d resumed, %v", r, err)
		}
		b.clock.Advance(time.Hour - time.Millisecond)
		if r, err := run(); !errors.Is(err, boom) || r != 1 || charges.Load() != 1 {
			t.Fatalf("1 ms before the step expires: %d resumed, %d charges, %v; want the step resumed", r, charges.Load(), err)
		}
		b.clock.Advance(time.Millisecond)
		if r, err := run(); !errors.Is(err, boom) || r != 0 || charges.Load() != 2 {
			t.Fatalf("at the step's expiry: %d resumed, %d charges, %v; want the step run again", r, charges.Load(), err)
		}
	})
}

// TestEdgesDoTxCommittedAndRolledBack: a DoTx that completed in a
// transaction the caller then rolls back leaves nothing a later reader
// sees (no record, no lease, no recovery point): Do on the pool runs fn
// afresh, neither a 409 nor a replay. Committed, Do on the pool and DoTx
// in another transaction replay it, and another fingerprint is refused.
func TestEdgesDoTxCommittedAndRolledBack(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rollback := errors.New("the caller rolls back")
		doTx := func(fail bool, body string) (*idempotency.Result, error) {
			var res *idempotency.Result
			err := b.db.InTx(ctx, func(tx *sql.Tx) error {
				var err error
				res, err = b.store.DoTx(ctx, tx, "s", "k", "fp", func(ctx context.Context, tx *sql.Tx, call *idempotency.Call) ([]byte, error) {
					v, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return body, nil })
					return []byte(v), err
				})
				if err == nil && fail {
					return rollback
				}
				return err
			})
			return res, err
		}
		if _, err := doTx(true, "rolled back"); !errors.Is(err, rollback) {
			t.Fatal(err)
		}
		var records, leases int
		if err := b.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM racefree_idempotency), (SELECT count(*) FROM racefree_claims WHERE ns = 'idempotency')`).Scan(&records, &leases); err != nil || records != 0 || leases != 0 || countSteps(t, b.db) != 0 {
			t.Fatalf("after the rollback: %d records, %d leases, %v; want nothing", records, leases, err)
		}
		res, err := b.store.Do(ctx, "s", "k", "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
			v, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return "pool", nil })
			return []byte(v), err
		})
		if err != nil || res.Replayed || string(res.Response) != "pool" {
			t.Fatalf("Do after the rolled-back DoTx: %+v, %v; want a fresh run", res, err)
		}
		// Committed: another key, so that the pool's record stays apart.
		var committed *idempotency.Result
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			var err error
			committed, err = b.store.DoTx(ctx, tx, "s", "k2", "fp", func(context.Context, *sql.Tx, *idempotency.Call) ([]byte, error) { return []byte("tx"), nil })
			return err
		}); err != nil || committed.Replayed {
			t.Fatalf("committed DoTx: %+v, %v", committed, err)
		}
		if res, err := b.store.Do(ctx, "s", "k2", "fp", nil); err != nil || !res.Replayed || string(res.Response) != "tx" {
			t.Fatalf("Do after the committed DoTx: %+v, %v; want its replay", res, err)
		}
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			res, err := b.store.DoTx(ctx, tx, "s", "k2", "fp", nil)
			if err == nil && (!res.Replayed || string(res.Response) != "tx") {
				err = fmt.Errorf("%+v, want the replay", res)
			}
			return err
		}); err != nil {
			t.Fatalf("DoTx after the committed DoTx: %v", err)
		}
		if _, err := b.store.Do(ctx, "s", "k2", "other", nil); !errors.Is(err, racefree.ErrMismatch) {
			t.Fatalf("another fingerprint after the committed DoTx: %v, want ErrMismatch", err)
		}
	})
}

// TestEdgesDoTxFailedThenCommitted: fn fails in DoTx and the caller
// commits its transaction all the same (its own writes, say). The key
// is left as a failed Do leaves it: no lease, so the retry with the same
// fingerprint runs fn at once, on the pool and in another DoTx, never an
// *InProgressError until the lease lapses; another fingerprint is
// ErrMismatch, as after Do.
func TestEdgesDoTxFailedThenCommitted(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		failed := errors.New("fn failed")
		for _, key := range []string{"pool", "tx"} {
			if err := b.db.InTx(ctx, func(tx *sql.Tx) error {
				_, err := b.store.DoTx(ctx, tx, "s", key, "fp", func(context.Context, *sql.Tx, *idempotency.Call) ([]byte, error) { return nil, failed })
				if !errors.Is(err, failed) {
					return fmt.Errorf("DoTx: %w, want fn's error", err)
				}
				return nil // the caller commits all the same
			}); err != nil {
				t.Fatal(err)
			}
		}
		res, err := b.store.Do(ctx, "s", "pool", "fp", func(context.Context, *idempotency.Call) ([]byte, error) { return []byte("pool"), nil })
		if err != nil || res.Replayed || string(res.Response) != "pool" {
			t.Fatalf("Do after the failed DoTx: %+v, %v; want a fresh run", res, err)
		}
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			res, err := b.store.DoTx(ctx, tx, "s", "tx", "fp", func(context.Context, *sql.Tx, *idempotency.Call) ([]byte, error) { return []byte("tx"), nil })
			if err == nil && (res.Replayed || string(res.Response) != "tx") {
				err = fmt.Errorf("%+v, want a fresh run", res)
			}
			return err
		}); err != nil {
			t.Fatalf("DoTx after the failed DoTx: %v", err)
		}
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := b.store.DoTx(ctx, tx, "s", "pool-2", "fp", func(context.Context, *sql.Tx, *idempotency.Call) ([]byte, error) { return nil, failed })
			if !errors.Is(err, failed) {
				return fmt.Errorf("DoTx: %w, want fn's error", err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.store.Do(ctx, "s", "pool-2", "other", nil); !errors.Is(err, racefree.ErrMismatch) {
			t.Fatalf("another fingerprint after the failed DoTx: %v, want ErrMismatch", err)
		}
	})
}

// TestEdgesCancelledCaller cancels a caller at each stage: before Do,
// DoTx or the middleware (fn does not run, nothing is written, the
// middleware answers 503 and the retry runs), and, on PostgreSQL, while
// Do waits for the row lock of the key's lease held by another caller's
// open DoTx: it returns the context's error at once, never runs fn, and
// leaves nothing, so that once that transaction commits the retry replays
// its response.
func TestEdgesCancelledCaller(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx := context.Background()
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		fn := func(context.Context, *idempotency.Call) ([]byte, error) {
			t.Error("fn ran for a caller cancelled before the call")
			return nil, nil
		}
		if _, err := b.store.Do(cancelled, "s", "k", "fp", fn); !errors.Is(err, context.Canceled) {
			t.Fatalf("Do cancelled before the call: %v, want context.Canceled", err)
		}
		err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := b.store.DoTx(cancelled, tx, "s", "k", "fp", func(context.Context, *sql.Tx, *idempotency.Call) ([]byte, error) {
				t.Error("fn ran for a caller cancelled before the call")
				return nil, nil
			})
			return err
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("DoTx cancelled before the call: %v, want context.Canceled", err)
		}
		var runs, status atomic.Int64
		status.Store(http.StatusCreated)
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(counting(&runs, &status))
		if rec := do(h, post("/v1/orders", `"k"`, "{}").WithContext(cancelled)); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || runs.Load() != 0 {
			t.Fatalf("a request cancelled before the middleware: %d, %d runs; want 503 with Retry-After, no run", rec.Code, runs.Load())
		}
		var records, leases int
		if err := b.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM racefree_idempotency), (SELECT count(*) FROM racefree_claims WHERE ns = 'idempotency')`).Scan(&records, &leases); err != nil || records != 0 || leases != 0 {
			t.Fatalf("after the cancelled callers: %d records, %d leases, %v; want nothing", records, leases, err)
		}
		if rec := do(h, post("/v1/orders", `"k"`, "{}")); rec.Code != http.StatusCreated || runs.Load() != 1 {
			t.Fatalf("the retry of the cancelled request: %d, %d runs; want 201, one run", rec.Code, runs.Load())
		}
		if res, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) { return []byte("ok"), nil }); err != nil || res.Replayed {
			t.Fatalf("the retry of the cancelled Do: %+v, %v; want a fresh run", res, err)
		}

		if b.db.Engine() != racefree.Postgres {
			return // SQLite has one writer: the wait is for its write lock, not a row's
		}
		tx, err := b.db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		pid := testdb.BackendPID(t, tx)
		if _, err := b.store.DoTx(ctx, tx, "s", "locked", "fp", func(context.Context, *sql.Tx, *idempotency.Call) ([]byte, error) { return []byte("tx"), nil }); err != nil {
			t.Fatal(err)
		}
		waiting, cancelWait := context.WithCancel(ctx)
		defer cancelWait()
		waited := make(chan error, 1)
		go func() {
			_, err := b.store.Do(waiting, "s", "locked", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
				t.Error("fn ran for a caller cancelled while it waited")
				return nil, nil
			})
			waited <- err
		}()
		bounded, stopWaiting := context.WithTimeout(ctx, 10*time.Second)
		defer stopWaiting()
		waitReaperDoneOrBlockedBy(t, bounded, b.db, pid, waited)
		cancelWait()
		select {
		case err := <-waited:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Do cancelled while it waits for the lease's row lock: %v, want context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Do cancelled while it waits for the lease's row lock still waits")
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if res, err := b.store.Do(ctx, "s", "locked", "fp", nil); err != nil || !res.Replayed || string(res.Response) != "tx" {
			t.Fatalf("the retry once the transaction committed: %+v, %v; want its replay", res, err)
		}
	})
}

// TestEdgesMiddlewareOptions runs the middleware with and without each
// option: Methods replaces POST and PATCH, Headers replaces the stored
// headers, MaxBodyBytes takes a body of exactly its size, and Scope
// replaces the default (by principal and route): with one scope for
// every route the same key on another path or with another method is a
// 422 (the fingerprint covers both), without it another request.
func TestEdgesMiddlewareOptions(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs, status atomic.Int64
		status.Store(http.StatusCreated)
		next := counting(&runs, &status)
		count := func(want int64, what string) {
			t.Helper()
			if got := runs.Swap(0); got != want {
				t.Errorf("%s: %d runs, want %d", what, got, want)
			}
		}

		put := b.store.Middleware(idempotency.MiddlewareOptions{Methods: []string{http.MethodPut}})(next)
		for range 2 {
			req := post("/v1/orders", `"m"`, "{}")
			req.Method = http.MethodPut
			do(put, req)
		}
		count(1, "Methods PUT, two PUTs with one key")
		do(put, post("/v1/orders", `"m"`, "{}"))
		do(put, post("/v1/orders", `"m"`, "{}"))
		count(2, "Methods PUT, two POSTs with one key")

		headers := b.store.Middleware(idempotency.MiddlewareOptions{Headers: []string{"X-Not-Stored"}})(next)
		do(headers, post("/v1/orders", `"h"`, "{}"))
		rec := do(headers, post("/v1/orders", `"h"`, "{}"))
		if rec.Header().Get("Idempotent-Replayed") != "true" || rec.Header().Get("X-Not-Stored") != "1" || rec.Header().Get("Location") != "" || rec.Header().Get("Content-Type") != "" {
			t.Errorf("Headers X-Not-Stored, the replay's headers: %v; want X-Not-Stored alone", rec.Header())
		}
		count(1, "Headers")

		small := b.store.Middleware(idempotency.MiddlewareOptions{MaxBodyBytes: 64})(next)
		if rec := do(small, post("/v1/orders", `"b"`, strings.Repeat("x", 64))); rec.Code != http.StatusCreated {
			t.Errorf("MaxBodyBytes 64, a body of 64 bytes: %d, want 201", rec.Code)
		}
		if rec := do(small, post("/v1/orders", `"b2"`, strings.Repeat("x", 65))); rec.Code != http.StatusRequestEntityTooLarge {
			t.Errorf("MaxBodyBytes 64, a body of 65 bytes: %d, want 413", rec.Code)
		}
		count(1, "MaxBodyBytes")

		def := b.store.Middleware(idempotency.MiddlewareOptions{})(next)
		one := b.store.Middleware(idempotency.MiddlewareOptions{Scope: func(*http.Request) string { return "one" }})(next)
		for _, h := range []http.Handler{def, one} {
			do(h, post("/v1/a", `"p"`, "{}"))
		}
		count(2, "Scope: one key on /v1/a with and without it")
		if rec := do(def, post("/v1/b", `"p"`, "{}")); rec.Code != http.StatusCreated {
			t.Errorf("the default scope, the key on another path: %d, want 201", rec.Code)
		}
		if rec := do(one, post("/v1/b", `"p"`, "{}")); rec.Code != http.StatusUnprocessableEntity {
			t.Errorf("one scope, the key on another path: %d, want 422", rec.Code)
		}
		// With one scope for every route, the fingerprint alone tells the
		// method apart: PATCH after POST with one key and body is a 422.
		patch := post("/v1/a", `"p"`, "{}")
		patch.Method = http.MethodPatch
		if rec := do(one, patch); rec.Code != http.StatusUnprocessableEntity {
			t.Errorf("one scope, the key with another method: %d, want 422", rec.Code)
		}
		count(1, "Scope: the key on /v1/b and in a PATCH")
	})
}

// TestEdgesMismatchAfterALapsedLease: a worker began a request and died
// (its lease lapses, its record stays in progress); the same key then
// comes with another fingerprint. The newcomer finds the record another
// request's and gets ErrMismatch without running fn, and holds nothing
// after: the retry of the original request takes over at once. A duplicate in flight before that is told how long
// to wait, in its error's text too.
func TestEdgesMismatchAfterALapsedLease(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Lease: time.Minute}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		finish := stalledDo(b, "s", "k", "fp", nil)
		_, err := b.store.Do(ctx, "s", "k", "fp", nil)
		var inProgress *idempotency.InProgressError
		if !errors.As(err, &inProgress) || err.Error() != "a request with this idempotency key is in progress; retry after 1m0s" {
			t.Fatalf("a duplicate in flight: %v", err)
		}
		b.clock.Advance(time.Minute)

		_, err = b.store.Do(ctx, "s", "k", "another fp", func(context.Context, *idempotency.Call) ([]byte, error) {
			t.Error("fn ran for a key another request holds")
			return nil, nil
		})
		if !errors.Is(err, racefree.ErrMismatch) {
			t.Fatalf("another fingerprint once the lease lapsed: %v, want ErrMismatch", err)
		}
		res, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
			return []byte("retried"), nil
		})
		if err != nil || string(res.Response) != "retried" {
			t.Fatalf("the original request's retry right after the mismatch: %+v, %v; want it to take over at once", res, err)
		}
		if err := finish(); !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("the dead worker: %v, want ErrStaleFence", err)
		}
	})
}

// TestEdgesDuplicateWhileTheRecordIsGone: a call runs and holds the key's
// lease while its record is gone (deleted here as the reaper deletes a
// record past its retention, which a call running that long under its
// heartbeat can outlive). A duplicate, with the same fingerprint or
// another, finds no record and the lease held: it gets an
// *InProgressError, and the running call is left alone.
func TestEdgesDuplicateWhileTheRecordIsGone(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Lease: time.Minute}, func(t *testing.T, b bundle) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		running, release := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			_, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
				close(running)
				<-release
				return []byte("first"), nil
			})
			first <- err
		}()
		<-running
		if _, err := b.db.ExecContext(ctx, `DELETE FROM racefree_idempotency WHERE key = 'k'`); err != nil {
			t.Fatal(err)
		}
		for _, fp := range []string{"fp", "other"} {
			_, err := b.store.Do(ctx, "s", "k", fp, func(context.Context, *idempotency.Call) ([]byte, error) {
				return nil, errors.New("the duplicate ran")
			})
			var busy *idempotency.InProgressError
			if !errors.As(err, &busy) {
				t.Fatalf("a duplicate (fingerprint %q) while the record is gone: %v; want an *InProgressError", fp, err)
			}
		}
		close(release)
		if err := <-first; err == nil {
			t.Fatal("the first call stored its response in a record that is gone; want its completion refused")
		}
	})
}

// TestEdgesStepKeysOfTwoTenantsNeverMeet: the tenant is a field of its
// own in StepKey, apart from the scope: tenant "ab" with scope "c" and
// tenant "a" with scope "bc", with one key and one step, get two step
// keys, so the two never share an external side effect.
func TestEdgesStepKeysOfTwoTenantsNeverMeet(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		keys := map[string]string{}
		for _, tc := range [][2]string{{"ab", "c"}, {"a", "bc"}} {
			ctx, err := tenant.With(context.Background(), tc[0])
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.store.Do(ctx, tc[1], "k", "fp", func(_ context.Context, call *idempotency.Call) ([]byte, error) {
				keys[tc[0]+"/"+tc[1]] = call.StepKey("charge")
				return []byte("ok"), nil
			}); err != nil {
				t.Fatalf("tenant %s, scope %s: %v", tc[0], tc[1], err)
			}
		}
		if len(keys) != 2 || keys["ab/c"] == keys["a/bc"] {
			t.Fatalf("step keys %v: tenant ab in scope c and tenant a in scope bc share one", keys)
		}
	})
}

// TestEdgesDoTxStepSeesItsOwnTransaction: in DoTx a step saved earlier in
// the caller's open transaction is a recovery point for the rest of the
// run: a second Step of the same name returns the saved value and does not
// run again, though nothing is committed yet.
func TestEdgesDoTxStepSeesItsOwnTransaction(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var charges atomic.Int64
		charge := func(context.Context) (string, error) { return fmt.Sprint("ch_", charges.Add(1)), nil }
		err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			res, err := b.store.DoTx(ctx, tx, "s", "k", "fp", func(ctx context.Context, tx *sql.Tx, call *idempotency.Call) ([]byte, error) {
				first, err := call.Step(ctx, "charge", charge)
				if err != nil {
					return nil, err
				}
				again, err := call.Step(ctx, "charge", charge)
				if err != nil {
					return nil, err
				}
				if again != first || call.ResumedSteps != 1 {
					return nil, fmt.Errorf("the step again in the same transaction: %q (first %q), %d resumed; want the saved value resumed", again, first, call.ResumedSteps)
				}
				return []byte(again), nil
			})
			if err == nil && string(res.Response) != "ch_1" {
				err = fmt.Errorf("%+v, want ch_1", res)
			}
			return err
		})
		if err != nil || charges.Load() != 1 {
			t.Fatalf("DoTx: %v, %d charges; want one", err, charges.Load())
		}
	})
}

// TestEdgesDoTxRecordsTheOutcomeAfterTheCallerCancels: a caller whose
// context ends once fn has run (a client that hangs up), in a transaction
// it began on a context of its own, gets fn's response from DoTx and can
// commit it: storing the response does not run on the ended context. The
// retry replays it, and fn ran once.
func TestEdgesDoTxRecordsTheOutcomeAfterTheCallerCancels(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var runs atomic.Int64
		if err := b.db.InTx(ctx, func(tx *sql.Tx) error {
			caller, hangUp := context.WithCancel(ctx)
			defer hangUp()
			res, err := b.store.DoTx(caller, tx, "s", "k", "fp", func(context.Context, *sql.Tx, *idempotency.Call) ([]byte, error) {
				runs.Add(1)
				hangUp() // fn has done its work; the client goes away
				return []byte("done"), nil
			})
			if err != nil || res.Replayed || string(res.Response) != "done" {
				return fmt.Errorf("DoTx whose caller hung up after fn ran: %+v, %w; want the fresh response", res, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		res, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
			runs.Add(1)
			return []byte("again"), nil
		})
		if err != nil || !res.Replayed || string(res.Response) != "done" || runs.Load() != 1 {
			t.Fatalf("the retry: %+v, %v, %d runs; want the replay of done, one run", res, err, runs.Load())
		}
	})
}

// TestEdgesReapBatchesStayInTheirTenant: Reap's batches are each one
// tenant's oldest expired records, never another's. acme's records expired
// before and after globex's; with batches of one record, a batch that
// took the oldest of every tenant would come back short for the tenant it
// runs for, and stop that tenant's reap with its expired records left.
// After one Reap none is left.
func TestEdgesReapBatchesStayInTheirTenant(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Retention: time.Hour}, func(t *testing.T, b bundle) {
		acme, globex := twoTenants(t)
		for _, r := range []struct {
			ctx context.Context
			key string
		}{{acme, "a1"}, {globex, "g2"}, {acme, "a3"}} {
			if _, err := b.store.Do(r.ctx, "s", r.key, "fp", func(context.Context, *idempotency.Call) ([]byte, error) { return []byte("ok"), nil }); err != nil {
				t.Fatalf("%s %s: %v", tenant.From(r.ctx), r.key, err)
			}
			b.clock.Advance(time.Minute)
		}
		b.clock.Advance(time.Hour)
		if _, err := b.store.Reap(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		var left int
		if err := b.db.QueryRowContext(context.Background(), `SELECT count(*) FROM racefree_idempotency`).Scan(&left); err != nil || left != 0 {
			t.Fatalf("%d expired records left after Reap with batches of one, %v; want none", left, err)
		}
	})
}

// TestEdgesFingerprintKeepsTheQueryApartFromTheBody: the fingerprint
// ends the query string before the body: ?a=1 with an empty body and ?a=
// with the body 1, on one path with one key, are two requests, a 422, not
// a replay of the first.
func TestEdgesFingerprintKeepsTheQueryApartFromTheBody(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs, status atomic.Int64
		status.Store(http.StatusCreated)
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(counting(&runs, &status))
		if rec := do(h, post("/v1/pay?a=1", `"k"`, "")); rec.Code != http.StatusCreated {
			t.Fatalf("first: %d", rec.Code)
		}
		if rec := do(h, post("/v1/pay?a=", `"k"`, "1")); rec.Code != http.StatusUnprocessableEntity || runs.Load() != 1 {
			t.Fatalf("the query's last byte moved into the body, with the same key: %d, %d runs; want 422, one run", rec.Code, runs.Load())
		}
	})
}

// TestEdgesLeasesOfScopesAndKeysThatRunTogether: scope and key are two
// fields of the lease's name: key bk in scope a in flight neither holds up
// nor is held up by key k in scope ab, which runs at once.
func TestEdgesLeasesOfScopesAndKeysThatRunTogether(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Lease: time.Minute}, func(t *testing.T, b bundle) {
		finish := stalledDo(b, "a", "bk", "fp", []byte("a/bk"))
		res, err := b.store.Do(context.Background(), "ab", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) { return []byte("ab/k"), nil })
		if err != nil || res.Replayed || string(res.Response) != "ab/k" {
			t.Fatalf("key k in scope ab while key bk in scope a is in flight: %+v, %v; want its own run", res, err)
		}
		if err := finish(); err != nil {
			t.Fatalf("key bk in scope a: %v", err)
		}
	})
}
