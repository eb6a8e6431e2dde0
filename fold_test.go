package racefree_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/racefree/racefree/internal/wire"
)

// folds records the runs a test's Fold was called with, as the keys of
// their operations.
type folds struct {
	mu   sync.Mutex
	runs [][]string
	fail error // returned by every Fold after its statement ran
}

// op returns an operation on key that inserts (key, v) into w, and folds
// as fold says: its Fold inserts one row per operation of the run, named
// by each one's key and place, and sets each one's Dest to its place in
// the run.
func (f *folds) op(key, foldAs string, v int) (*wire.Op, *int64) {
	o := insert(fmt.Sprintf("%s alone %d", key, v), v)
	o.Key = key
	got := new(int64)
	o.Stmts = append(o.Stmts, &wire.Statement{Query: `SELECT -1`, Dest: []any{got}})
	o.FoldAs = foldAs
	o.Fold = func(ctx context.Context, run wire.Run, ops []*wire.Op) error {
		f.mu.Lock()
		keys := make([]string, len(ops))
		for i, o := range ops {
			keys[i] = o.Key
		}
		f.runs = append(f.runs, keys)
		f.mu.Unlock()
		for i, o := range ops {
			if _, err := run(ctx, &wire.Statement{Query: fmt.Sprintf(`INSERT INTO w (k, v) VALUES ('%s folded %d', %d)`, o.Key, i, v)}); err != nil {
				return err
			}
			*o.Stmts[1].Dest[0].(*int64) = int64(i)
		}
		return f.fail
	}
	return o, got
}

// TestCombinerFoldsARunOfOneKey: on SQLite a batch runs at once, through
// the first one's Fold, each run of two or more operations that follow
// one another there with one Key and one FoldAs, in the order they came,
// in the batch's transaction; an operation alone, one of another key, or
// one of another FoldAs runs its own statements; a run may end the
// batch. A Fold's error fails
// the batch, which commits nothing, not even what the Fold wrote, and its
// operations run alone. It holds for a batch on the combiner's writer
// and for one in a *sql.Tx (a pool of one connection).
func TestCombinerFoldsARunOfOneKey(t *testing.T) {
	t.Parallel()
	for _, conns := range []int{4, 1} {
		t.Run(fmt.Sprintf("MaxOpenConns %d", conns), func(t *testing.T) {
			db, _ := writerDB(t, conns)
			f := &folds{}
			// In the batch's order: the keys' order, each key's operations
			// in the order they came.
			a1, ga1 := f.op("a", "x", 1)
			a2, ga2 := f.op("a", "x", 2)
			a3, ga3 := f.op("a", "x", 3)
			a4, ga4 := f.op("a", "y", 4) // another FoldAs: a run of one
			b1, gb1 := f.op("b", "y", 5) // another key: a run of one
			c1, gc1 := f.op("c", "x", 6)
			c2, gc2 := f.op("c", "x", 7)
			d1, gd1 := f.op("d", "", 8) // no FoldAs: never folds
			d2, gd2 := f.op("d", "", 9)
			z1, gz1 := f.op("z", "x", 10) // a run that ends the batch
			z2, gz2 := f.op("z", "x", 11)
			before := db.CombineStats()
			out := batchOf(t, db, c2, z1, a1, d1, a2, b1, c1, z2, a3, d2, a4)
			for i, o := range out {
				if !o.ran || o.err != nil {
					t.Fatalf("operation %d: %+v; want it run in the batch", i, o)
				}
			}
			want := [][]string{{"a", "a", "a"}, {"c", "c"}, {"z", "z"}}
			if !slices.EqualFunc(f.runs, want, slices.Equal) {
				t.Fatalf("folds %v; want %v", f.runs, want)
			}
			// c2 came before c1: a run keeps the order the calls came in.
			places := map[string]int64{"a1": *ga1, "a2": *ga2, "a3": *ga3, "c2": *gc2, "c1": *gc1, "a4": *ga4, "b1": *gb1, "d1": *gd1, "d2": *gd2, "z1": *gz1, "z2": *gz2}
			wantPlaces := map[string]int64{"a1": 0, "a2": 1, "a3": 2, "c2": 0, "c1": 1, "a4": -1, "b1": -1, "d1": -1, "d2": -1, "z1": 0, "z2": 1}
			for k, v := range wantPlaces {
				if places[k] != v {
					t.Errorf("%s: place %d in its fold; want %d (-1: ran its own statements)", k, places[k], v)
				}
			}
			s := db.CombineStats()
			if folded := s.Folded - before.Folded; folded != 7 || s.Failed != before.Failed {
				t.Fatalf("%d operations folded, %d batches failed; want 7 and none", folded, s.Failed-before.Failed)
			}
			// The folds wrote their rows; the operations alone theirs.
			if n := rows(t, db, "a folded 0", "a folded 1", "a folded 2", "c folded 0", "c folded 1", "a alone 4", "b alone 5", "d alone 8", "d alone 9", "z folded 0", "z folded 1"); n != 11 {
				t.Fatalf("%d of the 11 rows written (7 by folds, 4 alone)", n)
			}
			if n := rows(t, db, "a alone 1", "a alone 2", "a alone 3", "c alone 6", "c alone 7", "z alone 10", "z alone 11"); n != 0 {
				t.Fatalf("%d rows of folded operations' own statements; want none", n)
			}

			f.runs, f.fail = nil, errors.New("the fold fails")
			e1, _ := f.op("e", "x", 1)
			e2, _ := f.op("e", "x", 2)
			e3, _ := f.op("g", "", 3)
			before = db.CombineStats()
			out = batchOf(t, db, e1, e2, e3)
			for i, o := range out {
				if o.ran {
					t.Fatalf("operation %d: ran in a batch whose fold failed; want handed back to run alone", i)
				}
			}
			if len(f.runs) != 1 {
				t.Fatalf("folds %v; want the one", f.runs)
			}
			if n := rows(t, db, "e folded 0", "e folded 1", "g alone 3"); n != 0 {
				t.Fatalf("the failed batch left %d rows", n)
			}
			if s := db.CombineStats(); s.Failed != before.Failed+1 || s.Folded != before.Folded {
				t.Fatalf("combiner %+v after %+v: want one batch failed, nothing counted folded", s, before)
			}
		})
	}
}
