package idempotency_test

import (
	"context"
	"errors"
	"testing"

	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestLeaseFencesJumpPastAFailoverThatLostCommits runs a real primary and
// an asynchronous streaming standby, runs a key's request on the primary
// while the standby does not receive it (two failed runs, fences 3 and 4,
// the second then completed), kills the primary and promotes the standby:
// those runs and the stored response are lost. The new primary runs the
// request again under a lease (a claim) whose fence is above every fence
// acknowledged before, so a step saved or a write guarded under a lost
// run's fence can never pass for the new run's.
func TestLeaseFencesJumpPastAFailoverThatLostCommits(t *testing.T) {
	t.Parallel()
	c := testdb.NewCluster(t)
	ctx := context.Background()
	role := c.AppRole(t, c.Primary.Open(t, nil))
	open := func() *idempotency.Store {
		t.Helper()
		db, err := dsn.Open(ctx, c.Primary.URLAs(role), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return idempotency.New(db, nil)
	}
	s := open()
	var highest int64
	failed := errors.New("failed")
	run := func(fail bool) int64 {
		t.Helper()
		var fence int64
		_, err := s.Do(ctx, "s", "k", "fp", func(_ context.Context, call *idempotency.Call) ([]byte, error) {
			fence = call.Fence()
			if fail {
				return nil, failed
			}
			return []byte("done"), nil
		})
		if fail && !errors.Is(err, failed) || !fail && err != nil {
			t.Fatalf("do: %v", err)
		}
		return fence
	}
	for want := int64(1); want <= 2; want++ { // fences 1 and 2 on timeline 1, replicated
		if got := run(true); got != want {
			t.Fatalf("run %d: fence %d", want, got)
		}
	}
	before := c.Primary.Timeline(t)
	c.FailOverLosing(t, func() {
		run(true)
		highest = run(false)
	})
	after := c.Primary.Timeline(t)
	if after <= before || highest != 4 {
		t.Fatalf("timeline %d after %d, lost fence %d: want a higher timeline and fence 4", after, before, highest)
	}
	s = open()
	if got, floor := run(false), (after-1)<<40+1; got <= highest || got < floor {
		t.Fatalf("the run on the new primary has fence %d, want above %d (acknowledged before the failover) and at least %d", got, highest, floor)
	}
}
