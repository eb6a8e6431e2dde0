package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
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

// Behind queues calls behind one of db's combined batches held in
// flight, in the order given, then lets them go. lock runs in a
// transaction and takes a lock that gate's call will wait for (a row
// lock on PostgreSQL, the write lock on SQLite); gate then runs through
// the combiner as a batch of its own, which waits, in flight, holding the
// one place that Config.CombineBatches 1 gives batches. Each call starts
// once the one before it queued, so the queue holds them in the order
// given; once all are queued the transaction rolls back, gate's batch
// commits, and the next batches take the calls. Behind returns once
// gate's call returned, with the combiner's figures from before it; wait
// waits for the calls to return.
func Behind(t testing.TB, db *racefree.DB, lock func(*sql.Tx) error, gate func() error, calls ...func()) (before racefree.CombineStats, wait func()) {
	t.Helper()
	tx, err := db.SQL().BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := lock(tx); err != nil {
		t.Fatal(err)
	}
	before = db.CombineStats()
	held := make(chan error, 1)
	go func() { held <- gate() }()
	WaitCombiner(t, db, "the held batch in flight", func(s racefree.CombineStats) bool { return s.Running == before.Running+1 })
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call()
		}()
		WaitCombiner(t, db, fmt.Sprintf("call %d queued", i), func(s racefree.CombineStats) bool { return s.Queued == i+1 })
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatalf("the held batch: %v", err)
	}
	return before, wg.Wait
}
