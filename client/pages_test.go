package client_test

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/client"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/server"
)

// listed reads seq to its end and returns the cursors of the items it
// yields and the requests f saw meanwhile; an error fails the test, and
// so does a listing past 100 items, which would never end.
func listed[T any](t *testing.T, f *faulty, seq iter.Seq2[T, error], cursor func(T) int64) ([]int64, int) {
	t.Helper()
	before := f.requests()
	var got []int64
	for it, err := range seq {
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		if got = append(got, cursor(it)); len(got) > 100 {
			t.Fatalf("a listing that does not end: %v", got)
		}
	}
	return got, f.requests() - before
}

// TestClientPagesOnToTheEnd: AllDead, AllInboxEvents and AllEntries yield
// every item above after once, in order, across pages the server cuts at
// its byte bound (short pages, not the end), and stop at the first empty
// page, one request after the last full one: four dead letters of 1 MiB
// on topic mail (two pages) beside a small one on sms that the filter
// leaves out, three webhook bodies of 256 KiB of control bytes (1.5 MiB
// of JSON each: two pages), fifty audit entries of 64 KiB (two pages).
// Begun after the second item, each yields the rest; a loop that breaks
// after the first item has sent one request.
func TestClientPagesOnToTheEnd(t *testing.T) {
	t.Parallel()
	ring := testRing(t)
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{Token: "secret", AuditKeys: ring, InboxSecrets: map[string][]string{"stripe": {webhookSecret}}})
		c, f, _ := outsideClient(t, s.Handler(), nil, 0, client.Options{})
		ctx := context.Background()
		o, err := s.Outbox()
		if err != nil {
			t.Fatal(err)
		}
		var all, mail []int64
		for i := range 5 {
			m := outbox.Message{Topic: "mail", Key: "k", Payload: bytes.Repeat([]byte{0xf0 + byte(i)}, outbox.MaxPayloadBytes)}
			if i == 0 {
				m = outbox.Message{Topic: "sms", Key: "k", Payload: []byte(`{}`)}
			}
			id, err := o.Enqueue(ctx, o.DB(), m)
			if err != nil {
				t.Fatal(err)
			}
			if all = append(all, id); i > 0 {
				mail = append(mail, id)
			}
		}
		ds, err := o.Claim(ctx, "w", 5, time.Minute, "mail", "sms")
		if err != nil || len(ds) != 5 {
			t.Fatalf("claim: %d, %v", len(ds), err)
		}
		for _, d := range ds {
			if _, err := o.Fail(ctx, d, outbox.Permanent(fmt.Errorf("gone"))); err != nil {
				t.Fatal(err)
			}
		}
		in, err := inbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := in.Receive(ctx, "stripe", fmt.Sprintf("evt_%d", i), bytes.Repeat([]byte{1}, 256<<10), nil); err != nil {
				t.Fatal(err)
			}
		}
		log, err := audit.New(db, ring)
		if err != nil {
			t.Fatal(err)
		}
		var entries []int64
		for i := range 50 {
			rec, err := log.Append(ctx, db, "big", audit.Entry{Actor: "a", Action: "put", Data: bytes.Repeat([]byte{0xf0 + byte(i%8)}, audit.MaxDataLen)})
			if err != nil {
				t.Fatal(err)
			}
			entries = append(entries, rec.Seq)
		}
		evs, err := in.List(ctx, "stripe", 0, 10)
		if err != nil || len(evs) != 3 {
			t.Fatalf("the inbox: %d events, %v", len(evs), err)
		}
		var events []int64
		for _, e := range evs {
			events = append(events, e.Seq)
		}

		deadID := func(r *outbox.Record) int64 { return r.ID }
		eventSeq := func(e inbox.Event) int64 { return e.Seq }
		entrySeq := func(r audit.Record) int64 { return r.Seq }
		for _, l := range []struct {
			name string
			want []int64
			list func(after int64) ([]int64, int)
		}{
			{"dead mail", mail, func(after int64) ([]int64, int) {
				return listed(t, f, c.AllDead(ctx, outbox.Filter{Topic: "mail"}, after), deadID)
			}},
			{"dead", all, func(after int64) ([]int64, int) { return listed(t, f, c.AllDead(ctx, outbox.Filter{}, after), deadID) }},
			{"inbox", events, func(after int64) ([]int64, int) {
				return listed(t, f, c.AllInboxEvents(ctx, "stripe", after), eventSeq)
			}},
			{"audit", entries, func(after int64) ([]int64, int) { return listed(t, f, c.AllEntries(ctx, "big", after), entrySeq) }},
		} {
			if got, requests := l.list(0); !slices.Equal(got, l.want) || requests != 3 {
				t.Errorf("%s: %v in %d requests, want %v in 3 (two pages and an empty one)", l.name, got, requests, l.want)
			}
			if got, _ := l.list(l.want[1]); !slices.Equal(got, l.want[2:]) {
				t.Errorf("%s after %d: %v, want %v", l.name, l.want[1], got, l.want[2:])
			}
		}
		before := f.requests()
		for r, err := range c.AllDead(ctx, outbox.Filter{}, 0) {
			if err != nil || r.ID != all[0] {
				t.Fatalf("the first dead letter: %v, %v", r, err)
			}
			break
		}
		if n := f.requests() - before; n != 1 {
			t.Fatalf("a loop broken after its first item sent %d requests, want 1", n)
		}
	})
}

// TestClientPagingErrorsEndTheListing: a page's error is yielded once,
// with the zero item, and ends the listing (a wrong key: one request,
// never retried); a server that answers every page with the same items
// is read twice, its items yielded once, then an error ends it rather
// than a listing that never ends.
func TestClientPagingErrorsEndTheListing(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	_, f, url := outsideClient(t, server.New(db, server.Options{Token: "secret"}).Handler(), nil, 0, client.Options{})
	wrong, err := client.New(url, &client.Options{Key: "wrong", Attempts: 3, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var yields int
	for r, err := range wrong.AllDead(ctx, outbox.Filter{}, 0) {
		if yields++; r != nil || err == nil {
			t.Fatalf("a wrong key yielded %v, %v; want an error alone", r, err)
		}
	}
	if yields != 1 || f.requests() != 1 {
		t.Fatalf("a wrong key: %d yields in %d requests, want one in one", yields, f.requests())
	}

	var pages atomic.Int32
	same := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pages.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"entries":[{"seq":1,"scope":"s"},{"seq":2,"scope":"s"}]}`)
	}))
	t.Cleanup(same.Close)
	c, err := client.New(same.URL, &client.Options{Key: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	var last error
	for r, err := range c.AllEntries(ctx, "s", 0) {
		if last = err; err == nil {
			got = append(got, r.Seq)
		}
		if len(got) > 10 {
			break
		}
	}
	if !slices.Equal(got, []int64{1, 2}) || last == nil || pages.Load() != 2 {
		t.Fatalf("a server that does not page on: %v, then %v, in %d pages; want [1 2], then an error, in 2", got, last, pages.Load())
	}
}
