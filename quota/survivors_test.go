package quota_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
)

// The tests of this file kill the mutants gremlins left alive in quota
// (docs/contributing.md, "An independent mutation score"): each tries an
// edge no other test reached.

// TestEdgesConsumeAllOf64Requests: ConsumeAll takes 1 to 64 requests. At
// 64 it charges every one; at 65, and at none, it is an InputError that
// writes nothing.
func TestEdgesConsumeAllOf64Requests(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := setup(t, db)
		reqs := make([]quota.Request, 65)
		for i := range reqs {
			reqs[i] = quota.Request{Key: fmt.Sprintf("k%d", i), N: 1, Policy: window}
		}
		for _, rs := range [][]quota.Request{reqs, nil} {
			before := snapshot(t, db, "default")
			if _, err := l.ConsumeAll(ctx, db, rs); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("ConsumeAll of %d requests: %v, want ErrInvalidInput", len(rs), err)
			}
			if after := snapshot(t, db, "default"); after != before {
				t.Fatalf("ConsumeAll of %d requests wrote:\n%s", len(rs), after)
			}
		}
		if d, err := l.ConsumeAll(ctx, db, reqs[:64]); err != nil || !d.Allowed || d.Remaining != window.Rate-1 {
			t.Fatalf("ConsumeAll of 64 requests: %+v, %v; want allowed, %d remaining", d, err, window.Rate-1)
		}
		for i := range 64 {
			if _, used := row(t, db, reqs[i].Key, quota.FixedWindow); used != 1 {
				t.Fatalf("request %d of 64: used %d, want 1", i+1, used)
			}
		}
		if _, used := row(t, db, reqs[64].Key, quota.FixedWindow); used != -1 {
			t.Fatalf("the 65th request's key was charged (used %d)", used)
		}
	})
}

// TestEdgesConsumeAllLeavesNoSavepointInTheCallersTransaction: under the
// caller's transaction ConsumeAll works under a savepoint of its own, and
// ends it whatever the outcome: after an allowed call and after a denied
// one (rolled back to it, then released), the caller's transaction holds
// no savepoint of quota's (a ROLLBACK TO it is an error), and the
// caller's later writes are its own, not nested in a savepoint left open.
func TestEdgesConsumeAllLeavesNoSavepointInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		l := setup(t, db)
		for _, c := range []struct {
			name string
			n    int64
			want bool
		}{{"allowed", window.Rate, true}, {"denied", 1, false}} {
			tx, err := db.SQL().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.ConsumeAll(ctx, tx, []quota.Request{{Key: "sp", N: c.n, Policy: window}})
			if err != nil || d.Allowed != c.want {
				tx.Rollback()
				t.Fatalf("%s call: %+v, %v", c.name, d, err)
			}
			_, err = tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT racefree_quota")
			if err == nil {
				tx.Rollback()
				t.Fatalf("after the %s call, the caller's transaction still holds the savepoint racefree_quota", c.name)
			}
			tx.Rollback()
			if c.want {
				// The charge rolled back with the transaction: charge the
				// whole window on the pool, so that the next call is denied.
				if d := consume(t, l, db, "sp", c.n, window); !d.Allowed {
					t.Fatalf("the whole window on the pool: %+v", d)
				}
			}
		}
	})
}

// TestEdgesConsumeAllRemainingIsTheSmallest: the combined Decision of
// ConsumeAll has the smallest Remaining of its requests, whichever place
// holds it: a request that leaves 0 before one that leaves 4, and after.
func TestEdgesConsumeAllRemainingIsTheSmallest(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		l := setup(t, db)
		for i, reqs := range [][]quota.Request{
			{{Key: "empty-1", N: window.Rate, Policy: window}, {Key: "four-1", N: 1, Policy: window}},
			{{Key: "four-2", N: 1, Policy: window}, {Key: "empty-2", N: window.Rate, Policy: window}},
		} {
			if d, err := l.ConsumeAll(ctx, db, reqs); err != nil || !d.Allowed || d.Remaining != 0 {
				t.Fatalf("call %d: %+v, %v; want allowed with 0 remaining, the smaller of 0 and %d", i+1, d, err, window.Rate-1)
			}
		}
	})
}

// TestEdgesMiddlewareRefusesABadKeyFromItsKeyFunc: a KeyFunc that returns
// a key Consume would refuse (longer than MaxKeyBytes, a NUL byte, empty)
// is answered 400 invalid-input, as its error would be, charges nothing
// and does not reach next; a key of MaxKeyBytes is charged.
func TestEdgesMiddlewareRefusesABadKeyFromItsKeyFunc(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := setup(t, db)
		for _, c := range []struct {
			key  string
			code int
		}{
			{strings.Repeat("k", quota.MaxKeyBytes+1), http.StatusBadRequest},
			{"a\x00b", http.StatusBadRequest},
			{"", http.StatusBadRequest},
			{strings.Repeat("k", quota.MaxKeyBytes), http.StatusOK},
		} {
			mw, err := l.Middleware(db, gcra, func(*http.Request) (string, error) { return c.key, nil })
			if err != nil {
				t.Fatal(err)
			}
			served := false
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = true }))
			before := snapshot(t, db, "default")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
			if w.Code != c.code || served != (c.code == http.StatusOK) {
				t.Fatalf("a key of %d bytes: %d, next served %v; want %d", len(c.key), w.Code, served, c.code)
			}
			if c.code == http.StatusOK {
				if tat, _ := row(t, db, c.key, quota.GCRA); tat == -1 {
					t.Fatalf("a key of MaxKeyBytes: no counter")
				}
				continue
			}
			var body struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Type != "urn:racefree:problem:invalid-input" {
				t.Fatalf("a key of %d bytes: body %s (%v), want type invalid-input", len(c.key), w.Body.Bytes(), err)
			}
			if after := snapshot(t, db, "default"); after != before {
				t.Fatalf("a key of %d bytes was charged:\n%s", len(c.key), after)
			}
		}
	})
}

// TestEdgesCancelledOnTheRowLockByExecutor (PostgreSQL, where a statement
// that commits by itself may still commit after its caller gave up)
// cancels a charge while it waits for the row lock of a transaction that
// charged the same key, on each executor: on the pool, given as the
// *racefree.DB or as its *sql.DB, the statement commits by itself and its
// outcome is unknown (context.Canceled and racefree.ErrUnavailable); in
// the caller's transaction it commits only with it, so the caller gets
// context.Canceled alone.
func TestEdgesCancelledOnTheRowLockByExecutor(t *testing.T) {
	t.Parallel()
	_, cfg := manual(t0)
	// The combiner off: with it a charge waits inside its batch, which
	// TestACombinedChargeGivesUpAtItsWait tries.
	cfg.Combine = racefree.CombineOff
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		if db.Engine() != racefree.Postgres {
			t.Skip("PostgreSQL without the combiner: a statement on the pool that may commit after its caller gave up")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l := setup(t, db)
		holder, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Rollback() }()
		consume(t, l, holder, "k", 1, gcra)
		pid := testdb.BackendPID(t, holder)
		for _, c := range []struct {
			name    string
			exec    func() (racefree.Executor, func())
			unknown bool
		}{
			{"the *racefree.DB", func() (racefree.Executor, func()) { return db, func() {} }, true},
			{"its *sql.DB", func() (racefree.Executor, func()) { return db.SQL(), func() {} }, true},
			{"the caller's *sql.Tx", func() (racefree.Executor, func()) {
				tx, err := db.SQL().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				return tx, func() { _ = tx.Rollback() }
			}, false},
		} {
			exec, done := c.exec()
			waitCtx, stopWait := context.WithCancel(ctx)
			errc := make(chan error, 1)
			var d quota.Decision
			go func() {
				var err error
				d, err = l.Consume(waitCtx, exec, "k", 1, gcra)
				errc <- err
			}()
			if !testdb.BlockedBy(t, db, pid, nil) {
				t.Fatalf("%s: the charge did not wait for the holder's row lock", c.name)
			}
			stopWait()
			err := <-errc
			done()
			if !errors.Is(err, context.Canceled) || errors.Is(err, racefree.ErrUnavailable) != c.unknown || d.Allowed || d.Degraded {
				t.Fatalf("%s, cancelled on the row lock: %+v, %v; want context.Canceled, ErrUnavailable %v (an unknown outcome), no decision", c.name, d, err, c.unknown)
			}
			testdb.Unblocked(t, db, pid, 10*time.Second)
		}
	})
}

// TestEdgesWaitBoundsACallerWithALaterDeadline: Policy.Wait bounds a
// charge whose caller's context has a deadline of its own further off:
// with the counters held, a charge of a 200 ms Wait under a caller's
// deadline of 30 s gets the policy's degraded decision long before then
// (within 15 s, for a loaded machine), under FailClosed and FailOpen, on
// Consume and ConsumeAll.
func TestEdgesWaitBoundsACallerWithALaterDeadline(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := setup(t, db)
		consume(t, l, db, "k", 1, gcra)
		holdTheCounters(t, db)
		closed, open := gcra, gcra
		closed.Wait, open.Wait = 200*time.Millisecond, 200*time.Millisecond
		open.OnUnavailable = quota.FailOpen
		for _, p := range []quota.Policy{closed, open} {
			for _, all := range []bool{false, true} {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				start := time.Now()
				var (
					d   quota.Decision
					err error
				)
				if all {
					d, err = l.ConsumeAll(ctx, db, []quota.Request{{Key: "k", N: 1, Policy: p}})
				} else {
					d, err = l.Consume(ctx, db, "k", 1, p)
				}
				took := time.Since(start)
				cancel()
				wantErr := p.OnUnavailable == quota.FailClosed
				if !d.Degraded || d.Allowed == wantErr || errors.Is(err, racefree.ErrUnavailable) != wantErr {
					t.Fatalf("on unavailable %d (ConsumeAll %v), a caller's deadline of 30s: %+v, %v; want the degraded decision", p.OnUnavailable, all, d, err)
				}
				if took > 15*time.Second {
					t.Fatalf("on unavailable %d (ConsumeAll %v): a Wait of 200ms under a caller's deadline of 30s took %s", p.OnUnavailable, all, took)
				}
			}
		}
	})
}

// seesaw is a clock that, once armed, answers t and t + 1.5s in turn,
// starting with t, and counts how often it was read: a charge statement
// reads t and sees the counter full, and the read of the counter that
// follows a refusal reads t + 1.5s and sees room, every time.
type seesaw struct {
	mu    sync.Mutex
	at    time.Time
	armed bool
	reads int
}

func (c *seesaw) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.armed {
		return c.at
	}
	c.reads++
	if c.reads%2 == 0 {
		return c.at.Add(1500 * time.Millisecond)
	}
	return c.at
}

func (c *seesaw) arm(on bool) (reads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	reads, c.reads, c.armed = c.reads, 0, on
	return reads
}

// TestEdgesACounterThatKeepsMovingIsRetryable: where a refused charge
// reads its counter in a second statement (SQLite, alone and through the
// combiner), a counter that shows room at that read is charged again, at
// most twice more: a counter that keeps moving (here a clock that swings
// between a full counter and an empty one) is racefree.ErrRetryable after
// three charges and three reads, of each kind. Each read finds exactly
// room for the charge: a GCRA unit due at that very millisecond, a new
// fixed window's whole limit, a sliding window's previous 2 units
// weighted to 1 at half the window, next to 1 more. On PostgreSQL the
// charge statement returns the counter it refused on, and the refusal
// stands at one read of the clock.
func TestEdgesACounterThatKeepsMovingIsRetryable(t *testing.T) {
	t.Parallel()
	one := []quota.Policy{
		{Kind: quota.GCRA, Rate: 1, Per: time.Second, Burst: 1, Wait: 5 * time.Second},
		{Kind: quota.FixedWindow, Rate: 1, Per: time.Second, Wait: 5 * time.Second},
		{Kind: quota.SlidingWindow, Rate: 2, Per: time.Second, Wait: 5 * time.Second},
	}
	testdb.EachDSN(t, func(t *testing.T, d string) {
		for _, combine := range []bool{false, true} {
			clock := &seesaw{at: t0}
			db := testdb.Open(t, d, &racefree.Config{Clock: clock, Combine: policyOf(combine)})
			l := setup(t, db)
			ctx := context.Background()
			for _, p := range one {
				key := fmt.Sprintf("moving-%s-%v", p.Kind, combine)
				full := p.Burst
				if p.Kind != quota.GCRA {
					full = p.Rate
				}
				if d := consume(t, l, db, key, full, p); !d.Allowed || d.Remaining != 0 {
					t.Fatalf("%s (combine %v): the whole limit: %+v", p.Kind, combine, d)
				}
				clock.arm(true)
				d, err := l.Consume(ctx, db, key, 1, p)
				reads := clock.arm(false)
				if db.Engine() == racefree.Postgres {
					// Alone or combined (an array statement, or a sliding
					// window's own statement in the batch's pipeline), the
					// charge returns the counter it refused on.
					if err != nil || d.Allowed || d.RetryAfter <= 0 || reads != 1 {
						t.Fatalf("%s (combine %v): %+v, %v after %d reads of the clock; want refused at the first", p.Kind, combine, d, err, reads)
					}
					continue
				}
				if !errors.Is(err, racefree.ErrRetryable) || d.Allowed || d.Degraded || reads != 6 {
					t.Fatalf("%s (combine %v): %+v, %v after %d reads of the clock; want ErrRetryable after 3 charges and 3 reads", p.Kind, combine, d, err, reads)
				}
			}
		}
	})
}
