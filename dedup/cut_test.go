package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestObserveWhoseCommitWasCutIsUnavailable cuts a batch of observations
// once PostgreSQL committed it and before its answer came
// (testdb.CutReply): every caller gets ErrUnavailable, as a call alone
// whose answer is lost, none runs alone or again, and the next
// occurrence of each event counts two, the batch's and its own.
func TestObserveWhoseCommitWasCutIsUnavailable(t *testing.T) {
	dsn := testdb.NewDSN(t, racefree.Postgres)
	direct := testdb.Open(t, dsn, nil)
	proxy, cut := testdb.NewCutReply(t, dsn)
	db := testdb.Open(t, cut, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1})
	log, reader := dedup.New(db), dedup.New(direct)
	ctx := context.Background()
	ev := func(i int) dedup.Event {
		return dedup.Event{Source: "worker", Level: "error", Message: "failure", Fingerprint: fmt.Sprintf("f%d", i)}
	}
	if _, err := log.Observe(ctx, db, ev(99), time.Minute); err != nil {
		t.Fatal(err)
	}
	const n = 4
	calls := make([]func() error, n)
	for i := range calls {
		calls[i] = func() error { _, err := log.Observe(ctx, db, ev(i), time.Minute); return err }
	}
	for i, err := range testdb.CutBatch(t, db, direct, proxy, calls...) {
		if !errors.Is(err, racefree.ErrUnavailable) {
			t.Errorf("observe %d: got %v, want ErrUnavailable: its batch may have committed", i, err)
		}
	}
	for i := range n {
		obs, err := reader.Observe(ctx, direct, ev(i), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if obs.Count != 2 || obs.Process || obs.Fence != 1 {
			t.Errorf("%s: %+v, want count 2 in the window the batch's observer won (fence 1)", obs.Fingerprint, obs)
		}
	}
}
