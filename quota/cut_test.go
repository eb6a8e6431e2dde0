package quota_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
)

// TestConsumeWhoseCommitWasCutIsUnavailable cuts a batch of GCRA and of
// FixedWindow charges once PostgreSQL committed it and before its answer
// came (testdb.CutReply): every caller gets FailClosed's degraded denial
// and ErrUnavailable, as a charge alone whose answer is lost, none is
// charged alone or again, and each counter holds its one charge: the
// next charge of each key takes the last unit of its limit of 2.
func TestConsumeWhoseCommitWasCutIsUnavailable(t *testing.T) {
	dsn := testdb.NewDSN(t, racefree.Postgres)
	direct := testdb.Open(t, dsn, nil)
	proxy, cut := testdb.NewCutReply(t, dsn)
	db := testdb.Open(t, cut, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1})
	l, reader := setup(t, db), setup(t, direct)
	ctx := context.Background()
	for _, p := range []quota.Policy{
		{Kind: quota.GCRA, Rate: 2, Per: time.Hour, Burst: 2, Wait: time.Minute},
		{Kind: quota.FixedWindow, Rate: 2, Per: time.Hour, Wait: time.Minute},
	} {
		if _, err := l.Consume(ctx, db, "warm", 1, p); err != nil {
			t.Fatal(err)
		}
		const n = 4
		key := func(i int) string { return fmt.Sprintf("%s-%d", p.Kind, i) }
		decisions := make([]quota.Decision, n)
		calls := make([]func() error, n)
		for i := range calls {
			calls[i] = func() (err error) { decisions[i], err = l.Consume(ctx, db, key(i), 1, p); return err }
		}
		for i, err := range testdb.CutBatch(t, db, direct, proxy, calls...) {
			if d := decisions[i]; !errors.Is(err, racefree.ErrUnavailable) || !d.Degraded || d.Allowed {
				t.Errorf("%s: %+v, %v, want a degraded denial and ErrUnavailable: its batch may have committed", key(i), d, err)
			}
		}
		for i := range n {
			d, err := reader.Consume(ctx, direct, key(i), 1, p)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed || d.Remaining != 0 {
				t.Errorf("%s: %+v, want the last unit: the batch charged one, once", key(i), d)
			}
		}
	}
}
