package reaper_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/reaper"
)

func TestRunStopsAtAShortBatch(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{racefree.SQLite, racefree.Postgres} {
		left := []int64{10, 10, 3, 10}
		calls := 0
		total, err := reaper.Run(context.Background(), engine, 10, func() (int64, error) {
			n := left[calls]
			calls++
			return n, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := total, int64(23); got != want {
			t.Errorf("%s: total = %d, want %d", engine, got, want)
		}
		if got, want := calls, 3; got != want {
			t.Errorf("%s: calls = %d, want %d", engine, got, want)
		}
	}
}

func TestRunPausesOnSQLiteAsLongAsTheBatchTook(t *testing.T) {
	t.Parallel()
	const took = 20 * time.Millisecond
	var starts []time.Time
	_, err := reaper.Run(context.Background(), racefree.SQLite, 1, func() (int64, error) {
		starts = append(starts, time.Now())
		if len(starts) == 3 {
			return 0, nil
		}
		if len(starts) > 3 { // a reap that goes on past an empty batch fails, never hangs
			return 0, errors.New("a batch ran after one that deleted nothing")
		}
		time.Sleep(took) // the batch's own work
		return 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < 2*took {
			t.Errorf("batch %d began %v after the previous one, want at least %v (its work and as long again)", i, gap, 2*took)
		}
	}
}

func TestRunReturnsTheBatchErrorAndTheCancellation(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	total, err := reaper.Run(context.Background(), racefree.Postgres, 5, func() (int64, error) { return 2, boom })
	if !errors.Is(err, boom) || total != 2 {
		t.Errorf("got %d, %v; want 2, boom", total, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, err = reaper.Run(ctx, racefree.SQLite, 1, func() (int64, error) { cancel(); return 1, nil })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v", err)
	}
}
