package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if d := os.Getenv(childEnv); d != "" {
		os.Exit(childMain(d))
	}
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// bundle is a database with an effects table that processing functions
// write to, one row per processing.
type bundle struct {
	db *racefree.DB
	in *inbox.Inbox
}

func setup(t testing.TB, db *racefree.DB, opts *inbox.Options) *bundle {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), `CREATE TABLE effects (event_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{db: db, in: in}
}

// effect returns a processing function that records one effect of id.
func (b *bundle) effect(ctx context.Context, id string) func(tx *sql.Tx) error {
	q := `INSERT INTO effects (event_id) VALUES (?)`
	if b.db.Engine() == racefree.Postgres {
		q = `INSERT INTO effects (event_id) VALUES ($1)`
	}
	return func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, q, id)
		return err
	}
}

// effects counts the effects per event ID.
func (b *bundle) effects(t testing.TB) map[string]int {
	t.Helper()
	rows, err := b.db.QueryContext(context.Background(), `SELECT event_id, count(*) FROM effects GROUP BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	return out
}

func (b *bundle) rows(t testing.TB) int {
	t.Helper()
	var n int
	if err := b.db.QueryRowContext(context.Background(), `SELECT count(*) FROM racefree_inbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestReceiveOnceThenDuplicate(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		res, err := b.in.Receive(ctx, "stripe", "evt_1", []byte(`{"a":1}`), b.effect(ctx, "evt_1"))
		if err != nil || res.Duplicate || res.Failed || res.Seq != 1 {
			t.Fatalf("first delivery: %+v, %v; want new with seq 1", res, err)
		}
		called := false
		res, err = b.in.Receive(ctx, "stripe", "evt_1", []byte(`{"a":1}`), func(*sql.Tx) error { called = true; return nil })
		if err != nil || !res.Duplicate || called {
			t.Fatalf("redelivery: %+v, %v, fn called %v; want a duplicate without a call", res, err, called)
		}
		// The same ID from another source is another event.
		if res, err := b.in.Receive(ctx, "github", "evt_1", nil, b.effect(ctx, "gh_evt_1")); err != nil || res.Duplicate {
			t.Fatalf("other source: %+v, %v", res, err)
		}
		if got, want := b.effects(t)["evt_1"], 1; got != want {
			t.Fatalf("effects of evt_1: %d, want %d", got, want)
		}
	})
}

func TestTransientFailureRollsBackTheRecord(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		boom := errors.New("downstream timeout")
		_, err := b.in.Receive(ctx, "s", "e1", nil, func(tx *sql.Tx) error {
			if err := b.effect(ctx, "e1")(tx); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) || inbox.IsPermanent(err) {
			t.Fatalf("failing delivery: %v; want the transient error back", err)
		}
		if got := b.rows(t); got != 0 {
			t.Fatalf("%d inbox rows after a failed delivery, want 0", got)
		}
		res, err := b.in.Receive(ctx, "s", "e1", nil, b.effect(ctx, "e1"))
		if err != nil || res.Duplicate {
			t.Fatalf("redelivery after a transient failure: %+v, %v; want it processed", res, err)
		}
		if got, want := b.effects(t)["e1"], 1; got != want {
			t.Fatalf("effects: %d, want %d", got, want)
		}
	})
}

func TestPermanentFailureIsRecordedAndAcknowledged(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		res, err := b.in.Receive(ctx, "s", "bad", []byte("x"), func(tx *sql.Tx) error {
			if err := b.effect(ctx, "bad")(tx); err != nil {
				return err
			}
			return inbox.Permanent(fmt.Errorf("unknown event type %q", "foo.bar"))
		})
		if err != nil || !res.Failed || res.Duplicate || res.Reason != `unknown event type "foo.bar"` {
			t.Fatalf("permanent failure: %+v, %v; want acknowledged and recorded", res, err)
		}
		if got := b.effects(t)["bad"]; got != 0 {
			t.Fatalf("a permanently failed processing left %d effects, want 0", got)
		}
		called := false
		res, err = b.in.Receive(ctx, "s", "bad", []byte("x"), func(*sql.Tx) error { called = true; return nil })
		if err != nil || !res.Duplicate || called {
			t.Fatalf("redelivery of a failed event: %+v, %v, called %v; want a duplicate", res, err, called)
		}
		evs, err := b.in.List(ctx, "s", 0, 10)
		if err != nil || len(evs) != 1 {
			t.Fatalf("list: %v, %v", evs, err)
		}
		if got, want := evs[0].Status, inbox.StatusFailed; got != want {
			t.Fatalf("status %q, want %q", got, want)
		}
		if got, want := evs[0].Reason, `unknown event type "foo.bar"`; got != want {
			t.Fatalf("reason %q, want %q", got, want)
		}
	})
}

func TestUnmarkedErrorsAreTransient(t *testing.T) {
	t.Parallel()
	for _, err := range []error{errors.New("x"), context.DeadlineExceeded, sql.ErrConnDone, fmt.Errorf("wrapped: %w", errors.New("y"))} {
		if inbox.IsPermanent(err) {
			t.Errorf("%v counts as permanent", err)
		}
	}
	if !inbox.IsPermanent(fmt.Errorf("ctx: %w", inbox.Permanent(errors.New("z")))) {
		t.Error("a wrapped Permanent is not permanent")
	}
	if inbox.Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
}

func TestListPagesInArrivalOrder(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		for i := range 5 {
			if _, err := b.in.Receive(ctx, "s", fmt.Sprintf("e%d", i), []byte(fmt.Sprint(i)), nil); err != nil {
				t.Fatal(err)
			}
		}
		_, _ = b.in.Receive(ctx, "other", "o1", nil, nil)
		var got []string
		after := int64(0)
		for {
			evs, err := b.in.List(ctx, "s", after, 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) == 0 {
				break
			}
			if evs[0].Seq <= after {
				t.Fatalf("List after %d returned seq %d: a page repeats the event it starts after", after, evs[0].Seq)
			}
			for _, e := range evs {
				got = append(got, e.ID+"="+string(e.Payload))
				if !e.ReceivedAt.Equal(t0) {
					t.Fatalf("received_at %v, want %v", e.ReceivedAt, t0)
				}
			}
			after = evs[len(evs)-1].Seq
		}
		if fmt.Sprint(got) != "[e0=0 e1=1 e2=2 e3=3 e4=4]" {
			t.Fatalf("pages: %v", got)
		}
	})
}

func TestReapDeletesExpiredInBatches(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, &inbox.Options{Retention: time.Hour, ReapBatch: 3})
		for i := range 7 {
			if _, err := b.in.Receive(ctx, "s", fmt.Sprintf("old%d", i), nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(30 * time.Minute)
		if _, err := b.in.Receive(ctx, "s", "young", nil, nil); err != nil {
			t.Fatal(err)
		}
		clock.Advance(30*time.Minute - time.Millisecond)
		if n, err := b.in.Reap(ctx, db); err != nil || n != 0 {
			t.Fatalf("reap 1ms before expiry: %d, %v; want 0", n, err)
		}
		clock.Advance(time.Millisecond)
		if n, err := b.in.Reap(ctx, db); err != nil || n != 7 {
			t.Fatalf("reap at expiry: %d, %v; want 7", n, err)
		}
		if got, want := b.rows(t), 1; got != want {
			t.Fatalf("%d rows left, want %d", got, want)
		}
		// Within retention a redelivery is a duplicate; after the reap it is
		// a new event.
		if res, _ := b.in.Receive(ctx, "s", "young", nil, nil); !res.Duplicate {
			t.Fatal("young redelivery is not a duplicate")
		}
		if res, _ := b.in.Receive(ctx, "s", "old0", nil, nil); res.Duplicate {
			t.Fatal("reaped event is still a duplicate")
		}
	})
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		long := string(make([]byte, 300))
		for _, c := range [][2]string{{"", "e"}, {"s", ""}, {"s", "a\x00b"}, {"s", "\xff"}, {"s", long}} {
			_, err := b.in.Receive(ctx, c[0], c[1], nil, func(*sql.Tx) error { t.Fatal("fn called"); return nil })
			if !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Receive(%q, %q): %v, want ErrInvalidInput", c[0], c[1], err)
			}
		}
		if _, err := b.in.List(ctx, "s", 0, 0); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("List limit 0: %v", err)
		}
		if _, err := inbox.New(db, &inbox.Options{Retention: -time.Second}); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("negative retention: %v", err)
		}
		if got := b.rows(t); got != 0 {
			t.Fatalf("%d rows", got)
		}
	})
}

// TestStormOfRedeliveries sends 200 deliveries of 20 event IDs from 16
// goroutines. Every fourth processing attempt fails transiently, and the
// sender redelivers until acknowledged. Each event must be processed exactly
// once.
func TestStormOfRedeliveries(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		const workers, deliveries, events = 16, 200, 20
		var attempts, acked, dups atomic.Int64
		work := make(chan string)
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range work {
					for { // the sender retries until a 2xx
						res, err := b.in.Receive(ctx, "s", id, nil, func(tx *sql.Tx) error {
							if err := b.effect(ctx, id)(tx); err != nil {
								return err
							}
							if attempts.Add(1)%4 == 0 {
								return errTransient
							}
							return nil
						})
						if err == nil {
							acked.Add(1)
							if res.Duplicate {
								dups.Add(1)
							}
							break
						}
						if !errors.Is(err, errTransient) && !errors.Is(err, racefree.ErrRetryable) {
							t.Error(err)
							return
						}
					}
				}
			}()
		}
		for i := range deliveries {
			work <- fmt.Sprintf("evt_%02d", i%events)
		}
		close(work)
		wg.Wait()
		got := b.effects(t)
		if len(got) != events {
			t.Fatalf("%d events processed, want %d", len(got), events)
		}
		for id, n := range got {
			if n != 1 {
				t.Errorf("%s processed %d times, want once", id, n)
			}
		}
		if got, want := dups.Load(), int64(deliveries-events); got != want {
			t.Errorf("%d duplicates acknowledged, want %d", got, want)
		}
		if got, want := b.rows(t), events; got != want {
			t.Errorf("%d inbox rows, want %d", got, want)
		}
		if attempts.Load() <= events {
			t.Errorf("only %d attempts: the failure path was not exercised", attempts.Load())
		}
	})
}

var errTransient = errors.New("transient")

// TestConcurrentDeliveriesOfOneEvent races 64 deliveries of one event.
func TestConcurrentDeliveriesOfOneEvent(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		const n = 64
		var wg sync.WaitGroup
		var fresh, dup atomic.Int64
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := b.in.Receive(ctx, "s", "one", nil, b.effect(ctx, "one"))
				switch {
				case err != nil:
					t.Error(err)
				case res.Duplicate:
					dup.Add(1)
				default:
					fresh.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if fresh.Load() != 1 || dup.Load() != n-1 {
			t.Fatalf("%d new, %d duplicates; want 1 and %d", fresh.Load(), dup.Load(), n-1)
		}
		if got := b.effects(t)["one"]; got != 1 {
			t.Fatalf("processed %d times, want once", got)
		}
	})
}
