package quota_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
)

// The tests of this file kill the mutants gremlins left alive in quota
// (docs/contributing.md, "An independent mutation score"): each tries an
// edge no other test reached.

// TestEdgesConsumeAllOf64Requests: ConsumeAll takes 1 to 64 requests. At
// 64 it charges every one; at 65, and at none, it is an InputError that
// writes nothing.
func TestEdgesConsumeAllOf64Requests(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := setup(t, db)
		reqs := make([]quota.Request, 65)
		for i := range reqs {
			reqs[i] = quota.Request{Key: fmt.Sprintf("k%d", i), N: 1, Policy: window}
		}
		for _, rs := range [][]quota.Request{reqs, nil} {
			before := snapshot(t, db, "default")
			if _, err := l.ConsumeAll(ctx, db, rs); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("ConsumeAll of %d requests: %v, want ErrInvalidInput", len(rs), err)
			}
			if after := snapshot(t, db, "default"); after != before {
				t.Fatalf("ConsumeAll of %d requests wrote:\n%s", len(rs), after)
			}
		}
		if d, err := l.ConsumeAll(ctx, db, reqs[:64]); err != nil || !d.Allowed || d.Remaining != window.Rate-1 {
			t.Fatalf("ConsumeAll of 64 requests: %+v, %v; want allowed, %d remaining", d, err, window.Rate-1)
		}
		for i := range 64 {
			if _, used := row(t, db, reqs[i].Key, quota.FixedWindow); used != 1 {
				t.Fatalf("request %d of 64: used %d, want 1", i+1, used)
			}
		}
		if _, used := row(t, db, reqs[64].Key, quota.FixedWindow); used != -1 {
			t.Fatalf("the 65th request's key was charged (used %d)", used)
		}
	})
}
