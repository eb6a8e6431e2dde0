package heartbeat_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/heartbeat"
)

// TestEdges2RenewalsComeEveryThirdOfTheTTL holds the renewal interval's
// other edge: renewals that succeed are sent a third of the TTL apart
// (heartbeat.Fraction), the first a third after Keep, never sooner, so
// that a kept lease costs the database one write per third of its TTL
// and not one per retry interval. Only lower bounds are asserted: a
// timer never fires early, however loaded the machine.
func TestEdges2RenewalsComeEveryThirdOfTheTTL(t *testing.T) {
	t.Parallel()
	const ttl = 1500 * time.Millisecond
	var (
		mu    sync.Mutex
		sends []time.Time
	)
	enough := make(chan struct{})
	start := time.Now()
	kept, stop := heartbeat.Keep(context.Background(), ttl, func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		sends = append(sends, time.Now())
		if len(sends) == 3 {
			close(enough)
		}
		return nil
	}, func(error) bool { return true })
	defer stop()
	select {
	case <-enough:
	case <-kept.Done():
		t.Fatalf("kept context ended: %v", context.Cause(kept))
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	prev := start
	for i, s := range sends {
		if d := s.Sub(prev); d < ttl/heartbeat.Fraction {
			t.Errorf("renewal %d sent %v after the one before it (or Keep), want at least a third of the TTL, %v", i+1, d, ttl/heartbeat.Fraction)
		}
		prev = s
	}
}
