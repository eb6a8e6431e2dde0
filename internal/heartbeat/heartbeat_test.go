package heartbeat_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/heartbeat"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errRefused = errors.New("refused")

func isRefused(err error) bool { return errors.Is(err, errRefused) }

// TestKeepRenewsUntilLostAndLapses checks the three ways a kept context
// ends: a refused renewal, renewals that keep failing past the TTL, and
// stop; and that successful renewals keep it alive past several TTLs.
func TestKeepRenewsUntilLostAndLapses(t *testing.T) {
	t.Parallel()
	const ttl = 90 * time.Millisecond

	t.Run("renewed", func(t *testing.T) {
		var n atomic.Int64
		kept, stop := heartbeat.Keep(context.Background(), ttl, func(context.Context) error { n.Add(1); return nil }, isRefused)
		deadline := time.Now().Add(10 * time.Second)
		for n.Load() < 9 { // three TTLs' worth of renewals
			if time.Now().After(deadline) {
				t.Fatalf("%d renewals in 10s", n.Load())
			}
			select {
			case <-kept.Done():
				t.Fatalf("kept context ended while every renewal succeeded: %v", context.Cause(kept))
			case <-time.After(ttl / 10):
			}
		}
		stop()
		if got := context.Cause(kept); !errors.Is(got, context.Canceled) {
			t.Fatalf("cause after stop = %v, want context.Canceled", got)
		}
	})

	t.Run("refused", func(t *testing.T) {
		var n atomic.Int64
		kept, stop := heartbeat.Keep(context.Background(), ttl, func(context.Context) error {
			if n.Add(1) == 2 {
				return errRefused
			}
			return nil
		}, isRefused)
		defer stop()
		waitDone(t, kept)
		if got := context.Cause(kept); !errors.Is(got, errRefused) {
			t.Fatalf("cause = %v, want the refusal", got)
		}
	})

	t.Run("lapsed", func(t *testing.T) {
		start := time.Now()
		kept, stop := heartbeat.Keep(context.Background(), ttl, func(context.Context) error { return errors.New("transport") }, isRefused)
		defer stop()
		waitDone(t, kept)
		if got := context.Cause(kept); !errors.Is(got, heartbeat.ErrLapsed) {
			t.Fatalf("cause = %v, want ErrLapsed", got)
		}
		if took := time.Since(start); took < ttl {
			t.Fatalf("lapsed after %v, before the TTL %v", took, ttl)
		}
	})
}

func waitDone(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("kept context not cancelled within 5s")
	}
}
