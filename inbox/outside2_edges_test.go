package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// The tests of this file try, at their edges, what a second reading of
// the inbox from outside found no test of: Reap's count over several
// tenants, a ReapBatch above the default, each option at its documented
// maximum, List's smallest limit, a permanent failure's reason with
// bytes that are not UTF-8, a webhook-signature that lists another scheme
// before v1, the Handler's Logger and the Delivery Process gets.

// receiveMany records the events id-0 … id-(n-1) of source for ctx's
// tenant, eight deliveries at a time (through the combiner, when it is
// on).
func receiveMany(t *testing.T, ctx context.Context, in *inbox.Inbox, source, id string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if res, err := in.Receive(ctx, source, fmt.Sprintf("%s-%d", id, i), []byte("x"), nil); err != nil || res.Duplicate {
					t.Errorf("receive %s-%d: %+v, %v", id, i, res, err)
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// TestOutside2EdgesReapCountsEveryTenant reaps on the pool the expired
// events of three tenants, each with a count of its own: Reap returns
// their sum, not the count of one tenant, and leaves no expired event.
func TestOutside2EdgesReapCountsEveryTenant(t *testing.T) {
	t.Parallel()
	onOwnerAndApp(t, func(t *testing.T, db *racefree.DB, clock *racefree.ManualClock) {
		acme, globex := tenants(t)
		in, err := inbox.New(db, &inbox.Options{Retention: time.Hour, ReapBatch: 2})
		if err != nil {
			t.Fatal(err)
		}
		receiveMany(t, context.Background(), in, "s", "d", 1)
		receiveMany(t, acme, in, "s", "a", 3)
		receiveMany(t, globex, in, "s", "g", 5)
		clock.Advance(time.Hour)
		if n, err := in.Reap(context.Background(), db); err != nil || n != 9 {
			t.Fatalf("Reap of 1 + 3 + 5 expired events in three tenants: %d, %v; want 9", n, err)
		}
		for _, ctx := range []context.Context{context.Background(), acme, globex} {
			if evs, err := in.List(ctx, "s", 0, 10); err != nil || len(evs) != 0 {
				t.Fatalf("after the reap a tenant lists %v, %v; want nothing", ids(evs), err)
			}
		}
	})
}

// TestOutside2EdgesReapBatchAboveTheDefault reaps 1001 expired events
// with a ReapBatch of 1001, one more than DefaultReapBatch: one batch
// takes them all, Reap returns 1001 and none is left.
func TestOutside2EdgesReapBatchAboveTheDefault(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		b := setup(t, db, &inbox.Options{Retention: time.Minute, ReapBatch: inbox.DefaultReapBatch + 1})
		receiveMany(t, ctx, b.in, "s", "e", inbox.DefaultReapBatch+1)
		clock.Advance(time.Minute)
		if n, err := b.in.Reap(ctx, db); err != nil || n != inbox.DefaultReapBatch+1 {
			t.Fatalf("Reap of %d expired events in batches of %d: %d, %v; want all of them", inbox.DefaultReapBatch+1, inbox.DefaultReapBatch+1, n, err)
		}
		if n := b.rows(t); n != 0 {
			t.Fatalf("%d events left after the reap, want none", n)
		}
	})
}

// TestOutside2EdgesOptionsAtTheirMaximum: New takes a Retention of
// exactly 10 years and a ReapBatch of exactly 100,000, and NewVerifier a
// Tolerance of exactly 24 hours, which then verifies a delivery signed
// 24 hours ago and refuses one a second older.
func TestOutside2EdgesOptionsAtTheirMaximum(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		for _, o := range []inbox.Options{{Retention: 10 * 365 * 24 * time.Hour}, {ReapBatch: 100_000}, {Retention: 10 * 365 * 24 * time.Hour, ReapBatch: 100_000}} {
			if _, err := inbox.New(db, &o); err != nil {
				t.Fatalf("New with %+v, each option at its maximum: %v, want it taken", o, err)
			}
		}
	})
	at := time.Unix(1796032020, 0)
	v, err := inbox.NewVerifier([]string{secretA}, &inbox.VerifierOptions{Tolerance: 24 * time.Hour, Clock: racefree.NewManualClock(at)})
	if err != nil {
		t.Fatalf("NewVerifier with a Tolerance of 24 hours: %v, want it taken", err)
	}
	if id, err := v.Verify(signed(t, secretA, "e1", at.Add(-24*time.Hour), `{}`), []byte(`{}`)); err != nil || id != "e1" {
		t.Fatalf("a delivery signed 24 hours ago: %q, %v; want it verified", id, err)
	}
	if _, err := v.Verify(signed(t, secretA, "e1", at.Add(-24*time.Hour-time.Second), `{}`), []byte(`{}`)); !errors.Is(err, inbox.ErrSignature) {
		t.Fatalf("a delivery signed 24 hours and a second ago: %v, want ErrSignature", err)
	}
}

// TestOutside2EdgesListLimitBelowOne: List refuses a limit of 0 (and -1)
// with an InputError, as it refuses MaxListLimit + 1, rather than answer
// an empty page a reader would take for the end; a limit of 1 lists one
// event.
func TestOutside2EdgesListLimitBelowOne(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		receiveMany(t, ctx, b.in, "s", "e", 2)
		for _, limit := range []int{0, -1, inbox.MaxListLimit + 1} {
			if evs, err := b.in.List(ctx, "s", 0, limit); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("List with a limit of %d: %v, %v; want ErrInvalidInput", limit, ids(evs), err)
			}
		}
		if evs, err := b.in.List(ctx, "s", 0, 1); err != nil || len(evs) != 1 || evs[0].Seq != 1 {
			t.Fatalf("List with a limit of 1: %v, %v; want the first event", ids(evs), err)
		}
	})
}

// TestOutside2EdgesFailureListedWithItsReasonAndPayload records a
// permanent failure whose message holds a byte that is not UTF-8 and a
// NUL: Result.Reason and the event List returns hold the message with
// U+FFFD in place of the bad byte and without the NUL, and List returns
// the payload as received and the status failed.
func TestOutside2EdgesFailureListedWithItsReasonAndPayload(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		const want = "bad \uFFFD byte at 7"
		fail := func(*sql.Tx) error { return inbox.Permanent(errors.New("bad \xff byte\x00 at 7")) }
		res, err := b.in.Receive(ctx, "s", "e1", []byte(`{"n":7}`), fail)
		if err != nil || !res.Failed || res.Reason != want {
			t.Fatalf("a permanent failure: %+v, %v; want failed with reason %q", res, err, want)
		}
		evs, err := b.in.List(ctx, "s", 0, 10)
		if err != nil || len(evs) != 1 {
			t.Fatalf("List: %v, %v; want the failed event", ids(evs), err)
		}
		if e := evs[0]; e.ID != "e1" || e.Status != inbox.StatusFailed || e.Reason != want || string(e.Payload) != `{"n":7}` {
			t.Fatalf("listed %+v; want e1 failed with reason %q and its payload", e, want)
		}
	})
}

// TestOutside2EdgesVerifyReadsPastAnotherScheme sends the v1 signature
// after entries of other schemes and versions (v1a, v2, a bare token):
// Verify skips them and takes the v1 one that matches; the same list
// without a matching v1 entry is refused.
func TestOutside2EdgesVerifyReadsPastAnotherScheme(t *testing.T) {
	t.Parallel()
	at := time.Unix(1796032020, 0)
	v := verifierAt(t, at)
	h := signed(t, secretA, "e1", at, `{}`)
	good := h.Get("webhook-signature")
	_, b64, _ := strings.Cut(good, ",")
	for _, sigs := range []string{
		"v1a," + b64 + " " + good,
		"v2,c29tZXRoaW5nIGVsc2U= " + good,
		"token " + good,
	} {
		h.Set("webhook-signature", sigs)
		if id, err := v.Verify(h, []byte(`{}`)); err != nil || id != "e1" {
			t.Errorf("webhook-signature %q: %q, %v; want e1 verified", sigs, id, err)
		}
		h.Set("webhook-signature", strings.TrimSuffix(sigs, " "+good))
		if _, err := v.Verify(h, []byte(`{}`)); !errors.Is(err, inbox.ErrSignature) {
			t.Errorf("webhook-signature %q without its v1 entry: %v, want ErrSignature", h.Get("webhook-signature"), err)
		}
	}
}

// TestOutside2EdgesVerifierNeedsASecret: NewVerifier refuses an empty
// list of secrets, nil or not, with an InputError.
func TestOutside2EdgesVerifierNeedsASecret(t *testing.T) {
	t.Parallel()
	for _, secrets := range [][]string{nil, {}} {
		if v, err := inbox.NewVerifier(secrets, nil); !errors.Is(err, racefree.ErrInvalidInput) || v != nil {
			t.Errorf("NewVerifier(%#v): %v, %v; want ErrInvalidInput", secrets, v, err)
		}
	}
}

// TestOutside2EdgesHandlerLogsToItsLoggerAndHandsOverTheDelivery posts a
// delivery Process fails transiently and then one it takes: the 500 is
// logged to the Handler's Logger, and Process gets the delivery's source,
// ID and body as signed.
func TestOutside2EdgesHandlerLogsToItsLoggerAndHandsOverTheDelivery(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		b := setup(t, db, nil)
		v, err := inbox.NewVerifier([]string{secretA}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var logged bytes.Buffer
		var got []inbox.Delivery
		handler := &inbox.Handler{Inbox: b.in, Source: "stripe", Verifier: v,
			Logger: slog.New(slog.NewTextHandler(&logged, nil)),
			Process: func(ctx context.Context, tx *sql.Tx, d inbox.Delivery) error {
				got = append(got, d)
				if d.ID == "down" {
					return errors.New("downstream down")
				}
				return b.effect(ctx, d.ID)(tx)
			}}
		post := func(id, body string) int {
			t.Helper()
			req := httptest.NewRequest("POST", "/", strings.NewReader(body))
			req.Header = signed(t, secretA, id, time.Now(), body)
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			return rec.Code
		}
		if code := post("down", `{"a":1}`); code != http.StatusInternalServerError {
			t.Fatalf("a transient failure of Process: %d, want 500", code)
		}
		if !strings.Contains(logged.String(), "downstream down") || !strings.Contains(logged.String(), "id=down") {
			t.Fatalf("the Handler's Logger got %q; want the failure, with its event ID", logged.String())
		}
		if code := post("e1", `{"b":2}`); code != http.StatusNoContent {
			t.Fatalf("a delivery Process takes: %d, want 204", code)
		}
		if len(got) != 2 || got[1].Source != "stripe" || got[1].ID != "e1" || string(got[1].Payload) != `{"b":2}` ||
			string(got[0].Payload) != `{"a":1}` {
			t.Fatalf("Process got %+v; want each delivery's source, ID and body", got)
		}
	})
}
