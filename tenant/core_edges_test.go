package tenant_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
)

// TestCoreEdgesTheApplicationRoleRepairsAndReapsTheOutbox holds Grant to
// every write the outbox makes as the application role, the deletes of a
// message's history among them: a role granted by Grant kills a message
// (its history recorded), discards it with its history, and reaps a
// delivered message with the history of its failed attempt, under
// row-level security.
func TestCoreEdgesTheApplicationRoleRepairsAndReapsTheOutbox(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	dsn := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, dsn, &racefree.Config{Clock: clock})
	app := testdb.App(t, owner, dsn)
	ctx, err := tenant.With(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	o, err := outbox.New(app, &outbox.Options{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	deliver := func(id int64, cause error) {
		t.Helper()
		ds, err := o.Claim(ctx, "w", 1, time.Minute)
		if err != nil || len(ds) != 1 || ds[0].ID != id {
			t.Fatalf("claim: %v, %v; want message %d", ds, err, id)
		}
		if cause == nil {
			err = o.Complete(ctx, app, ds[0])
		} else {
			_, err = o.Fail(ctx, ds[0], cause)
		}
		if err != nil {
			t.Fatalf("recording the outcome of message %d as the application role: %v", id, err)
		}
	}
	dead, err := o.Enqueue(ctx, app, outbox.Message{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	deliver(dead, outbox.Permanent(errors.New("no")))
	got, err := o.Discard(ctx, app, outbox.Filter{IDs: []int64{dead}})
	if err != nil || fmt.Sprint(got) != fmt.Sprint([]int64{dead}) {
		t.Fatalf("discard as the application role: %v, %v; want [%d]", got, err, dead)
	}
	retried, err := o.Enqueue(ctx, app, outbox.Message{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	deliver(retried, outbox.RetryAfter(time.Millisecond, errors.New("later")))
	clock.Advance(time.Second)
	deliver(retried, nil)
	clock.Advance(time.Hour)
	if n, err := o.Reap(ctx); err != nil || n != 1 {
		t.Fatalf("reap as the application role: %d, %v; want 1", n, err)
	}
	var left int
	if err := owner.QueryRowContext(context.Background(), `SELECT count(*) FROM racefree_outbox_attempts`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d rows of history left after the discard and the reap", left)
	}
}
