package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
)

// fixedBackoff makes the retry delay predictable: n seconds after the
// n-th failed attempt.
func fixedBackoff(n int) time.Duration { return time.Duration(n) * time.Second }

// appTable creates a table of the application's, written by OnExhausted
// hooks in the transaction that kills the message.
func appTable(t *testing.T, db *racefree.DB) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), `CREATE TABLE app_compensations (message_id BIGINT NOT NULL, cause TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

func compensations(t *testing.T, db *racefree.DB) (n int) {
	t.Helper()
	if err := db.QueryRowContext(context.Background(), `SELECT count(*) FROM app_compensations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func compensate(ctx context.Context, tx *sql.Tx, d *outbox.Delivery, cause error) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO app_compensations (message_id, cause) VALUES ($1, $2)`, d.ID, cause.Error())
	return err
}

// TestFailuresAreClassified: transient by default, permanent only when
// marked or an HTTP 4xx other than 408 and 429; RetryAfter (and an HTTP
// answer's Retry-After) sets the delay exactly.
func TestFailuresAreClassified(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		appTable(t, db)
		o := newOutbox(t, db, &outbox.Options{Backoff: fixedBackoff, OnExhausted: compensate})
		for _, c := range []struct {
			name  string
			err   error
			dead  bool
			delay time.Duration
		}{
			{"plain", errors.New("connection reset"), false, time.Second},
			{"deadline", context.DeadlineExceeded, false, time.Second},
			{"permanent", outbox.Permanent(errors.New("rejected")), true, 0},
			{"wrapped permanent", fmt.Errorf("send: %w", outbox.Permanent(errors.New("rejected"))), true, 0},
			{"retry after", outbox.RetryAfter(7*time.Second, errors.New("busy")), false, 7 * time.Second},
			{"HTTP 400", &outbox.HTTPError{Status: http.StatusBadRequest}, true, 0},
			{"HTTP 404", &outbox.HTTPError{Status: http.StatusNotFound}, true, 0},
			{"HTTP 408", &outbox.HTTPError{Status: http.StatusRequestTimeout}, false, time.Second},
			{"HTTP 429", &outbox.HTTPError{Status: http.StatusTooManyRequests, RetryAfter: 3 * time.Second}, false, 3 * time.Second},
			{"HTTP 500", &outbox.HTTPError{Status: http.StatusInternalServerError}, false, time.Second},
			{"HTTP 503 Retry-After", &outbox.HTTPError{Status: http.StatusServiceUnavailable, RetryAfter: 2 * time.Second}, false, 2 * time.Second},
		} {
			id := enqueue(t, ctx, o, db, outbox.Message{Topic: c.name})
			before := compensations(t, db)
			now := clock.Now()
			d := claim(t, ctx, o, "w", 1, time.Minute)[0]
			out, err := o.Fail(ctx, d, c.err)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			r := get(t, ctx, o, id)
			if c.dead {
				if !out.Dead || !out.Permanent || r.State != outbox.Dead || r.LeasedBy != "" || compensations(t, db) != before+1 {
					t.Errorf("%s: outcome %+v, record %+v, want dead at once", c.name, out, r)
				}
				continue
			}
			if out.Dead || out.Permanent || r.State != outbox.Ready || !r.AvailableAt.Equal(now.Add(c.delay)) || !out.RetryAt.Equal(r.AvailableAt) {
				t.Errorf("%s: outcome %+v, record %s due %s; want ready in %s", c.name, out, r.State, r.AvailableAt, c.delay)
			}
			if r.LastError != c.err.Error() || len(r.History) != 1 || r.History[0].Outcome != "retry" || r.History[0].Error != c.err.Error() {
				t.Errorf("%s: last error %q, history %+v", c.name, r.LastError, r.History)
			}
			if _, err := o.Discard(ctx, db, outbox.Filter{IDs: []int64{id}}); err != nil { // not dead: stays
				t.Fatal(err)
			}
			clock.Advance(c.delay)
			if ds := claim(t, ctx, o, "w", 1, time.Minute); len(ds) != 1 || ds[0].ID != id || ds[0].Attempt != 2 {
				t.Fatalf("%s: not due again after %s: %v", c.name, c.delay, ids(ds))
			} else if err := o.Complete(ctx, db, ds[0]); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestTheLastAttemptDiesAtOnce: a failure of the last attempt makes the
// message dead in the statement that records it, its lease released at
// once (not when it would have lapsed), and OnExhausted runs in that
// transaction.
func TestTheLastAttemptDiesAtOnce(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		appTable(t, db)
		o := newOutbox(t, db, &outbox.Options{Backoff: fixedBackoff, OnExhausted: compensate})
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", MaxAttempts: 2})
		d := claim(t, ctx, o, "w", 1, time.Hour)[0]
		if out, err := o.Fail(ctx, d, errors.New("first")); err != nil || out.Dead {
			t.Fatalf("first failure: %+v, %v", out, err)
		}
		clock.Advance(time.Second)
		d = claim(t, ctx, o, "w", 1, time.Hour)[0]
		if d.Attempt != 2 {
			t.Fatalf("attempt %d", d.Attempt)
		}
		out, err := o.Fail(ctx, d, errors.New("second"))
		if err != nil || !out.Dead || out.Permanent {
			t.Fatalf("last failure: %+v, %v; want dead, not permanent", out, err)
		}
		r := get(t, ctx, o, id)
		if r.State != outbox.Dead || r.LeasedBy != "" || !r.AvailableAt.Equal(clock.Now()) || r.LastError != "second" {
			t.Fatalf("after the last attempt: %+v; want dead now, lease released", r)
		}
		if n := compensations(t, db); n != 1 {
			t.Fatalf("OnExhausted ran %d times, want once", n)
		}
		dead, err := o.Dead(ctx, db, outbox.Filter{}, 0, 10)
		if err != nil || len(dead) != 1 || dead[0].ID != id {
			t.Fatalf("dead letters: %v, %v", dead, err)
		}
		s, err := o.Stats(ctx, db)
		if err != nil || s.Dead != 1 || s.Leased != 0 || s.Ready != 0 {
			t.Fatalf("stats %+v, %v", s, err)
		}
		clock.Advance(2 * time.Hour)
		if ds := claim(t, ctx, o, "w", 1, time.Hour); len(ds) != 0 {
			t.Fatalf("a dead message was claimed")
		}
	})
}

var errCompensationDown = errors.New("compensation service down")

// TestOnExhaustedRunsInTheDyingTransaction: when the hook fails, nothing
// of that transaction stays (neither the hook's writes nor the death);
// the message dies again, hook and all, once due.
func TestOnExhaustedRunsInTheDyingTransaction(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		appTable(t, db)
		var fail atomic.Bool
		fail.Store(true)
		o := newOutbox(t, db, &outbox.Options{Backoff: fixedBackoff, OnExhausted: func(ctx context.Context, tx *sql.Tx, d *outbox.Delivery, cause error) error {
			if err := compensate(ctx, tx, d, cause); err != nil {
				return err
			}
			if tenant.From(ctx) != d.Tenant {
				return fmt.Errorf("the hook's context names %q", tenant.From(ctx))
			}
			if fail.Load() {
				return errCompensationDown
			}
			return nil
		}})
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", MaxAttempts: 1})
		d := claim(t, ctx, o, "w", 1, time.Hour)[0]
		if _, err := o.Fail(ctx, d, errors.New("boom")); !errors.Is(err, errCompensationDown) || err.Error() != "outbox fail: OnExhausted: compensation service down" {
			t.Fatalf("Fail with a failing hook: %v, want the hook's error alone (the message was released)", err)
		}
		r := get(t, ctx, o, id)
		if r.State != outbox.Ready || compensations(t, db) != 0 || len(r.History) != 0 || !r.AvailableAt.Equal(t0.Add(time.Second)) {
			t.Fatalf("after a failing hook: %+v, %d compensations; want ready in 1s, nothing written", r, compensations(t, db))
		}
		fail.Store(false)
		clock.Advance(time.Second)
		d = claim(t, ctx, o, "w", 1, time.Hour)[0]
		if d.Attempt != 2 || d.Attempt <= d.MaxAttempts {
			t.Fatalf("attempt %d of %d", d.Attempt, d.MaxAttempts)
		}
		out, err := o.Fail(ctx, d, outbox.ErrAttemptsExhausted)
		if err != nil || !out.Dead {
			t.Fatalf("%+v, %v", out, err)
		}
		if r := get(t, ctx, o, id); r.State != outbox.Dead || compensations(t, db) != 1 {
			t.Fatalf("%+v, %d compensations", r, compensations(t, db))
		}
	})
}

// TestALapsedLastAttemptDies: a message whose last lease lapsed (its
// worker died) is not handled again: the relay kills it, running
// OnExhausted, without calling the handler.
func TestALapsedLastAttemptDies(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		appTable(t, db)
		o := newOutbox(t, db, &outbox.Options{OnExhausted: compensate})
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t", MaxAttempts: 1})
		claim(t, ctx, o, "crashed", 1, time.Second)
		clock.Advance(time.Second)
		var called atomic.Int32
		r, err := o.NewRelay(func(context.Context, *outbox.Delivery) error { called.Add(1); return nil }, &outbox.RelayOptions{PollInterval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		// Wait for it to settle either way: a handler run again would
		// deliver it instead.
		waitFor(t, "the message to settle", func() bool { st := get(t, ctx, o, id).State; return st == outbox.Dead || st == outbox.Delivered })
		stop()
		rec := get(t, ctx, o, id)
		if called.Load() != 0 || compensations(t, db) != 1 || !strings.Contains(rec.LastError, "no attempt left") || len(rec.History) != 2 ||
			rec.History[0].Outcome != "lapsed" || rec.History[1].Outcome != "dead" {
			t.Fatalf("handler called %d times, %d compensations, record %+v", called.Load(), compensations(t, db), rec)
		}
	})
}

// TestHistoryIsBounded keeps the latest Options.History failures.
func TestHistoryIsBounded(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{Backoff: fixedBackoff, History: 3})
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		for i := 1; i <= 5; i++ {
			d := claim(t, ctx, o, "w", 1, time.Hour)[0]
			if _, err := o.Fail(ctx, d, fmt.Errorf("failure %d", i)); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Hour)
		}
		r := get(t, ctx, o, id)
		if len(r.History) != 3 {
			t.Fatalf("%d entries kept, want 3: %+v", len(r.History), r.History)
		}
		for i, a := range r.History {
			if a.Attempt != i+3 || a.Error != fmt.Sprintf("failure %d", i+3) {
				t.Errorf("entry %d: %+v", i, a)
			}
		}
	})
}

// TestBackoffIsExponentialWithJitter: the n-th retry waits a random point
// of [d/2, d], d doubling from 1s up to 1h.
func TestBackoffIsExponentialWithJitter(t *testing.T) {
	for n := 1; n <= 30; n++ {
		d := min(time.Second<<(n-1), time.Hour)
		if n > 20 {
			d = time.Hour
		}
		seen := map[time.Duration]bool{}
		for range 50 {
			b := outbox.Backoff(n)
			if b < d/2 || b > d {
				t.Fatalf("Backoff(%d) = %s, want within [%s, %s]", n, b, d/2, d)
			}
			seen[b] = true
		}
		if len(seen) < 10 {
			t.Fatalf("Backoff(%d) took %d values in 50 draws: no jitter", n, len(seen))
		}
	}
}

// waitFor polls cond (a state of the database or of the test) until it
// holds, or fails the test after a minute.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
