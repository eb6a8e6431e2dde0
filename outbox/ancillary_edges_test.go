package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
)

// TestEdgesAncillaryStepDeadlineAndWarning: the step runs with nine tenths
// of Options.AncillaryLease (30s when 0) (so that it ends before its lease lapses and a
// relay takes the message too), and its Warning carries the step's own
// error, unchanged, when the failure was recorded; when recording the
// failure fails as well (here: the pool is closed under the step), the
// Warning joins both errors and has no Outcome, and the lease is left to
// lapse.
func TestEdgesAncillaryStepDeadlineAndWarning(t *testing.T) {
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db := testdb.Open(t, dsn, nil)
		const lease = 10 * time.Second
		o := newOutbox(t, db, &outbox.Options{AncillaryLease: lease, Backoff: fixedBackoff})
		main := func(context.Context, *sql.Tx) error { return nil }
		msg := outbox.Message{Topic: "upload"}

		var left time.Duration
		w, err := o.Ancillary(ctx, msg, main, func(ctx context.Context, _ *outbox.Delivery) error {
			dl, ok := ctx.Deadline()
			if !ok {
				t.Error("the step's context has no deadline")
			}
			left = time.Until(dl)
			return nil
		})
		if err != nil || w != nil {
			t.Fatalf("a step that succeeds: %v, %v", w, err)
		}
		// Nine tenths of the lease, less what the call took until the step
		// read its deadline (well under a tenth of it).
		if left > lease*9/10 || left < lease*8/10 {
			t.Fatalf("the step had %s to run; want nine tenths of the %s lease", left, lease)
		}

		// Without AncillaryLease: the default, 30s.
		w, err = newOutbox(t, db, nil).Ancillary(ctx, msg, main, func(ctx context.Context, _ *outbox.Delivery) error {
			dl, _ := ctx.Deadline()
			left = time.Until(dl)
			return nil
		})
		if err != nil || w != nil || left > 27*time.Second || left < 24*time.Second {
			t.Fatalf("the default lease: %v, %v, the step had %s; want nine tenths of 30s", w, err, left)
		}

		stepErr := errors.New("storage unavailable")
		w, err = o.Ancillary(ctx, msg, main, func(context.Context, *outbox.Delivery) error { return stepErr })
		if err != nil || w == nil || w.Outcome == nil {
			t.Fatalf("a step that fails: %v, %v", w, err)
		}
		if w.Err != stepErr {
			t.Fatalf("the Warning's error is %q; want the step's own error, unchanged", w.Err)
		}

		// A second pool on the same database, closed by the step itself:
		// recording the failure then fails too.
		other := testdb.Open(t, dsn, nil)
		o2 := newOutbox(t, other, &outbox.Options{AncillaryLease: lease, Backoff: fixedBackoff})
		w, err = o2.Ancillary(ctx, msg, main, func(context.Context, *outbox.Delivery) error {
			_ = other.Close()
			return stepErr
		})
		if err != nil || w == nil {
			t.Fatalf("a step whose failure cannot be recorded: %v, %v", w, err)
		}
		if w.Outcome != nil || !errors.Is(w.Err, stepErr) || !strings.Contains(w.Err.Error(), "recording the failure") {
			t.Fatalf("a step whose failure cannot be recorded: outcome %+v, error %q; want no outcome and both errors", w.Outcome, w.Err)
		}
		r := get(t, ctx, o, w.MessageID)
		if r.State != outbox.Leased || r.Attempts != 1 || r.LastError != "" {
			t.Fatalf("the message whose failure was not recorded: %+v; want it still leased, to lapse", r)
		}
	})
}

// TestEdgesPermanentAndRetryAfterOfNil: Permanent and RetryAfter keep the
// error they mark (errors.Is finds it, the message names it), and given
// nil they still make an error of their class, never a nil one or one
// that cannot print itself.
func TestEdgesPermanentAndRetryAfterOfNil(t *testing.T) {
	cause := errors.New("410 gone")
	for name, tc := range map[string]struct {
		err  error
		want outbox.Verdict
		text string
	}{
		"Permanent(err)":        {outbox.Permanent(cause), outbox.Verdict{Permanent: true}, "permanent: 410 gone"},
		"Permanent(nil)":        {outbox.Permanent(nil), outbox.Verdict{Permanent: true}, "permanent: permanent failure"},
		"RetryAfter(d, err)":    {outbox.RetryAfter(time.Minute, cause), outbox.Verdict{RetryAfter: time.Minute}, "retry after 1m0s: 410 gone"},
		"RetryAfter(d, nil)":    {outbox.RetryAfter(time.Minute, nil), outbox.Verdict{RetryAfter: time.Minute}, "retry after 1m0s: retry later"},
		"RetryAfter(0, nil)":    {outbox.RetryAfter(0, nil), outbox.Verdict{}, "retry after 0s: retry later"},
		"Permanent, wrapped":    {errors.Join(errors.New("send"), outbox.Permanent(cause)), outbox.Verdict{Permanent: true}, "send\npermanent: 410 gone"},
		"RetryAfter, wrapped":   {errors.Join(errors.New("send"), outbox.RetryAfter(time.Second, cause)), outbox.Verdict{RetryAfter: time.Second}, "send\nretry after 1s: 410 gone"},
		"neither: transient":    {cause, outbox.Verdict{}, "410 gone"},
		"neither, nil: nothing": {errors.New("x"), outbox.Verdict{}, "x"},
	} {
		if tc.err == nil {
			t.Fatalf("%s: nil", name)
		}
		if got := outbox.Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify = %+v, want %+v", name, got, tc.want)
		}
		if got := tc.err.Error(); got != tc.text {
			t.Errorf("%s: %q, want %q", name, got, tc.text)
		}
		if strings.Contains(name, "(err)") || strings.Contains(name, "(d, err)") {
			if !errors.Is(tc.err, cause) {
				t.Errorf("%s: errors.Is does not find the cause", name)
			}
		}
	}
}
