package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
)

// TestManyRelaysNeverShareALiveMessage runs six relays of four handlers
// each on one database while messages keep coming: no message is ever in
// two handlers at once, and with leases that never lapse every message is
// delivered exactly once. 96 messages, 200 with RACEFREE_LONG=1: each of
// the 24 handlers still sees several.
func TestManyRelaysNeverShareALiveMessage(t *testing.T) {
	testdb.Each(t, &racefree.Config{MaxOpenConns: 16}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		n, relays := testdb.Scale(96, 200), 6
		var (
			mu        sync.Mutex
			active    = map[int64]string{}
			delivered = map[int64]int{}
			overlaps  []string
		)
		handler := func(worker string) outbox.Handler {
			return func(ctx context.Context, d *outbox.Delivery) error {
				mu.Lock()
				if other, busy := active[d.ID]; busy {
					overlaps = append(overlaps, fmt.Sprintf("message %d in %s and %s", d.ID, other, worker))
				}
				active[d.ID] = worker
				mu.Unlock()
				time.Sleep(time.Millisecond) // the side effect
				mu.Lock()
				delete(active, d.ID)
				delivered[d.ID]++
				mu.Unlock()
				return nil
			}
		}
		var stops []func()
		for i := range relays {
			w := fmt.Sprint("relay-", i)
			r, err := o.NewRelay(handler(w), &outbox.RelayOptions{Worker: w, Concurrency: 4, Batch: 3, PollInterval: 50 * time.Millisecond, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			stops = append(stops, runRelay(t, r))
		}
		var want []int64
		for i := range n {
			want = append(want, enqueue(t, ctx, o, db, outbox.Message{Topic: "t", Payload: []byte(fmt.Sprint(i))}))
		}
		waitFor(t, "every message to be delivered", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(delivered) == n
		})
		for _, stop := range stops {
			stop()
		}
		if len(overlaps) > 0 {
			t.Fatalf("%d messages were in two handlers at once, e.g. %s", len(overlaps), overlaps[0])
		}
		for _, id := range want {
			if delivered[id] != 1 {
				t.Errorf("message %d delivered %d times, want once", id, delivered[id])
			}
		}
		s, err := o.Stats(ctx, db)
		if err != nil || s.Delivered != int64(n) || s.Ready+s.Leased+s.Dead != 0 {
			t.Fatalf("stats %+v, %v", s, err)
		}
	})
}

// TestStaleWorkersCompleteNothingUnderLoad: workers that claim with short
// leases, some of which stall past their lease before completing, race
// each other on one database. Each message is completed exactly once, and
// by the holder of its highest fence: a stalled worker whose message was
// taken over completes nothing.
func TestStaleWorkersCompleteNothingUnderLoad(t *testing.T) {
	testdb.Each(t, &racefree.Config{MaxOpenConns: 16}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		const n, workers = 60, 8
		for range n {
			enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		}
		var (
			mu        sync.Mutex
			maxFence  = map[int64]int64{}
			completed = map[int64][]int64{} // fences whose Complete succeeded
			stale     atomic.Int64
			failures  []error
		)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprint("w", w)
				for i := 0; ; i++ {
					mu.Lock()
					done := len(completed) == n
					mu.Unlock()
					if done || len(failures) > 0 {
						return
					}
					ds, err := o.Claim(ctx, name, 1, 40*time.Millisecond)
					if err != nil {
						mu.Lock()
						failures = append(failures, err)
						mu.Unlock()
						return
					}
					if len(ds) == 0 {
						time.Sleep(5 * time.Millisecond) // nothing due: poll again
						continue
					}
					d := ds[0]
					mu.Lock()
					maxFence[d.ID] = max(maxFence[d.ID], d.Fence)
					mu.Unlock()
					if (w+i)%3 == 0 {
						time.Sleep(60 * time.Millisecond) // stall past the lease
					}
					err = o.Complete(ctx, db, d)
					mu.Lock()
					switch {
					case err == nil:
						completed[d.ID] = append(completed[d.ID], d.Fence)
						if d.Fence != maxFence[d.ID] {
							failures = append(failures, fmt.Errorf("message %d completed with fence %d, but fence %d was claimed", d.ID, d.Fence, maxFence[d.ID]))
						}
					case errors.Is(err, racefree.ErrStaleFence), errors.Is(err, racefree.ErrNotHeld):
						stale.Add(1)
					default:
						failures = append(failures, err)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(failures) > 0 {
			t.Fatal(failures[0])
		}
		for id, fences := range completed {
			if len(fences) != 1 {
				t.Errorf("message %d completed %d times (fences %v)", id, len(fences), fences)
			}
			if fences[0] != maxFence[id] {
				t.Errorf("message %d completed with fence %d, the highest claimed is %d", id, fences[0], maxFence[id])
			}
		}
		if stale.Load() == 0 {
			t.Logf("no stale completion happened (the machine was fast); the deterministic test covers it")
		}
	})
}

// TestAClaimDoesNotWaitForLockedMessages: on PostgreSQL a claim skips the
// rows another transaction holds locked (here a completion in progress in
// a caller's open transaction) instead of queueing behind it.
func TestAClaimDoesNotWaitForLockedMessages(t *testing.T) {
	clock, cfg := manual()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), cfg)
	ctx := context.Background()
	o := newOutbox(t, db, nil)
	first := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
	second := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
	a := claim(t, ctx, o, "A", 1, time.Second)[0]
	if a.ID != first {
		t.Fatalf("claimed %d", a.ID)
	}
	clock.Advance(time.Second) // A's lease lapses: the first message is due again
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := o.Complete(ctx, tx, a); err != nil { // locks the row until tx ends
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ds, err := o.Claim(cctx, "B", 2, time.Second)
	if err != nil {
		t.Fatalf("a claim beside a locked message: %v (it waited for the lock)", err)
	}
	if len(ds) != 1 || ds[0].ID != second {
		t.Fatalf("claimed %v, want only the unlocked message %d", ids(ds), second)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if ds := claim(t, ctx, o, "C", 2, time.Second); len(ds) != 0 {
		t.Fatalf("after the completion committed, %v was claimed again", ids(ds))
	}
}
