package heartbeat_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/heartbeat"
)

var errTransient = errors.New("transient")

// lease is a lease as a database keeps it: a renewal that arrives before
// its expiry extends it by ttl from the renewal's arrival; one that
// arrives at or after its expiry is refused (errRefused), as the
// database refuses a lapsed claim. The first failing calls of renew
// fail with errTransient and change nothing, as a database that cannot
// be reached.
type lease struct {
	ttl time.Duration

	mu       sync.Mutex
	expiry   time.Time
	failing  int // calls still to fail with errTransient
	renewals int // renewals that succeeded
}

func newLease(ttl time.Duration, failing int) *lease {
	return &lease{ttl: ttl, expiry: time.Now().Add(ttl), failing: failing}
}

func (l *lease) renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.failing > 0 {
		l.failing--
		return errTransient
	}
	now := time.Now()
	if !now.Before(l.expiry) {
		return errRefused
	}
	l.expiry = now.Add(l.ttl)
	l.renewals++
	return nil
}

func (l *lease) succeeded() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewals
}

// keepsAlive waits until lease has had n successful renewals while kept
// stays alive.
func keepsAlive(t *testing.T, kept context.Context, l *lease, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for l.succeeded() < n {
		select {
		case <-kept.Done():
			t.Fatalf("kept context ended after %d successful renewals, want it alive through %d: %v", l.succeeded(), n, context.Cause(kept))
		case <-deadline:
			t.Fatalf("%d successful renewals in 10s, want %d", l.succeeded(), n)
		case <-time.After(l.ttl / 20):
		}
	}
}

// TestEdgesRenewalsArriveWithinTheTTL holds the renewal interval's edge:
// each renewal must reach the database before the lease it renews
// lapses, so that no other holder can take the key in between. A lease
// that refuses a renewal arriving at or after its expiry is kept through
// several TTLs.
func TestEdgesRenewalsArriveWithinTheTTL(t *testing.T) {
	t.Parallel()
	// Long enough that only a stall of most of a second, not a loaded
	// machine's scheduling, makes a renewal sent on time arrive late.
	const ttl = 1500 * time.Millisecond
	l := newLease(ttl, 0)
	kept, stop := heartbeat.Keep(context.Background(), ttl, l.renew, isRefused)
	defer stop()
	keepsAlive(t, kept, l, 6)
}

// TestEdgesFailedRenewalsAreRetriedWithinTheTTL holds the retry
// interval's edge: a renewal that failed for a reason that may pass is
// tried again every tenth of the TTL, so a database unreachable for
// three tries in a row and back well before the TTL ends finds the
// lease still kept, renewed by the fourth try.
func TestEdgesFailedRenewalsAreRetriedWithinTheTTL(t *testing.T) {
	t.Parallel()
	// The four tries end 0.6 of the TTL in (a third, then three tenths),
	// leaving 0.4 of it (600 ms) for a loaded machine's delays; tries a
	// third of the TTL apart would end after it.
	const ttl = 1500 * time.Millisecond
	l := newLease(ttl, 3)
	kept, stop := heartbeat.Keep(context.Background(), ttl, l.renew, isRefused)
	defer stop()
	keepsAlive(t, kept, l, 3)
}

// TestEdgesEachRenewalEndsByTheLeasesDeadline holds where the lease's
// deadline is counted from: a renewal that succeeds extends the lease
// from when it was sent (the database's expiry can be no later), not
// from its reply, however long the reply took; and every renewal's
// context ends at that deadline, not a TTL after the renewal itself was
// sent, so a renewal that fails or hangs cannot keep the context alive
// past the lease.
func TestEdgesEachRenewalEndsByTheLeasesDeadline(t *testing.T) {
	t.Parallel()
	const ttl = 600 * time.Millisecond
	type call struct{ start, deadline time.Time }
	var (
		mu    sync.Mutex
		calls []call
	)
	renew := func(ctx context.Context) error {
		start := time.Now()
		deadline, ok := ctx.Deadline()
		if !ok {
			t.Error("a renewal's context has no deadline")
		}
		mu.Lock()
		calls = append(calls, call{start, deadline})
		first := len(calls) == 1
		mu.Unlock()
		if !first {
			return errTransient
		}
		// The first renewal succeeds, slowly: its reply takes a
		// quarter of the TTL.
		select {
		case <-time.After(ttl / 4):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	kept, stop := heartbeat.Keep(context.Background(), ttl, renew, isRefused)
	after := time.Now()
	defer stop()
	waitDone(t, kept)
	if got := context.Cause(kept); !errors.Is(got, heartbeat.ErrLapsed) {
		t.Fatalf("cause = %v, want ErrLapsed", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) < 2 {
		t.Fatalf("%d renewals, want at least 2", len(calls))
	}
	if limit := after.Add(ttl); calls[0].deadline.After(limit) {
		t.Errorf("the first renewal's context ends %v after the TTL since Keep", calls[0].deadline.Sub(limit))
	}
	limit := calls[0].start.Add(ttl)
	for i, c := range calls[1:] {
		if c.deadline.After(limit) {
			t.Errorf("renewal %d's context ends %v after the TTL since the last successful renewal was sent", i+2, c.deadline.Sub(limit))
		}
	}
}

// TestEdgesALapseIsNoticedAtTheDeadline holds the last retry's edge: a
// renewal that fails shortly before the lease's deadline is tried again
// at the deadline, not a whole retry interval later, so the kept context
// ends when the lease lapses rather than a tenth of the TTL after.
func TestEdgesALapseIsNoticedAtTheDeadline(t *testing.T) {
	t.Parallel()
	// The check allows a fortieth of the TTL (200 ms) for a loaded
	// machine's delays; a retry a whole interval late is 400 ms late.
	const ttl = 8 * time.Second
	var deadline atomic.Pointer[time.Time]
	renew := func(ctx context.Context) error {
		dl, _ := ctx.Deadline()
		if deadline.CompareAndSwap(nil, &dl) {
			// The first renewal fails a twentieth of the TTL
			// before the deadline, half a retry interval.
			select {
			case <-time.After(time.Until(dl) - ttl/20):
			case <-ctx.Done():
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		return errTransient
	}
	kept, stop := heartbeat.Keep(context.Background(), ttl, renew, isRefused)
	defer stop()
	select {
	case <-kept.Done():
	case <-time.After(2 * ttl):
		t.Fatalf("kept context not cancelled within %v", 2*ttl)
	}
	ended := time.Now()
	if got := context.Cause(kept); !errors.Is(got, heartbeat.ErrLapsed) {
		t.Fatalf("cause = %v, want ErrLapsed", got)
	}
	if late := ended.Sub(*deadline.Load()); late > ttl/40 {
		t.Errorf("kept context ended %v after the lease's deadline, want at most %v", late, ttl/40)
	}
}

// TestEdgesStopWaitsForARenewalInFlight holds stop's edge: it returns
// only once the heartbeat ended, a renewal in flight included, so that
// no renewal runs after the holder stopped (and then, say, released the
// lease).
func TestEdgesStopWaitsForARenewalInFlight(t *testing.T) {
	t.Parallel()
	const ttl = 300 * time.Millisecond
	entered := make(chan struct{})
	var once sync.Once
	var running atomic.Int64
	renew := func(ctx context.Context) error {
		running.Add(1)
		defer running.Add(-1)
		once.Do(func() { close(entered) })
		<-ctx.Done()
		// A renewal takes a moment to give up once cancelled, as a
		// driver does to close its connection.
		time.Sleep(ttl / 3)
		return ctx.Err()
	}
	_, stop := heartbeat.Keep(context.Background(), ttl, renew, isRefused)
	<-entered
	stop()
	if n := running.Load(); n != 0 {
		t.Fatalf("stop returned while %d renewal(s) still ran", n)
	}
}

// TestEdgesStopCancelsTheRenewalInFlight: a renewal's context is the kept
// context's, so stop cancels a renewal in flight (its context ends with
// context.Canceled at once, not with context.DeadlineExceeded at the
// lease's deadline) and stop returns without waiting for the deadline.
func TestEdgesStopCancelsTheRenewalInFlight(t *testing.T) {
	t.Parallel()
	const ttl = 1500 * time.Millisecond // the first renewal at 500ms, its deadline 1s later
	entered := make(chan struct{})
	ended := make(chan error, 1)
	var once sync.Once
	renew := func(ctx context.Context) error {
		once.Do(func() { close(entered) })
		<-ctx.Done()
		select {
		case ended <- ctx.Err():
		default:
		}
		return ctx.Err()
	}
	_, stop := heartbeat.Keep(context.Background(), ttl, renew, isRefused)
	<-entered
	stop()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the renewal in flight ended with %v; want context.Canceled by stop, not the lease's deadline", err)
	}
}

// TestEdgesTheKeptContextEndsWithTheCallers: the kept context is derived
// from the caller's: cancelling the caller's context ends it, with the
// caller's cause.
func TestEdgesTheKeptContextEndsWithTheCallers(t *testing.T) {
	t.Parallel()
	const ttl = 150 * time.Millisecond
	l := newLease(ttl, 0)
	parent, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	kept, stop := heartbeat.Keep(parent, ttl, l.renew, isRefused)
	defer stop()
	keepsAlive(t, kept, l, 2)
	gone := errors.New("the caller is done")
	cancel(gone)
	waitDone(t, kept)
	if got := context.Cause(kept); !errors.Is(got, gone) {
		t.Fatalf("cause = %v; want the caller's cause", got)
	}
}
