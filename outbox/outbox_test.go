package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
	"go.uber.org/goleak"
)

// TestMain runs the tests, or, in a child process started by the kill
// test, a relay until it is killed.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := child(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// manual returns a config whose clock moves only when the test moves it.
func manual() (*racefree.ManualClock, *racefree.Config) {
	c := racefree.NewManualClock(t0)
	return c, &racefree.Config{Clock: c}
}

func newOutbox(t testing.TB, db *racefree.DB, opts *outbox.Options) *outbox.Outbox {
	t.Helper()
	o, err := outbox.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func enqueue(t testing.TB, ctx context.Context, o *outbox.Outbox, exec racefree.Executor, m outbox.Message) int64 {
	t.Helper()
	id, err := o.Enqueue(ctx, exec, m)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return id
}

func claim(t testing.TB, ctx context.Context, o *outbox.Outbox, worker string, n int, lease time.Duration) []*outbox.Delivery {
	t.Helper()
	ds, err := o.Claim(ctx, worker, n, lease)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return ds
}

func get(t testing.TB, ctx context.Context, o *outbox.Outbox, id int64) *outbox.Record {
	t.Helper()
	r, err := o.Get(ctx, o.DB(), id)
	if err != nil {
		t.Fatalf("get %d: %v", id, err)
	}
	return r
}

func ids(ds []*outbox.Delivery) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func TestEnqueueClaimComplete(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		var want []int64
		for i := range 3 {
			want = append(want, enqueue(t, ctx, o, db, outbox.Message{
				Topic: "mail", Key: fmt.Sprint("k", i), Payload: []byte{byte(i), 0, 0xff},
				Headers: map[string]string{"Content-Type": "application/json", "X-N": fmt.Sprint(i)},
			}))
		}
		ds := claim(t, ctx, o, "w1", 10, time.Minute)
		if fmt.Sprint(ids(ds)) != fmt.Sprint(want) {
			t.Fatalf("claimed %v, want %v", ids(ds), want)
		}
		for i, d := range ds {
			if d.Topic != "mail" || d.Key != fmt.Sprint("k", i) || string(d.Payload) != string([]byte{byte(i), 0, 0xff}) ||
				d.Headers["X-N"] != fmt.Sprint(i) || d.Headers["Content-Type"] != "application/json" ||
				d.Attempt != 1 || d.Fence != 1 || d.Tenant != tenant.Default || d.Worker != "w1" ||
				d.MaxAttempts != outbox.DefaultMaxAttempts || d.IdempotencyKey() != fmt.Sprint(d.ID) {
				t.Errorf("delivery %d: %+v", i, d)
			}
		}
		if again := claim(t, ctx, o, "w2", 10, time.Minute); len(again) != 0 {
			t.Fatalf("a live lease was claimed again: %v", ids(again))
		}
		for _, d := range ds {
			if err := o.Complete(ctx, db, d); err != nil {
				t.Fatal(err)
			}
			if r := get(t, ctx, o, d.ID); r.State != outbox.Delivered || r.LeasedBy != "" {
				t.Errorf("after Complete: %+v", r)
			}
		}
		if err := o.Complete(ctx, db, ds[0]); !errors.Is(err, racefree.ErrNotHeld) {
			t.Errorf("completing twice: %v, want ErrNotHeld", err)
		}
		if again := claim(t, ctx, o, "w2", 10, time.Minute); len(again) != 0 {
			t.Fatalf("a delivered message was claimed: %v", ids(again))
		}
	})
}

// TestRollbackDeliversNothing: a message enqueued in a transaction that
// rolls back is never delivered, even with a relay running; the same
// enqueue committed is.
func TestRollbackDeliversNothing(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		got := make(chan string, 10)
		r, err := o.NewRelay(func(_ context.Context, d *outbox.Delivery) error {
			got <- string(d.Payload)
			return nil
		}, &outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stop := runRelay(t, r)
		defer stop()
		for _, commit := range []bool{false, true} {
			err := db.InTx(ctx, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS app_orders (id INTEGER)`); err != nil {
					return err
				}
				enqueue(t, ctx, o, tx, outbox.Message{Topic: "t", Payload: []byte(fmt.Sprint("commit=", commit))})
				if !commit {
					return errors.New("roll back")
				}
				return nil
			})
			if commit != (err == nil) {
				t.Fatal(err)
			}
		}
		if p := <-got; p != "commit=true" {
			t.Fatalf("delivered %q", p)
		}
		stop()
		select {
		case p := <-got:
			t.Fatalf("delivered %q as well", p)
		default:
		}
		s, err := o.Stats(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if s.Ready+s.Leased+s.Dead != 0 || s.Delivered != 1 {
			t.Fatalf("stats after a rollback and a commit: %+v", s)
		}
	})
}

// runRelay runs r until the returned stop is called (idempotent), and
// fails the test if Run returns an error.
func runRelay(t testing.TB, r *outbox.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	return func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		long := strings.Repeat("x", 2000)
		for name, m := range map[string]outbox.Message{
			"no topic":          {Payload: []byte("x")},
			"long topic":        {Topic: long},
			"NUL topic":         {Topic: "a\x00b"},
			"bad UTF-8 key":     {Topic: "t", Key: "\xff"},
			"long key":          {Topic: "t", Key: long},
			"big payload":       {Topic: "t", Payload: make([]byte, outbox.MaxPayloadBytes+1)},
			"header name":       {Topic: "t", Headers: map[string]string{"a b": "x"}},
			"header CRLF":       {Topic: "t", Headers: map[string]string{"X": "a\r\nb"}},
			"header NUL":        {Topic: "t", Headers: map[string]string{"X": "a\x00"}},
			"max attempts":      {Topic: "t", MaxAttempts: outbox.MaxAttemptsLimit + 1},
			"negative max":      {Topic: "t", MaxAttempts: -1},
			"ordered, no key":   {Topic: "t", Ordered: true},
			"not before a year": {Topic: "t", NotBefore: time.Now().Add(outbox.MaxDelay + time.Hour)},
		} {
			if _, err := o.Enqueue(ctx, db, m); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%s: %v, want an InputError", name, err)
			}
		}
		for name, f := range map[string]func() error{
			"claim n 0":       func() error { _, err := o.Claim(ctx, "w", 0, time.Second); return err },
			"claim lease":     func() error { _, err := o.Claim(ctx, "w", 1, time.Millisecond); return err },
			"claim worker":    func() error { _, err := o.Claim(ctx, "", 1, time.Second); return err },
			"redrive nothing": func() error { _, err := o.Redrive(ctx, db, outbox.Filter{}); return err },
			"discard nothing": func() error { _, err := o.Discard(ctx, db, outbox.Filter{}); return err },
			"dead limit":      func() error { _, err := o.Dead(ctx, db, outbox.Filter{}, 0, 0); return err },
			// Each field of a filter alone, and a bad one after a good one.
			"redrive long topic":     func() error { _, err := o.Redrive(ctx, db, outbox.Filter{Topic: long}); return err },
			"redrive bad key":        func() error { _, err := o.Redrive(ctx, db, outbox.Filter{Key: "\xff"}); return err },
			"redrive topic, bad key": func() error { _, err := o.Redrive(ctx, db, outbox.Filter{Topic: "t", Key: long}); return err },
			"discard NUL topic":      func() error { _, err := o.Discard(ctx, db, outbox.Filter{Topic: "a\x00b"}); return err },
			"discard long key":       func() error { _, err := o.Discard(ctx, db, outbox.Filter{Key: long}); return err },
			"dead bad topic":         func() error { _, err := o.Dead(ctx, db, outbox.Filter{Topic: "\xff"}, 0, 1); return err },
			"dead topic, NUL key":    func() error { _, err := o.Dead(ctx, db, outbox.Filter{Topic: "t", Key: "a\x00"}, 0, 1); return err },
			"redrive id 0":           func() error { _, err := o.Redrive(ctx, db, outbox.Filter{IDs: []int64{1, 0}}); return err },
			"fail nil":               func() error { _, err := o.Fail(ctx, &outbox.Delivery{ID: 1, Tenant: "default"}, nil); return err },
		} {
			if err := f(); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%s: %v, want an InputError", name, err)
			}
		}
		s, err := o.Stats(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if *s != (outbox.Stats{}) {
			t.Fatalf("bad input wrote something: %+v", s)
		}
	})
}
