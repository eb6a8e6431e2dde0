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

// TestEdgesConsumeAllLeavesNoSavepointInTheCallersTransaction: under the
// caller's transaction ConsumeAll works under a savepoint of its own, and
// ends it whatever the outcome: after an allowed call and after a denied
// one (rolled back to it, then released), the caller's transaction holds
// no savepoint of quota's (a ROLLBACK TO it is an error), and the
// caller's later writes are its own, not nested in a savepoint left open.
func TestEdgesConsumeAllLeavesNoSavepointInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		l := setup(t, db)
		for _, c := range []struct {
			name string
			n    int64
			want bool
		}{{"allowed", window.Rate, true}, {"denied", 1, false}} {
			tx, err := db.SQL().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.ConsumeAll(ctx, tx, []quota.Request{{Key: "sp", N: c.n, Policy: window}})
			if err != nil || d.Allowed != c.want {
				tx.Rollback()
				t.Fatalf("%s call: %+v, %v", c.name, d, err)
			}
			_, err = tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT racefree_quota")
			if err == nil {
				tx.Rollback()
				t.Fatalf("after the %s call, the caller's transaction still holds the savepoint racefree_quota", c.name)
			}
			tx.Rollback()
			if c.want {
				// The charge rolled back with the transaction: charge the
				// whole window on the pool, so that the next call is denied.
				if d := consume(t, l, db, "sp", c.n, window); !d.Allowed {
					t.Fatalf("the whole window on the pool: %+v", d)
				}
			}
		}
	})
}
