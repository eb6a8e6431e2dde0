package testdb

import (
	"testing"
	"time"

	"github.com/racefree/racefree"
)

// WaitCombiner polls db's combiner figures ([racefree.DB.CombineStats])
// every millisecond until ok holds of them, and fails the test, naming
// what it waited for, after 30 s. Tests hold a batch in flight and queue
// calls behind it; this observes those states instead of sleeping.
func WaitCombiner(t testing.TB, db *racefree.DB, what string, ok func(racefree.CombineStats) bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !ok(db.CombineStats()) {
		select {
		case <-deadline:
			t.Fatalf("waiting for %s: %+v after 30s", what, db.CombineStats())
		case <-tick.C:
		}
	}
}
