package outbox_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
)

// TestRelayHeartbeatsAndLosesLapsedLeases: while a handler runs, the relay
// keeps moving its lease on (a claim of another relay finds nothing past
// the first lease's expiry); once the lease lapses anyway (the database
// clock jumped past it between heartbeats), the next heartbeat cancels
// the handler's context with ErrLeaseLost, visibly.
func TestRelayHeartbeatsAndLosesLapsedLeases(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{Backoff: fixedBackoff})
		started := make(chan *outbox.Delivery, 1)
		cause := make(chan error, 1)
		r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
			select {
			case started <- d: // the first start; later ones are not watched
			default:
			}
			<-ctx.Done()
			select {
			case cause <- context.Cause(ctx):
			default:
			}
			return ctx.Err()
		}, &outbox.RelayOptions{Lease: 300 * time.Millisecond, PollInterval: 5 * time.Millisecond, ShutdownGrace: -1})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		d := <-started
		if d.ID != id {
			t.Fatalf("handling %d", d.ID)
		}
		// Move the clock within the lease and wait for a heartbeat to
		// carry the lease past the original expiry.
		clock.Advance(200 * time.Millisecond)
		waitFor(t, "a heartbeat", func() bool {
			return get(t, ctx, o, id).AvailableAt.Equal(clock.Now().Add(300 * time.Millisecond))
		})
		// The relay heartbeats a copy: the Delivery its handler holds,
		// which the handler may read while it runs, keeps its claim's
		// expiry (-race: nothing writes it).
		if want := t0.Add(300 * time.Millisecond); !d.LeaseExpiresAt.Equal(want) {
			t.Fatalf("the handler's delivery says its lease expires at %s, want its claim's %s: the heartbeat wrote the handler's Delivery", d.LeaseExpiresAt, want)
		}
		clock.Advance(200 * time.Millisecond) // past the first lease, within the renewed one
		if ds := claim(t, ctx, o, "other", 1, time.Second); len(ds) != 0 {
			t.Fatalf("another relay took a heartbeated lease")
		}
		// Jump past the lease: the next heartbeat finds it lapsed.
		clock.Advance(time.Hour)
		if c := <-cause; !errors.Is(c, outbox.ErrLeaseLost) {
			t.Fatalf("the handler's context ended with %v, want ErrLeaseLost", c)
		}
		// The first tenure ends: its failure recorded, or, if the relay's
		// next claim took the lapsed message first, its lapse.
		waitFor(t, "the first tenure in the history", func() bool {
			h := get(t, ctx, o, id).History
			return len(h) > 0 && h[0].Fence == 1 && (h[0].Outcome == "retry" || h[0].Outcome == "lapsed")
		})
		if s := r.Stats(); s.LeaseLost != 1 {
			t.Fatalf("relay stats %+v, want one lease lost", s)
		}
	})
}

// TestRelayStopsGracefully: once Run's context ends, running handlers get
// the grace period to finish and their successes are completed; handlers
// still running after it are cancelled (ErrRelayStopped) and their
// messages are due again at once, for another relay.
func TestRelayStopsGracefully(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		quick := enqueue(t, ctx, o, db, outbox.Message{Topic: "quick"})
		stuck := enqueue(t, ctx, o, db, outbox.Message{Topic: "stuck"})
		started := make(chan struct{}, 2)
		finish := make(chan struct{})
		r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
			started <- struct{}{}
			if d.Topic == "quick" {
				<-finish
				return nil
			}
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), outbox.ErrRelayStopped) {
				t.Errorf("the stuck handler's cause: %v", context.Cause(ctx))
			}
			return ctx.Err()
		}, &outbox.RelayOptions{PollInterval: 5 * time.Millisecond, ShutdownGrace: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		<-started
		<-started
		cancel()
		close(finish)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if r := get(t, ctx, o, quick); r.State != outbox.Delivered {
			t.Fatalf("the handler that finished within the grace: %s", r.State)
		}
		rec := get(t, ctx, o, stuck)
		if rec.State != outbox.Ready || rec.LeasedBy != "" || rec.AvailableAt.After(time.Now()) {
			t.Fatalf("the cancelled handler's message: %+v, want ready now", rec)
		}
		if s := r.Stats(); s.Errors != 0 || s.Retried != 0 || s.Delivered != 1 {
			t.Fatalf("relay stats %+v; want one delivered and the stopped one released without an error", s)
		}
	})
}

// TestEdgesShutdownGraceDefaultsToFiveSeconds: without ShutdownGrace, a
// handler still running when Run's context ends keeps its own context for
// 5s: one that needs 2s more finishes uncancelled and its message is
// delivered. (The wait is the promise itself: 2s of real time, well
// inside the grace.)
func TestEdgesShutdownGraceDefaultsToFiveSeconds(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		started := make(chan struct{})
		var cancelled atomic.Bool
		r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
			close(started)
			timer := time.NewTimer(2 * time.Second)
			defer timer.Stop()
			select {
			case <-ctx.Done():
				cancelled.Store(true)
				return ctx.Err()
			case <-timer.C:
				return nil
			}
		}, &outbox.RelayOptions{PollInterval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		<-started
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if cancelled.Load() {
			t.Fatal("the handler's context was cancelled within 2s of the shutdown; the default grace is 5s")
		}
		if r := get(t, ctx, o, id); r.State != outbox.Delivered {
			t.Fatalf("the message of the handler that finished within the grace: %s", r.State)
		}
	})
}
