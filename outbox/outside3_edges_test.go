package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
)

// The tests of this file hold the outbox's core at edges written from
// outside, from its code alone (a second round): the Content-Type of a
// message spelled in another case, the Delivery the ancillary step gets,
// a lapsed lease in Stats and a late Fail once a newer tenure failed.

// TestOutside3HTTPMessageContentTypeInAnyCase holds HTTPHandler to the
// message's own Content-Type, whatever the case its name is stored in:
// HTTPOptions.ContentType is sent only when the message has none.
func TestOutside3HTTPMessageContentTypeInAnyCase(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Content-Type"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: srv.URL, Client: srv.Client(), ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, name := range []string{"content-type", "CONTENT-TYPE", "Content-Type"} {
		d := &outbox.Delivery{ID: int64(i + 1), Tenant: "default", Topic: "t", Attempt: 1, Fence: 1,
			Headers: map[string]string{name: "application/json"}}
		if err := h(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := h(ctx, &outbox.Delivery{ID: 4, Tenant: "default", Topic: "t", Attempt: 1, Fence: 1}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"application/json", "application/json", "application/json", "text/plain"}
	if len(seen) != len(want) {
		t.Fatalf("sent %q, want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("request %d sent Content-Type %q, want %q (all: %q)", i+1, seen[i], want[i], seen)
		}
	}
}

// TestOutside3AncillaryStepGetsTheWholeMessage holds the Delivery that
// Ancillary hands its step to the message: its topic, key, payload,
// headers, attempt 1 of the outbox's budget, and the id and fence stored,
// the same as a relay's retry of it would get.
func TestOutside3AncillaryStepGetsTheWholeMessage(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{MaxAttempts: 7})
		var got *outbox.Delivery
		step := func(_ context.Context, d *outbox.Delivery) error {
			cp := *d
			got = &cp
			return nil
		}
		m := outbox.Message{Topic: "upload", Key: "user-42", Payload: []byte("avatar"), Headers: map[string]string{"X-Kind": "png"}}
		w, err := o.Ancillary(ctx, m, func(context.Context, *sql.Tx) error { return nil }, step)
		if err != nil || w != nil || got == nil {
			t.Fatalf("ancillary: %v, %v, step ran: %v", w, err, got != nil)
		}
		r := get(t, ctx, o, got.ID)
		if got.Topic != "upload" || got.Key != "user-42" || string(got.Payload) != "avatar" || got.Headers["X-Kind"] != "png" ||
			got.Attempt != 1 || got.MaxAttempts != 7 || got.Tenant != "default" {
			t.Errorf("the step got %+v; want topic upload, key user-42, payload avatar, header X-Kind, attempt 1 of 7", got)
		}
		if r.Key != got.Key || r.Fence != got.Fence || r.State != outbox.Delivered {
			t.Errorf("stored %+v; the step got key %q, fence %d", r, got.Key, got.Fence)
		}
	})
}

// TestOutside3StatsCountsALapsedLeaseAsLeased holds Stats' Leased to
// every leased message, a lapsed lease (its worker died, no claim took
// it over yet) included: such a message is pending, not counted nowhere.
func TestOutside3StatsCountsALapsedLeaseAsLeased(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		if ds := claim(t, ctx, o, "w", 2, time.Minute); len(ds) != 2 {
			t.Fatalf("claimed %v", ids(ds))
		}
		clock.Advance(time.Minute - time.Millisecond)
		s, err := o.Stats(ctx, db)
		if err != nil || *s != (outbox.Stats{Leased: 2, OldestPending: time.Minute - time.Millisecond}) {
			t.Errorf("two live leases: %+v, %v", s, err)
		}
		clock.Advance(time.Hour)
		s, err = o.Stats(ctx, db)
		if err != nil || *s != (outbox.Stats{Leased: 2, OldestPending: time.Hour + time.Minute - time.Millisecond}) {
			t.Errorf("two lapsed leases nobody took over: %+v, %v; want Leased 2", s, err)
		}
	})
}

// TestOutside3ALateFailAfterANewerTenureFailedIsStale holds a late Fail
// to its own tenure: once a lease lapsed, another claim took the message
// over and that newer tenure failed (ready again), the older holder's
// Fail is a StaleFenceError and changes nothing, never the outcome the
// newer tenure recorded.
func TestOutside3ALateFailAfterANewerTenureFailedIsStale(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, nil)
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		old := claim(t, ctx, o, "old", 1, time.Minute)
		if len(old) != 1 || old[0].ID != id {
			t.Fatalf("claimed %v, want [%d]", ids(old), id)
		}
		clock.Advance(time.Minute)
		newer := claim(t, ctx, o, "new", 1, time.Minute)
		if len(newer) != 1 || newer[0].ID != id || newer[0].Fence <= old[0].Fence {
			t.Fatalf("the takeover claimed %v", ids(newer))
		}
		if out, err := o.Fail(ctx, newer[0], outbox.RetryAfter(time.Hour, errors.New("newer"))); err != nil || out.Dead {
			t.Fatalf("the newer tenure's fail: %+v, %v", out, err)
		}
		before := get(t, ctx, o, id)
		out, err := o.Fail(ctx, old[0], outbox.RetryAfter(time.Second, errors.New("older")))
		var stale *outbox.StaleFenceError
		if !errors.As(err, &stale) || !errors.Is(err, racefree.ErrStaleFence) || out != nil {
			t.Errorf("the older tenure's late fail: %+v, %v; want a StaleFenceError", out, err)
		}
		after := get(t, ctx, o, id)
		if after.State != outbox.Ready || after.LastError != "retry after 1h0m0s: newer" || !after.AvailableAt.Equal(before.AvailableAt) ||
			len(after.History) != len(before.History) {
			t.Errorf("the message after the late fail: %+v; before it: %+v", after, before)
		}
	})
}

// TestOutside3HTTPErrorKeepsTheFirstBytesOfALargeAnswer holds an
// HTTPError's Body to the first bytes of the answer (512): a receiver's
// long error page is cut, not kept whole in memory and in the history.
func TestOutside3HTTPErrorKeepsTheFirstBytesOfALargeAnswer(t *testing.T) {
	page := strings.Repeat("0123456789", 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(page))
	}))
	defer srv.Close()
	h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: srv.URL, Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	err = h(context.Background(), &outbox.Delivery{ID: 1, Tenant: "default", Topic: "t", Attempt: 1, Fence: 1})
	var he *outbox.HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusServiceUnavailable {
		t.Fatalf("a 503: %v, want an *HTTPError of 503", err)
	}
	if he.Body != page[:512] {
		t.Errorf("the body kept %d bytes, want the first 512 of %d", len(he.Body), len(page))
	}
}
