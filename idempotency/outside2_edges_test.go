package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree/idempotency"
)

// The tests of this file try, from outside, a third round of edges: each
// part of the middleware's fingerprint (what must make a 422 and what must
// not), each stored field of a replayed answer, the time a duplicate is
// told to wait, the retention of a slow request's answer, a handler whose
// lease is lost, and a key at its limit in the forms a client may send.

// TestOutside2EdgesFingerprintParts: with one scope for every route, the
// fingerprint alone tells requests apart. The same request retried from
// another connection (another client address and port) and with other
// headers is a replay, not a 422; two bodies that agree on their first
// KiB and differ past it are two requests, a 422, and the handler ran
// once.
func TestOutside2EdgesFingerprintParts(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs, status atomic.Int64
		status.Store(http.StatusCreated)
		h := b.store.Middleware(idempotency.MiddlewareOptions{Scope: func(*http.Request) string { return "one" }})(counting(&runs, &status))
		body := strings.Repeat("a", 1024)
		first := post("/v1/pay", `"k"`, body+"1")
		first.RemoteAddr = "192.0.2.1:40000"
		if rec := do(h, first); rec.Code != http.StatusCreated {
			t.Fatalf("first: %d, want 201", rec.Code)
		}
		retry := post("/v1/pay", `"k"`, body+"1")
		retry.RemoteAddr = "198.51.100.7:51234" // a new connection, from another address
		retry.Header.Set("User-Agent", "retrier/2")
		retry.Header.Set("X-Request-Id", "another")
		if rec := do(h, retry); rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") != "true" || rec.Body.String() != "run 1" {
			t.Errorf("the same request from another connection: %d %q, replayed %q; want the replay of run 1",
				rec.Code, rec.Body.String(), rec.Header().Get("Idempotent-Replayed"))
		}
		if rec := do(h, post("/v1/pay", `"k"`, body+"2")); rec.Code != http.StatusUnprocessableEntity {
			t.Errorf("a body that differs in its 1025th byte, with the same key: %d %q, want 422", rec.Code, rec.Body.String())
		}
		if got := runs.Load(); got != 1 {
			t.Errorf("the handler ran %d times, want once", got)
		}
	})
}

// TestOutside2EdgesAnswerKeepsEveryValue: a response with two values of a
// header (Link) reaches the client with both, first answer and replay,
// when MiddlewareOptions.Headers names it; the replay keeps its status,
// its body, each named header with all its values, and no other header.
func TestOutside2EdgesAnswerKeepsEveryValue(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs atomic.Int64
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.Header().Add("Link", `</v1/orders/1>; rel="self"`)
			w.Header().Add("Link", `</v1/customers/9>; rel="customer"`)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Trace", "t1")
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"id":1}`)
		})
		h := b.store.Middleware(idempotency.MiddlewareOptions{Headers: []string{"Link", "Content-Type"}})(next)
		want := []string{`</v1/orders/1>; rel="self"`, `</v1/customers/9>; rel="customer"`}
		for i, what := range []string{"first answer", "replay"} {
			rec := do(h, post("/v1/orders", `"k"`, "{}"))
			if rec.Code != http.StatusAccepted || rec.Body.String() != `{"id":1}` || rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("%s: %d %q %q; want 202 with the handler's body and Content-Type", what, rec.Code, rec.Body.String(), rec.Header().Get("Content-Type"))
			}
			if got := rec.Header().Values("Link"); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s's Link values: %q, want both of the handler's %q", what, got, want)
			}
			if replayed := rec.Header().Get("Idempotent-Replayed") == "true"; replayed != (i == 1) {
				t.Errorf("%s: Idempotent-Replayed %v", what, replayed)
			}
			if got, wantTrace := rec.Header().Get("X-Trace"), map[int]string{0: "t1", 1: ""}[i]; got != wantTrace {
				t.Errorf("%s's X-Trace: %q, want %q", what, got, wantTrace)
			}
		}
		if got := runs.Load(); got != 1 {
			t.Errorf("the handler ran %d times, want once", got)
		}
	})
}

// TestOutside2EdgesRetryAfterIsWhatIsLeftOfTheLease: a duplicate that
// comes nine minutes into a ten-minute lease is told to retry after the
// minute left (the lease lapses then), not after a whole lease; through
// the middleware that is a 409 with Retry-After: 60. The heartbeat ticks
// every 200 s of real time, far past the test, so the lease is the one
// the first request took.
func TestOutside2EdgesRetryAfterIsWhatIsLeftOfTheLease(t *testing.T) {
	t.Parallel()
	const lease = 10 * time.Minute
	each(t, &idempotency.Options{Lease: lease}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		finish := stalledDo(b, "s", "k", "fp", []byte("r"))
		b.clock.Advance(9 * time.Minute)
		var ip *idempotency.InProgressError
		if _, err := b.store.Do(ctx, "s", "k", "fp", nil); !errors.As(err, &ip) || ip.RetryAfter != time.Minute {
			t.Errorf("a duplicate 9 min into a 10 min lease: %v, want an InProgressError with RetryAfter 1m", err)
		}
		if err := finish(); err != nil {
			t.Fatal(err)
		}

		started, release := make(chan struct{}), make(chan struct{})
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-First") != "" {
				close(started)
				<-release
			}
			w.WriteHeader(http.StatusCreated)
		}))
		first := post("/v1/orders", `"m"`, "{}")
		first.Header.Set("X-First", "1")
		done := make(chan int, 1)
		go func() { done <- do(h, first).Code }()
		<-started
		b.clock.Advance(9 * time.Minute)
		if rec := do(h, post("/v1/orders", `"m"`, "{}")); rec.Code != http.StatusConflict || rec.Header().Get("Retry-After") != "60" {
			t.Errorf("a duplicate 9 min into the lease: %d, Retry-After %q; want 409, 60", rec.Code, rec.Header().Get("Retry-After"))
		}
		close(release)
		if code := <-done; code != http.StatusCreated {
			t.Fatalf("the first request: %d, want 201", code)
		}
	})
}

// TestOutside2EdgesRetentionCountsFromTheAnswer: a request that took 30
// minutes keeps its answer for the retention after it completed, not
// after it began: 1 ms before that it is replayed and Reap leaves it; at
// that millisecond a retry runs afresh.
func TestOutside2EdgesRetentionCountsFromTheAnswer(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Retention: time.Hour, Lease: 2 * time.Hour}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		var runs atomic.Int64
		fn := func(context.Context, *idempotency.Call) ([]byte, error) {
			if runs.Add(1) == 1 {
				b.clock.Advance(30 * time.Minute) // a slow request
			}
			return []byte(fmt.Sprint("run ", runs.Load())), nil
		}
		if _, err := b.store.Do(ctx, "s", "k", "fp", fn); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Hour - time.Millisecond) // 1 ms before the retention after the answer ends
		if n, err := b.store.Reap(ctx, 10); err != nil || n != 0 {
			t.Fatalf("Reap 1 ms before the answer's retention ends: %d, %v; want 0", n, err)
		}
		res, err := b.store.Do(ctx, "s", "k", "fp", fn)
		if err != nil || !res.Replayed || string(res.Response) != "run 1" {
			t.Fatalf("1 ms before the answer's retention ends: %+v, %v; want the replay of run 1", res, err)
		}
		b.clock.Advance(time.Millisecond)
		res, err = b.store.Do(ctx, "s", "k", "fp", fn)
		if err != nil || res.Replayed || string(res.Response) != "run 2" {
			t.Fatalf("at the end of the answer's retention: %+v, %v; want a fresh run", res, err)
		}
	})
}

// TestOutside2EdgesAHandlerWhoseLeaseIsLostIsCancelled: behind the
// middleware, a handler whose lease lapsed (the manual clock moved past
// it; the heartbeat, ticking every 10 ms of real time, finds it lost) has
// its request's context cancelled, and the client gets the 503 that
// tells it to retry with the same key. The handler waits on its context
// alone; the 30 s guards only end a build whose heartbeat never cancels
// it (or never ends), which fails here instead of hanging the run.
func TestOutside2EdgesAHandlerWhoseLeaseIsLostIsCancelled(t *testing.T) {
	t.Parallel()
	const lease = 30 * time.Millisecond
	each(t, &idempotency.Options{Lease: lease}, func(t *testing.T, b bundle) {
		started, cancelled, giveUp := make(chan struct{}), make(chan struct{}), make(chan struct{})
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			select {
			case <-r.Context().Done():
				close(cancelled)
			case <-giveUp:
			}
			w.WriteHeader(http.StatusCreated)
		}))
		done := make(chan int, 1)
		go func() { done <- do(h, post("/v1/orders", `"k"`, "{}")).Code }()
		<-started
		b.clock.Advance(lease) // the lease lapses on the manual clock
		select {
		case <-cancelled:
		case <-time.After(30 * time.Second): // deadlock guard
			t.Error("the handler's context was not cancelled when its lease was lost")
		}
		close(giveUp)
		select {
		case code := <-done:
			if code != http.StatusServiceUnavailable {
				t.Errorf("the answer of a run whose lease was lost: %d, want 503", code)
			}
		case <-time.After(30 * time.Second): // deadlock guard
			t.Fatal("the request did not end once its handler returned")
		}
	})
}

// TestOutside2EdgesKeyAtItsLimitAsSent: a quoted key is measured after
// its escapes and without its parameters: MaxKeyBytes characters with an
// escaped quote in them, or followed by a parameter, are taken; one more
// character is a 400.
func TestOutside2EdgesKeyAtItsLimitAsSent(t *testing.T) {
	t.Parallel()
	n := idempotency.MaxKeyBytes
	for _, tc := range []struct {
		header, key string
	}{
		{`"` + strings.Repeat("a", n-1) + `\""`, strings.Repeat("a", n-1) + `"`},
		{`"` + strings.Repeat("a", n-1) + `\\"`, strings.Repeat("a", n-1) + `\`},
		{`"` + strings.Repeat("a", n) + `";p=1`, strings.Repeat("a", n)},
		{` "` + strings.Repeat("a", n) + `" `, strings.Repeat("a", n)},
	} {
		if key, err := idempotency.ParseKey([]string{tc.header}); err != nil || key != tc.key {
			t.Errorf("ParseKey(%.20q… of %d bytes): %q, %v; want the key of %d bytes", tc.header, len(tc.header), key, err, len(tc.key))
		}
	}
	for _, header := range []string{`"` + strings.Repeat("a", n) + `\""`, `"` + strings.Repeat("a", n+1) + `";p=1`} {
		if _, err := idempotency.ParseKey([]string{header}); err == nil {
			t.Errorf("ParseKey of a key of %d characters: no error, want a 400", n+1)
		}
	}
}

// TestOutside2EdgesAFailedFirstAttempt: behind the middleware, a first
// attempt that answered 500 reaches the client as the handler wrote it
// and is not marked a replay; what it leaves is its request: a retry with
// another body is a 422, and the retry with the same body runs the
// handler again, answers fresh, and is the answer replayed after.
func TestOutside2EdgesAFailedFirstAttempt(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs, status atomic.Int64
		status.Store(http.StatusInternalServerError)
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(counting(&runs, &status))
		rec := do(h, post("/v1/orders", `"k"`, `{"n":1}`))
		if rec.Code != http.StatusInternalServerError || rec.Body.String() != "run 1" || rec.Header().Get("X-Not-Stored") != "1" || rec.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("the failed first attempt: %d %q, X-Not-Stored %q, Idempotent-Replayed %q; want the handler's 500, not a replay",
				rec.Code, rec.Body.String(), rec.Header().Get("X-Not-Stored"), rec.Header().Get("Idempotent-Replayed"))
		}
		status.Store(http.StatusCreated)
		if rec := do(h, post("/v1/orders", `"k"`, `{"n":2}`)); rec.Code != http.StatusUnprocessableEntity {
			t.Errorf("after the failed attempt, the key with another body: %d, want 422", rec.Code)
		}
		rec = do(h, post("/v1/orders", `"k"`, `{"n":1}`))
		if rec.Code != http.StatusCreated || rec.Body.String() != "run 2" || rec.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("the retry: %d %q, Idempotent-Replayed %q; want the handler's fresh 201", rec.Code, rec.Body.String(), rec.Header().Get("Idempotent-Replayed"))
		}
		rec = do(h, post("/v1/orders", `"k"`, `{"n":1}`))
		if rec.Code != http.StatusCreated || rec.Body.String() != "run 2" || rec.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the retry after: %d %q, Idempotent-Replayed %q; want the replay of run 2", rec.Code, rec.Body.String(), rec.Header().Get("Idempotent-Replayed"))
		}
	})
}

// TestOutside2EdgesTheLeaseOfAFailedAttemptIsReaped: a first attempt that
// failed ten minutes after it began leaves its record in progress, which
// expires a retention after it began, and its released lease, idle from
// the failure. Reap takes the record at its expiry and keeps the lease;
// a later Reap that finds no record left takes the lease at the
// millisecond it has been idle for the retention, not one before.
func TestOutside2EdgesTheLeaseOfAFailedAttemptIsReaped(t *testing.T) {
	t.Parallel()
	each(t, &idempotency.Options{Retention: time.Hour, Lease: 2 * time.Hour}, func(t *testing.T, b bundle) {
		ctx := context.Background()
		failed := errors.New("the payment provider refused")
		_, err := b.store.Do(ctx, "s", "k", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
			b.clock.Advance(10 * time.Minute)
			return nil, failed
		})
		if !errors.Is(err, failed) {
			t.Fatalf("the failed attempt: %v, want its error", err)
		}
		leases := func() int {
			t.Helper()
			var n int
			if err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_claims WHERE ns = 'idempotency'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		b.clock.Advance(50 * time.Minute) // the record's retention ends
		if n, err := b.store.Reap(ctx, 10); err != nil || n != 1 || leases() != 1 {
			t.Fatalf("Reap at the record's expiry: %d, %v, %d leases; want the record, the lease kept", n, err, leases())
		}
		b.clock.Advance(10*time.Minute - time.Millisecond)
		if n, err := b.store.Reap(ctx, 10); err != nil || n != 0 || leases() != 1 {
			t.Fatalf("Reap 1 ms before the lease's retention ends: %d, %v, %d leases; want nothing, the lease kept", n, err, leases())
		}
		b.clock.Advance(time.Millisecond)
		if n, err := b.store.Reap(ctx, 10); err != nil || n != 0 || leases() != 0 {
			t.Fatalf("Reap at the end of the lease's retention: %d, %v, %d leases; want no record and no lease left", n, err, leases())
		}
	})
}
