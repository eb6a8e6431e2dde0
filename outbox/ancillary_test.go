package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
)

// TestAncillaryFailureIsAWarningAndARetry: the main work commits and the
// follow-up step runs right after; the step's failure is a warning, never
// the request's failure, and the relays retry it; a failure of the main
// work writes nothing and runs no step.
func TestAncillaryFailureIsAWarningAndARetry(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		if _, err := db.ExecContext(ctx, `CREATE TABLE app_users (name TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		users := func() (n int) {
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM app_users`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		register := func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO app_users (name) VALUES ('ann')`)
			return err
		}
		o := newOutbox(t, db, &outbox.Options{Backoff: fixedBackoff})
		var calls atomic.Int32
		var fail atomic.Pointer[error]
		setFail := func(err error) { fail.Store(&err) }
		setFail(nil)
		upload := func(_ context.Context, d *outbox.Delivery) error {
			calls.Add(1)
			return *fail.Load()
		}
		msg := outbox.Message{Topic: "upload", Payload: []byte("avatar")}

		// The step succeeds: delivered at once.
		w, err := o.Ancillary(ctx, msg, register, upload)
		if err != nil || w != nil || calls.Load() != 1 || users() != 1 {
			t.Fatalf("success: %v, %v, %d calls, %d users", w, err, calls.Load(), users())
		}
		if s, _ := o.Stats(ctx, db); s.Delivered != 1 {
			t.Fatalf("stats %+v", s)
		}

		// The step fails: a warning; the user is registered; the message
		// is retried by a relay with the same handler.
		setFail(errors.New("storage unavailable"))
		w, err = o.Ancillary(ctx, msg, register, upload)
		if err != nil || w == nil || w.Outcome == nil || w.Outcome.Dead || users() != 2 {
			t.Fatalf("step failure: warning %v, error %v, %d users", w, err, users())
		}
		r := get(t, ctx, o, w.MessageID)
		if r.State != outbox.Ready || r.Attempts != 1 || !r.AvailableAt.Equal(t0.Add(time.Second)) || r.LastError != "storage unavailable" {
			t.Fatalf("the failed step's message: %+v", r)
		}
		setFail(nil)
		clock.Advance(time.Second)
		ds := claim(t, ctx, o, "relay", 10, time.Minute)
		if len(ds) != 1 || ds[0].ID != w.MessageID || ds[0].Attempt != 2 || string(ds[0].Payload) != "avatar" {
			t.Fatalf("the relay's retry: %+v", ds)
		}
		if err := upload(ctx, ds[0]); err != nil {
			t.Fatal(err)
		}
		if err := o.Complete(ctx, db, ds[0]); err != nil {
			t.Fatal(err)
		}

		// A permanent failure, or a panic, is a warning too.
		setFail(outbox.Permanent(errors.New("file too large")))
		w, err = o.Ancillary(ctx, msg, register, upload)
		if err != nil || w == nil || !w.Outcome.Dead || users() != 3 {
			t.Fatalf("permanent step failure: %v, %v", w, err)
		}
		w, err = o.Ancillary(ctx, msg, register, func(context.Context, *outbox.Delivery) error { panic("bug") })
		if err != nil || w == nil || users() != 4 {
			t.Fatalf("panicking step: %v, %v", w, err)
		}

		// The main work fails: nothing is written, the step does not run.
		before := calls.Load()
		s0, _ := o.Stats(ctx, db)
		_, err = o.Ancillary(ctx, msg, func(ctx context.Context, tx *sql.Tx) error {
			if err := register(ctx, tx); err != nil {
				return err
			}
			return errors.New("email taken")
		}, upload)
		if err == nil || err.Error() != "email taken" || users() != 4 || calls.Load() != before {
			t.Fatalf("main failure: %v, %d users, %d calls", err, users(), calls.Load())
		}
		if s, _ := o.Stats(ctx, db); *s != *s0 {
			t.Fatalf("a failed main work changed the outbox: %+v, was %+v", s, s0)
		}
		if _, err := o.Ancillary(ctx, outbox.Message{Topic: "upload", Key: "k", Ordered: true}, register, upload); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Fatalf("an ordered ancillary step: %v", err)
		}
	})
}
