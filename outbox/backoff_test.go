package outbox

import (
	"testing"
	"time"
)

// TestEdgesBackoffBounds: the default backoff doubles from BackoffBase per
// failed attempt (an attempt below 1 counts as the first) up to exactly
// BackoffMax, and its jitter draws from the whole upper half of the
// delay, both ends included, and nothing outside it: d/2 to d.
func TestEdgesBackoffBounds(t *testing.T) {
	for attempt, want := range map[int]time.Duration{
		-1: BackoffBase, 0: BackoffBase, 1: BackoffBase, 2: 2 * BackoffBase, 3: 4 * BackoffBase,
		12: 2048 * BackoffBase, 13: BackoffMax, 40: BackoffMax, 1 << 30: BackoffMax,
	} {
		if got := exponential(attempt, BackoffBase, BackoffMax); got != want {
			t.Errorf("exponential(%d) = %s, want %s", attempt, got, want)
		}
		for range 50 {
			if got := Backoff(attempt); got < want/2 || got > want {
				t.Fatalf("Backoff(%d) = %s, want %s to %s", attempt, got, want/2, want)
			}
		}
	}
	if got := exponential(3, time.Second, 4*time.Second); got != 4*time.Second {
		t.Errorf("exponential at exactly its maximum: %s", got)
	}
	if got := exponential(4, time.Second, 5*time.Second); got != 5*time.Second {
		t.Errorf("exponential past a maximum that is no power of two: %s", got)
	}

	for d, ends := range map[time.Duration][2]time.Duration{0: {0, 0}, 1: {1, 1}, 2: {1, 2}, 4: {2, 4}, 10: {5, 10}} {
		seen := map[time.Duration]bool{}
		for range 2000 {
			got := jitter(d)
			if got < ends[0] || got > ends[1] {
				t.Fatalf("jitter(%d) = %d, want %d to %d", d, got, ends[0], ends[1])
			}
			seen[got] = true
		}
		if !seen[ends[0]] || !seen[ends[1]] {
			t.Errorf("jitter(%d) never drew an end of %d to %d: %v", d, ends[0], ends[1], seen)
		}
	}
}
