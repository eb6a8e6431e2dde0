package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestListBoundsThePageByBytes proves that a page holds at most
// MaxListBytes of payload, or a single event when that one alone is
// larger, that it never stops before an event it could hold, and that
// paging by the last Seq still returns every event once, in order.
func TestListBoundsThePageByBytes(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		const mib = 1 << 20
		// Sizes in MiB; the bound is 4 MiB. Expected pages:
		// [1.5 1.5 1] (exactly 4), [5] (alone), [0.5 3 nil nil], [2].
		sizes := []int{3 * mib / 2, 3 * mib / 2, mib, 5 * mib, mib / 2, 3 * mib, -1, -1, 2 * mib}
		for i, n := range sizes {
			var p []byte
			if n >= 0 {
				p = bytes.Repeat([]byte{byte('a' + i)}, n)
			}
			if _, err := b.in.Receive(ctx, "big", fmt.Sprintf("e%d", i), p, nil); err != nil {
				t.Fatal(err)
			}
		}
		var pages [][]string
		after := int64(0)
		for {
			evs, err := b.in.List(ctx, "big", after, inbox.MaxListLimit)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) == 0 {
				break
			}
			var page []string
			total := 0
			for _, e := range evs {
				if e.Seq <= after {
					t.Fatalf("seq %d after cursor %d", e.Seq, after)
				}
				after = e.Seq
				total += len(e.Payload)
				page = append(page, e.ID)
			}
			if total > inbox.MaxListBytes && len(evs) > 1 {
				t.Fatalf("page %v holds %d bytes, more than %d", page, total, inbox.MaxListBytes)
			}
			pages = append(pages, page)
		}
		if got, want := fmt.Sprint(pages), "[[e0 e1 e2] [e3] [e4 e5 e6 e7] [e8]]"; got != want {
			t.Fatalf("pages %s, want %s", got, want)
		}
		// The count bound still applies below the byte bound.
		evs, err := b.in.List(ctx, "big", 6, 2)
		if err != nil || len(evs) != 2 || evs[0].ID != "e6" || evs[0].Payload != nil || evs[1].ID != "e7" {
			t.Fatalf("limit 2 after 6: %d events, %v", len(evs), err)
		}
	})
}

// TestSeqCursorNeverSkipsAnEvent runs 16 writers that receive events of one
// source at once while a reader pages with after = the last Seq it saw.
// Every event must reach the reader exactly once, in increasing Seq, and
// the numbers must be 1, 2, 3, … with no gap, whatever another source
// receives at the same time: a reader never skips an event
// that commits after it read a higher number. This holds because Receive
// takes the number last in its transaction, under the source's counter
// row, which it holds until commit (PostgreSQL), or under the write lock
// that every SQLite write transaction takes at BEGIN. Each of 16 writers
// receives 6 events, 12 with RACEFREE_LONG=1.
func TestSeqCursorNeverSkipsAnEvent(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		writers, each := 16, testdb.Scale(6, 12)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := range each {
					id := fmt.Sprintf("w%d-%d", w, i)
					// The processing function writes between the insert of
					// the event and its number, widening the window in which
					// transactions overlap.
					if _, err := b.in.Receive(ctx, "s", id, []byte(id), b.effect(ctx, id)); err != nil {
						t.Error(err)
						return
					}
					// Another source's events interleave with these: their
					// numbers are counted apart.
					if _, err := b.in.Receive(ctx, "noise", id, nil, nil); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		close(start)
		seen := readInOrder(t, b.in, "s", done)
		if got, want := len(seen), writers*each; got != want {
			t.Fatalf("the reader saw %d events, want %d", got, want)
		}
	})
}

// TestSeqCursorOrderIsCommitOrder re-creates, step by step, the interleaving
// that a cursor taken from the row's insert order gets wrong: event A is
// inserted first but commits last, event B is inserted after it and
// commits first, and a reader pages in between. The reader must still get
// A after B. PostgreSQL only: SQLite runs write transactions one at a
// time, so A's transaction would hold B back until it commits.
func TestSeqCursorOrderIsCommitOrder(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		if db.Engine() != racefree.Postgres {
			t.Skip("SQLite serialises write transactions: no interleaving to test")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b := setup(t, db, nil)
		inFn, release := make(chan struct{}), make(chan struct{})
		aDone := make(chan error, 1)
		go func() {
			_, err := b.in.Receive(ctx, "s", "A", nil, func(tx *sql.Tx) error {
				close(inFn) // A's row is inserted, not yet numbered or committed
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			aDone <- err
		}()
		select {
		case <-inFn:
		case <-ctx.Done():
			t.Fatal("A never reached its processing function")
		}
		if _, err := b.in.Receive(ctx, "s", "B", nil, nil); err != nil {
			t.Fatal(err)
		}
		page, err := b.in.List(ctx, "s", 0, 10)
		if err != nil || len(page) != 1 || page[0].ID != "B" {
			t.Fatalf("first page: %+v, %v; want B alone", page, err)
		}
		close(release)
		if err := <-aDone; err != nil {
			t.Fatal(err)
		}
		page, err = b.in.List(ctx, "s", page[0].Seq, 10)
		if err != nil || len(page) != 1 || page[0].ID != "A" {
			t.Fatalf("second page after B's seq: %+v, %v; want A, which committed after the first page", page, err)
		}
	})
}

// TestReapInTheCallersTransaction proves that Reap runs on the executor it
// is given: inside the caller's transaction, the deletion rolls back with
// it, and commits with it.
func TestReapInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b := setup(t, db, &inbox.Options{Retention: time.Hour, ReapBatch: 2})
		for i := range 5 {
			if _, err := b.in.Receive(ctx, "s", fmt.Sprintf("e%d", i), nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Hour)
		errRollback := fmt.Errorf("the caller rolls back")
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if n, err := b.in.Reap(ctx, tx); err != nil || n != 5 {
				t.Errorf("reap in the transaction: %d, %v; want 5", n, err)
			}
			return errRollback
		})
		if err != errRollback {
			t.Fatal(err)
		}
		if got, want := b.rows(t), 5; got != want {
			t.Fatalf("%d rows after the caller's rollback, want %d", got, want)
		}
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := b.in.Reap(ctx, tx)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := b.rows(t), 0; got != want {
			t.Fatalf("%d rows after the caller's commit, want %d", got, want)
		}
	})
}

// TestReapSkipsLockedRows proves that on PostgreSQL a reap does not wait
// for an expired row that another transaction holds locked: it deletes the
// others, and the locked row on a later run. SQLite has no row locks (a
// reap waits for the write lock like every writer).
func TestReapSkipsLockedRows(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		if db.Engine() != racefree.Postgres {
			t.Skip("SQLite has no row locks")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b := setup(t, db, &inbox.Options{Retention: time.Hour, ReapBatch: 2})
		for i := range 5 {
			if _, err := b.in.Receive(ctx, "s", fmt.Sprintf("e%d", i), nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Hour)
		holder, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Rollback() }()
		if _, err := holder.ExecContext(ctx, `SELECT id FROM racefree_inbox WHERE event_id = 'e0' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		if n, err := b.in.Reap(ctx, db); err != nil || n != 4 {
			t.Fatalf("reap beside a locked row: %d, %v; want 4 without waiting", n, err)
		}
		if err := holder.Rollback(); err != nil {
			t.Fatal(err)
		}
		if n, err := b.in.Reap(ctx, db); err != nil || n != 1 {
			t.Fatalf("reap after the lock: %d, %v; want 1", n, err)
		}
	})
}

// TestDefaultRetentionIsSevenDays proves the documented default: with nil
// Options an event ID is kept, and its redelivery a duplicate, for exactly
// seven days, and reaped at the first millisecond after.
func TestDefaultRetentionIsSevenDays(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		if _, err := b.in.Receive(ctx, "s", "e", nil, nil); err != nil {
			t.Fatal(err)
		}
		clock.Advance(7*24*time.Hour - time.Millisecond)
		if n, err := b.in.Reap(ctx, db); err != nil || n != 0 {
			t.Fatalf("reap 1ms before seven days: %d, %v; want 0", n, err)
		}
		if res, err := b.in.Receive(ctx, "s", "e", nil, nil); err != nil || !res.Duplicate {
			t.Fatalf("redelivery within seven days: %+v, %v; want a duplicate", res, err)
		}
		clock.Advance(time.Millisecond)
		if n, err := b.in.Reap(ctx, db); err != nil || n != 1 {
			t.Fatalf("reap at seven days: %d, %v; want 1", n, err)
		}
	})
}

// readInOrder pages through source's events with List, 7 at a time, until
// done is closed and one last pass finds nothing new, and fails the test
// when an arrival number skips one (an event the reader would never see)
// or an event comes twice. It returns each event's arrival number by ID.
func readInOrder(t *testing.T, in *inbox.Inbox, source string, done <-chan struct{}) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	seen := map[string]int64{}
	after, finished := int64(0), false
	for !finished {
		select {
		case <-done:
			finished = true // one last pass after every writer returned
		default:
		}
		for {
			evs, err := in.List(ctx, source, after, 7)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) == 0 {
				break
			}
			for _, e := range evs {
				if e.Seq != after+1 {
					t.Fatalf("after %d the reader got seq %d (%s): a gap, or an event it will never see", after, e.Seq, e.ID)
				}
				if s, dup := seen[e.ID]; dup {
					t.Fatalf("%s seen twice, at seq %d and %d", e.ID, s, e.Seq)
				}
				seen[e.ID] = e.Seq
				after = e.Seq
			}
		}
	}
	return seen
}
