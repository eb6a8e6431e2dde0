package quota_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/tenant"
)

// foldCaseOf is a case of TestAFoldOfChargesDecidesAsTheChargesInTurn.
type foldCaseOf struct {
	name    string
	burst   int64         // GCRA's burst, a window's limit
	before  []int64       // charged before, in turn, each alone
	advance time.Duration // then the clock moves
	step    time.Duration // and moves again before each charge of the batch
	sizes   []int64       // the batch's charges, in order
	folded  int64         // of them, in folds on SQLite
}

// TestAFoldOfChargesDecidesAsTheChargesInTurn queues charges of one key,
// of each kind, in a known order behind a batch held in flight, and gives each
// caller the decision it gets alone, to the millisecond: the same
// charges, one after the other, each in a transaction of its own, on
// another key charged as this one was before. On SQLite two or more
// charges of one size that follow one another in the batch run as one
// fold (consume_gcra_fold.sql, consume_window_fold.sql,
// consume_sliding_fold.sql: the first k allowed), and a run of another
// size breaks it; the cases take each bound of k: all allowed, some, none
// (no row written), a counter behind the clock (a window past, the
// window before weighing half or most of its count), one in the future,
// a key with no counter (at a window's start and within one), a run cut
// by a charge of another size, and charges of one size whose clocks
// differ (Config.Clock), which never fold, and a
// charge alone in its run, refused, that no charge of its key follows
// (it reads the counter it was refused on after the batch); another
// tenant's counter of the key is full throughout. On
// PostgreSQL, which keeps a batch's keys apart, the charges run one batch
// each and nothing folds.
func TestAFoldOfChargesDecidesAsTheChargesInTurn(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	cfg.Combine, cfg.CombineBatches = racefree.CombineOn, 1
	cases := []foldCaseOf{
		{"a key with no counter, all allowed", 100, nil, 0, 0, []int64{1, 1, 1, 1, 1, 1}, 6},
		{"a key with no counter, the first ten allowed", 10, nil, 0, 0, []int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 12},
		{"a key with no counter, charges of three", 10, nil, 0, 0, []int64{3, 3, 3, 3, 3}, 5},
		{"a key with no counter, mid-window", 10, nil, 250 * time.Millisecond, 0, []int64{1, 1, 1}, 3},
		{"room for exactly one", 10, []int64{9}, 0, 0, []int64{1, 1, 1}, 3},
		{"room for exactly two of three", 10, []int64{4}, 0, 0, []int64{3, 3, 3}, 3},
		{"room for none: nothing written", 10, []int64{10}, 0, 0, []int64{1, 1, 1, 1}, 4},
		{"room for none, the counter ahead by less than a charge", 10, []int64{8}, 0, 0, []int64{3, 3}, 2},
		{"a counter the clock passed: a full bucket", 10, []int64{10}, time.Hour, 0, []int64{2, 2, 2, 2, 2, 2}, 6},
		{"a counter partly refilled", 10, []int64{10}, 250 * time.Millisecond, 0, []int64{1, 1, 1, 1}, 4},
		{"the next window, half of the one before weighing", 10, []int64{10}, 1500 * time.Millisecond, 0, []int64{1, 1, 1, 1, 1, 1, 1}, 7},
		{"the next window, most of the one before weighing", 10, []int64{4, 4}, 1100 * time.Millisecond, 0, []int64{2, 2, 2}, 3},
		{"runs cut by charges of other sizes", 10, []int64{2}, 0, 0, []int64{1, 1, 2, 2, 2, 1, 3, 1, 1}, 7},
		{"no run of one size", 10, nil, 0, 0, []int64{1, 2, 1, 2, 1}, 0},
		{"a run, then a lone charge refused, last of its key in the batch", 10, []int64{8}, 0, 0, []int64{1, 1, 3}, 2},
		{"charges of one size at clocks apart: no fold", 3, []int64{3}, 0, 100 * time.Millisecond, []int64{1, 1, 1, 1}, 0},
	}
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		l := setup(t, db)
		consume(t, l, db, "warm", 1, gcra) // registers the tenant
		for _, kind := range []quota.Kind{quota.GCRA, quota.FixedWindow, quota.SlidingWindow} {
			for i, c := range cases {
				t.Run(fmt.Sprintf("%s %d", kind, i), func(t *testing.T) { foldCase(t, db, l, clock, kind, i, c) })
			}
		}
	})
}

// foldCase is one case of TestAFoldOfChargesDecidesAsTheChargesInTurn, of
// kind: a GCRA policy of 10 a second with the case's burst, or a window
// (fixed or sliding) of the burst a second.
func foldCase(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock, kind quota.Kind, i int, c foldCaseOf) {
	ctx := context.Background()
	clock.Set(t0)
	p := quota.Policy{Kind: quota.GCRA, Rate: 10, Per: time.Second, Burst: c.burst, Wait: time.Minute}
	if kind != quota.GCRA {
		p = quota.Policy{Kind: kind, Rate: c.burst, Per: time.Second, Wait: time.Minute}
	}
	aloneKey, hotKey := fmt.Sprintf("fold-%s-%d-alone", kind, i), fmt.Sprintf("fold-%s-%d-hot", kind, i)
	for _, n := range c.before {
		consume(t, l, db, aloneKey, n, p)
		consume(t, l, db, hotKey, n, p)
	}
	// Another tenant's counter of the key, full: never this one's.
	if _, err := l.Consume(as(t, "acme"), db, hotKey, c.burst, p); err != nil {
		t.Fatal(err)
	}
	base := t0.Add(c.advance)
	alone := make([]quota.Decision, len(c.sizes))
	for j, n := range c.sizes {
		clock.Set(base.Add(time.Duration(j+1) * c.step))
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		alone[j] = consume(t, l, tx, aloneKey, n, p)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]quota.Decision, len(c.sizes))
	calls := make([]func(), len(c.sizes))
	for j, n := range c.sizes {
		calls[j] = func() {
			clock.Set(base.Add(time.Duration(j+1) * c.step))
			d, err := l.Consume(ctx, db, hotKey, n, p)
			if err != nil {
				t.Errorf("%s, charge %d: %v", c.name, j, err)
			}
			got[j] = d
		}
	}
	before := db.CombineStats()
	inTurn(t, ctx, l, db, calls...)()
	for j := range c.sizes {
		if got[j] != alone[j] {
			t.Errorf("%s, charge %d of %d units: %+v, want %+v as alone", c.name, j, c.sizes[j], got[j], alone[j])
		}
	}
	if hot, alone := counterOf(t, db, kind, hotKey), counterOf(t, db, kind, aloneKey); hot != alone {
		t.Errorf("%s: the counter ends at %v, alone at %v", c.name, hot, alone)
	}
	s := db.CombineStats()
	folded := c.folded
	if db.Engine() != racefree.SQLite {
		folded = 0
	}
	if got := s.Folded - before.Folded; got != folded || s.Failed != before.Failed {
		t.Errorf("%s: %d charges folded, %d batches failed; want %d folded, none failed", c.name, got, s.Failed-before.Failed, folded)
	}
}

// counterOf returns the counter of kind of key in the default tenant
// (tat and used), or -1s when it has none.
func counterOf(t *testing.T, db *racefree.DB, kind quota.Kind, key string) [2]int64 {
	t.Helper()
	var c [2]int64
	err := db.QueryRowContext(context.Background(), bind(db, `SELECT tat, used FROM racefree_quotas WHERE tenant = $1 AND key = $2 AND kind = $3`), tenant.Default, key, string(kind)).Scan(&c[0], &c[1])
	if errors.Is(err, sql.ErrNoRows) {
		return [2]int64{-1, -1}
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}
