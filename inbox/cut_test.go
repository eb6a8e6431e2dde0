package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestReceiveWhoseCommitWasCutIsUnavailable cuts a batch of deliveries
// once PostgreSQL committed it and before its answer came
// (testdb.CutReply): every caller gets ErrUnavailable, as a delivery alone
// whose answer is lost, none runs alone or again, each event is recorded
// once with its number, and a redelivery is a duplicate.
func TestReceiveWhoseCommitWasCutIsUnavailable(t *testing.T) {
	dsn := testdb.NewDSN(t, racefree.Postgres)
	direct := testdb.Open(t, dsn, nil)
	proxy, cut := testdb.NewCutReply(t, dsn)
	db := testdb.Open(t, cut, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1})
	in, err := inbox.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := inbox.New(direct, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := in.Receive(ctx, "warm", "e0", []byte("{}"), nil); err != nil {
		t.Fatal(err)
	}
	const n = 4
	id := func(i int) string { return fmt.Sprintf("e%d", i) }
	calls := make([]func() error, n)
	for i := range calls {
		calls[i] = func() error { _, err := in.Receive(ctx, "src", id(i), []byte("{}"), nil); return err }
	}
	for i, err := range testdb.CutBatch(t, db, direct, proxy, calls...) {
		if !errors.Is(err, racefree.ErrUnavailable) {
			t.Errorf("delivery %d: got %v, want ErrUnavailable: its batch may have committed", i, err)
		}
	}
	events, err := reader.List(ctx, "src", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != n {
		t.Fatalf("recorded %d events, want %d, once each: %+v", len(events), n, events)
	}
	for i, e := range events {
		if e.Seq != int64(i+1) || e.ID != id(i) {
			t.Errorf("event %d: %+v, want %s numbered %d (the batch numbers in the order of the IDs)", i, e, id(i), i+1)
		}
	}
	for i := range n {
		res, err := reader.Receive(ctx, "src", id(i), []byte("{}"), nil)
		if err != nil || !res.Duplicate {
			t.Errorf("redelivery of %s: %+v, %v, want a duplicate", id(i), res, err)
		}
	}
}
