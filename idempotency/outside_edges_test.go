package idempotency_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// The tests of this file try, from outside, what the other tests of the
// package left untried: the middleware's answers where net/http, the
// store's input checks and a header list spelled in lower case meet it,
// a run whose key another worker took over, a request that waited for a
// key's lease and found the record another request's, a recovery point
// saved again at its expiry, and the reaper's batches: of recovery points
// in two tenants, and of the default size.

// TestOutsideEdgesMiddlewareAnswers: a handler that wrote its body and
// then called WriteHeader(500) answered 200, as net/http answers it, and
// that 200 is stored and replayed; its first answer carries every header
// it set, its replay those that MiddlewareOptions.Headers names, however
// that list spells them (content-type is Content-Type), and no other; a
// Scope past MaxScopeBytes, which the store refuses as input, is a 400
// problem, not a 422 or a 503, and the handler does not run; two
// Idempotency-Key lines, even of unquoted keys, are a 400.
func TestOutsideEdgesMiddlewareAnswers(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs atomic.Int64
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("X-Order", "o1")
			w.Header().Set("X-Request-Id", "req-1")
			io.WriteString(w, "made")
			w.WriteHeader(http.StatusInternalServerError) // superfluous: the 200 went with the body
		})
		h := b.store.Middleware(idempotency.MiddlewareOptions{Headers: []string{"content-type", "x-order"}})(next)

		first := do(h, post("/v1/orders", `"k1"`, "{}"))
		if first.Code != http.StatusOK || first.Body.String() != "made" || first.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("first answer: %d %q, replayed %q; want the 200 that went with the body", first.Code, first.Body.String(), first.Header().Get("Idempotent-Replayed"))
		}
		for name, want := range map[string]string{"Content-Type": "text/plain", "X-Order": "o1", "X-Request-Id": "req-1"} {
			if got := first.Header().Get(name); got != want {
				t.Errorf("first answer's %s: %q, want the handler's %q", name, got, want)
			}
		}
		replay := do(h, post("/v1/orders", `"k1"`, "{}"))
		if replay.Code != http.StatusOK || replay.Body.String() != "made" || replay.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d %q, replayed %q; want the stored 200 replayed", replay.Code, replay.Body.String(), replay.Header().Get("Idempotent-Replayed"))
		}
		for name, want := range map[string]string{"Content-Type": "text/plain", "X-Order": "o1", "X-Request-Id": ""} {
			if got := replay.Header().Get(name); got != want {
				t.Errorf("replay's %s: %q, want %q", name, got, want)
			}
		}
		if got := runs.Load(); got != 1 {
			t.Fatalf("the handler ran %d times, want once", got)
		}

		long := b.store.Middleware(idempotency.MiddlewareOptions{Scope: func(*http.Request) string {
			return strings.Repeat("s", idempotency.MaxScopeBytes+1)
		}})(next)
		rec := do(long, post("/v1/orders", `"k2"`, "{}"))
		if rec.Code != http.StatusBadRequest || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("a Scope of MaxScopeBytes + 1: %d %q, want a 400 problem", rec.Code, rec.Header().Get("Content-Type"))
		}

		for _, lines := range [][]string{{"a", "b"}, {"a", "a"}, {`"a"`, `"b"`}} {
			req := post("/v1/orders", "", "{}")
			req.Header[idempotency.Header] = lines
			if rec := do(h, req); rec.Code != http.StatusBadRequest {
				t.Errorf("Idempotency-Key lines %q: %d, want 400", lines, rec.Code)
			}
			if key, err := idempotency.ParseKey(lines); err == nil {
				t.Errorf("ParseKey(%q) = %q; want an error", lines, key)
			}
		}
		if got := runs.Load(); got != 1 {
			t.Fatalf("the handler ran %d times, want once: refused requests ran it", got)
		}
	})
}

// TestOutsideEdgesATakenOverRunIsCancelled: a worker whose lease lapsed
// and was taken over by another run (a higher fence) learns it at its
// next heartbeat, which finds a stale fence: its fn's context is
// cancelled, and Do answers the lease error (ErrStaleFence) even though
// fn returned its context's error, never context.Canceled, which would
// read as the caller's own cancellation. The run that took over completes
// and is the one replayed. The heartbeat ticks in real time, so one tick
// may fall between the lapse and the takeover: it finds the lease lapsed
// (ErrNotHeld), the other lease error, and the test takes either.
func TestOutsideEdgesATakenOverRunIsCancelled(t *testing.T) {
	t.Parallel()
	const lease = 6 * time.Second // the heartbeat ticks every 2 s of real time
	each(t, &idempotency.Options{Lease: lease}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		started, giveUp := make(chan struct{}), make(chan struct{})
		defer close(giveUp)
		first := make(chan error, 1)
		go func() {
			_, err := b.store.Do(ctx, "s", "k", "fp", func(ctx context.Context, _ *idempotency.Call) ([]byte, error) {
				close(started)
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-giveUp:
					return []byte("never cancelled"), nil
				}
			})
			first <- err
		}()
		<-started
		b.clock.Advance(lease) // the first run's lease lapses, unrenewed on the manual clock
		tookOver, release := make(chan struct{}), make(chan struct{})
		second := make(chan error, 1)
		go func() {
			res, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
				close(tookOver)
				<-release
				return []byte("second"), nil
			})
			if err == nil && (res.Replayed || string(res.Response) != "second") {
				err = errors.New("the run that took over did not run afresh")
			}
			second <- err
		}()
		select {
		case <-tookOver:
		case err := <-second:
			t.Fatalf("the takeover after the lease lapsed: %v", err)
		}
		select {
		case err := <-first:
			if !(errors.Is(err, racefree.ErrStaleFence) || errors.Is(err, racefree.ErrNotHeld)) || errors.Is(err, context.Canceled) {
				t.Errorf("the run taken over: %v; want the lease error (ErrStaleFence, or ErrNotHeld from a tick before the takeover), not the context's", err)
			}
		case <-time.After(30 * time.Second): // fifteen heartbeats
			t.Errorf("the run taken over was never cancelled")
		}
		close(release)
		if err := <-second; err != nil {
			t.Fatal(err)
		}
		res, err := b.store.Do(ctx, "s", "k", "fp", nil)
		if err != nil || !res.Replayed || string(res.Response) != "second" {
			t.Fatalf("the retry: %+v, %v; want the replay of the run that took over", res, err)
		}
	})
}

// TestOutsideEdgesReapStepBatchesStayInTheirTenant: the recovery points
// of two tenants, interleaved in expiry, are all reaped with batches of
// one: each batch takes the oldest expired of its own tenant, so none
// comes back short while its tenant has any left.
func TestOutsideEdgesReapStepBatchesStayInTheirTenant(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Retention: time.Hour}, func(t *testing.T, b bundle) {
		acme, globex := twoTenants(t)
		for _, r := range []struct {
			ctx context.Context
			key string
		}{{acme, "a1"}, {globex, "g2"}, {acme, "a3"}, {globex, "g4"}} {
			_, err := b.store.Do(r.ctx, "s", r.key, "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
				v, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_" + r.key, nil })
				return []byte(v), err
			})
			if err != nil {
				t.Fatalf("%s %s: %v", tenant.From(r.ctx), r.key, err)
			}
			b.clock.Advance(time.Minute)
		}
		if got := countSteps(t, b.db); got != 4 {
			t.Fatalf("%d recovery points, want 4", got)
		}
		b.clock.Advance(time.Hour)
		n, err := b.store.Reap(context.Background(), 1)
		if err != nil || n != 8 {
			t.Errorf("Reap with batches of one: %d, %v; want 8 (4 records, 4 recovery points)", n, err)
		}
		if got := countSteps(t, b.db); got != 0 {
			t.Fatalf("%d expired recovery points left after Reap with batches of one; want none", got)
		}
	})
}

// TestOutsideEdgesMismatchBehindALockReleasesTheLease (PostgreSQL, where
// the wait is for a row): a DoTx with another fingerprint finds no record
// while a DoTx of the key is open, and waits for the key's lease behind
// that transaction; the first DoTx's fn fails and its caller commits all
// the same, leaving the key free with its record in progress. The waiting
// DoTx then takes the lease, finds the record another request's and gets
// ErrMismatch without running fn, and releases the lease it took in its
// caller's transaction: a caller that commits that transaction all the
// same holds nothing, and the original request's retry runs at once, not
// after a lease of a request in progress. (A Do refused so rolls its
// lease back with its own transaction.)
func TestOutsideEdgesMismatchBehindALockReleasesTheLease(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Lease: time.Minute}, func(t *testing.T, b bundle) {
		if b.db.Engine() != racefree.Postgres {
			return // SQLite has one writer: the wait is for its write lock, which no test can see
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		first, err := b.db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer first.Rollback()
		pid := testdb.BackendPID(t, first)
		boom := errors.New("boom")
		if _, err := b.store.DoTx(ctx, first, "s", "k", "fp", func(context.Context, *sql.Tx, *idempotency.Call) ([]byte, error) {
			return nil, boom
		}); !errors.Is(err, boom) {
			t.Fatalf("DoTx whose fn fails: %v, want fn's error", err)
		}
		other, err := b.db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Rollback()
		waited := make(chan error, 1)
		go func() {
			_, err := b.store.DoTx(ctx, other, "s", "k", "another fp", func(context.Context, *sql.Tx, *idempotency.Call) ([]byte, error) {
				return nil, errors.New("fn ran for a key another request holds")
			})
			waited <- err
		}()
		waitReaperDoneOrBlockedBy(t, ctx, b.db, pid, waited)
		if err := first.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-waited; !errors.Is(err, racefree.ErrMismatch) {
			t.Fatalf("another fingerprint, once the first transaction committed: %v, want ErrMismatch", err)
		}
		if err := other.Commit(); err != nil {
			t.Fatal(err)
		}
		res, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
			return []byte("retried"), nil
		})
		if err != nil || res.Replayed || string(res.Response) != "retried" {
			t.Fatalf("the original request's retry right after the mismatch: %+v, %v; want it to run at once", res, err)
		}
	})
}

// TestOutsideEdgesReapBatchZeroIsTheDefault: Reap with batch 0 takes the
// default of 1000 rows a statement: it deletes every expired record and
// recovery point and returns, well within a bound that a Reap spinning on
// empty batches of no rows would run into.
func TestOutsideEdgesReapBatchZeroIsTheDefault(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Retention: time.Hour}, func(t *testing.T, b bundle) {
		for _, key := range []string{"k1", "k2", "k3"} {
			_, err := b.store.Do(context.Background(), "s", key, "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
				v, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_" + key, nil })
				return []byte(v), err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		b.clock.Advance(time.Hour)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if n, err := b.store.Reap(ctx, 0); err != nil || n != 6 {
			t.Fatalf("Reap with batch 0: %d, %v; want 6 (3 records, 3 recovery points)", n, err)
		}
	})
}

// TestOutsideEdgesAStepSavedAgainAtItsExpiryIsKept: a recovery point that
// expired at the exact millisecond is run again and saved again (the
// first value is replaced only once it expired, and at its expiry it
// has), so the next retry resumes the new value instead of running the
// side effect a third time; and each step of a run is its own: a run's
// second step never resumes its first step's value.
func TestOutsideEdgesAStepSavedAgainAtItsExpiryIsKept(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Retention: time.Hour}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		boom := errors.New("the provider is down")
		var charges, shipments atomic.Int64
		type outcome struct {
			charge, shipment string
			resumed          int
		}
		run := func() (got outcome) {
			t.Helper()
			_, err := b.store.Do(ctx, "s", "k", "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
				var err error
				if got.charge, err = call.Step(ctx, "charge", func(context.Context) (string, error) {
					return fmt.Sprint("ch_", charges.Add(1)), nil
				}); err != nil {
					return nil, err
				}
				if got.shipment, err = call.Step(ctx, "ship", func(context.Context) (string, error) {
					return fmt.Sprint("sh_", shipments.Add(1)), nil
				}); err != nil {
					return nil, err
				}
				got.resumed = call.ResumedSteps
				return nil, boom // released: the retry runs again
			})
			if !errors.Is(err, boom) {
				t.Fatalf("run: %v, want fn's own error", err)
			}
			return got
		}
		if got := run(); got != (outcome{"ch_1", "sh_1", 0}) {
			t.Fatalf("first run: %+v, want ch_1 and sh_1, run afresh", got)
		}
		b.clock.Advance(time.Hour)
		if got := run(); got != (outcome{"ch_2", "sh_2", 0}) {
			t.Fatalf("at the steps' expiry: %+v, want both steps run again", got)
		}
		b.clock.Advance(time.Hour - time.Millisecond)
		if got := run(); got != (outcome{"ch_2", "sh_2", 2}) {
			t.Fatalf("1 ms before the second values expire: %+v, want both resumed", got)
		}
		if charges.Load() != 2 || shipments.Load() != 2 {
			t.Fatalf("%d charges, %d shipments; want 2 of each", charges.Load(), shipments.Load())
		}
	})
}
