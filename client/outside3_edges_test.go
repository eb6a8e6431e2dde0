package client_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/client"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/inbox"
	problems "github.com/racefree/racefree/internal/problem"
	"github.com/racefree/racefree/internal/testing/conformance"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/onetime"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/seq"
	"github.com/racefree/racefree/server"
)

// TestOutsideRequestsAndAnswersMatchTheLibrary: what the client sends
// reaches the library's records under the caller's names, and what it
// reads back is the library's: a claim key and an event fingerprint that
// hold a space, a plus sign, a slash or a question mark name the same
// claim and event to the library; a message's Ordered flag, its payload
// of 64 KiB (a reply far past 8 KiB), its not_before to the millisecond,
// the outbox's OldestPending, each dead letter's time of death and the
// after cursor of Dead; Discard deletes a dead letter (it does not
// redrive it); a code's time of use, a rotation retried within the
// refresh grace (Replayed, the same successor); an audit entry's Subject
// and its data that is not JSON; a 400's InputError carrying the
// server's detail; an inbox page of exactly inbox.MaxListLimit events is
// asked for; and Enqueue, Redrive and Next, whose first reply is lost,
// are done once.
func TestOutsideRequestsAndAnswersMatchTheLibrary(t *testing.T) {
	t.Parallel()
	ring := testRing(t)
	clock := racefree.NewManualClock(conformance.T0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(conformance.T0)
		ctx := context.Background()
		s := server.New(db, server.Options{Token: "secret", AuditKeys: ring, InboxSecrets: map[string][]string{"stripe": {webhookSecret}},
			RefreshGrace: time.Minute, RefreshSecret: bytes.Repeat([]byte("s"), onetime.MinSecretBytes)})
		c, _, url := outsideClient(t, s.Handler(), nil, 0, client.Options{})
		lose := &loseFirstReply{seen: map[string]bool{}}
		lossy, err := client.New(url, &client.Options{Key: "secret", Backoff: time.Millisecond, HTTPClient: &http.Client{Transport: lose}})
		if err != nil {
			t.Fatal(err)
		}

		t.Run("names in the path", func(t *testing.T) {
			key := "job 1+é/x?y%"
			if _, err := c.Acquire(ctx, key, "w1", time.Minute); err != nil {
				t.Fatal(err)
			}
			if got, err := claim.New(db).Get(ctx, db, key); err != nil || got.Holder != "w1" || !got.Live {
				t.Fatalf("the library's claim on %q after the client's acquire: %+v, %v; want w1's", key, got, err)
			}
			fp := "card/declined?eu 1+%"
			o, err := c.Observe(ctx, dedup.Event{Source: "billing", Level: "error", Message: "declined", Fingerprint: fp}, time.Minute)
			if err != nil || o.Fingerprint != fp || !o.Process {
				t.Fatalf("observe %q: %+v, %v", fp, o, err)
			}
			if err := c.Record(ctx, fp, o.Fence, dedup.Result{Classification: "fraud"}); err != nil {
				t.Fatalf("record of %q: %v; want it recorded", fp, err)
			}
			if rec, err := dedup.New(db).Get(ctx, db, fp); err != nil || rec.Classification != "fraud" || rec.ResultFence != o.Fence {
				t.Fatalf("the library's event %q: %+v, %v; want the result the client recorded", fp, rec, err)
			}
		})

		t.Run("outbox", func(t *testing.T) {
			o, err := s.Outbox()
			if err != nil {
				t.Fatal(err)
			}
			payload := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
			big, err := c.Enqueue(ctx, outbox.Message{Topic: "mail", Key: "order-1", Ordered: true, Payload: payload})
			if err != nil {
				t.Fatal(err)
			}
			m, err := c.Message(ctx, big)
			if err != nil || !m.Ordered || !bytes.Equal(m.Payload, payload) {
				t.Fatalf("an ordered message of 64 KiB: %v; want it ordered with its payload", err)
			}
			notBefore := clock.Now().Add(1500 * time.Millisecond)
			later, err := c.Enqueue(ctx, outbox.Message{Topic: "later", NotBefore: notBefore})
			if err != nil {
				t.Fatal(err)
			}
			if m, err := c.Message(ctx, later); err != nil || !m.AvailableAt.Equal(notBefore) {
				t.Fatalf("a message not before %v: %+v, %v; want it due at exactly that", notBefore, m, err)
			}
			if lib, err := o.Get(ctx, db, later); err != nil || !lib.AvailableAt.Equal(notBefore) {
				t.Fatalf("the library's message not before %v: %+v, %v", notBefore, lib, err)
			}

			clock.Advance(90 * time.Second)
			st, err := c.OutboxStats(ctx)
			lib, lerr := o.Stats(ctx, db)
			if err != nil || lerr != nil || st.OldestPending != lib.OldestPending || st.OldestPending < 90*time.Second {
				t.Fatalf("stats 90s after the first enqueue: the client's %+v, %v; the library's %+v, %v", st, err, lib, lerr)
			}

			// Both mail messages die a minute after they were enqueued.
			small, err := c.Enqueue(ctx, outbox.Message{Topic: "mail"})
			if err != nil {
				t.Fatal(err)
			}
			ds, err := o.Claim(ctx, "w", 2, time.Hour, "mail")
			if err != nil || len(ds) != 2 {
				t.Fatalf("claim: %v, %v", ds, err)
			}
			clock.Advance(time.Minute)
			for _, d := range ds {
				if _, err := o.Fail(ctx, d, outbox.Permanent(errors.New("refused"))); err != nil {
					t.Fatal(err)
				}
			}
			rs, err := c.Dead(ctx, outbox.Filter{Topic: "mail"}, 0, 10)
			want, lerr := o.Dead(ctx, db, outbox.Filter{Topic: "mail"}, 0, 10)
			if err != nil || lerr != nil || len(rs) != 2 || len(want) != 2 {
				t.Fatalf("dead: the client's %+v, %v; the library's %+v, %v", rs, err, want, lerr)
			}
			for i, r := range rs {
				if r.ID != want[i].ID || !r.AvailableAt.Equal(want[i].AvailableAt) || !r.AvailableAt.Equal(clock.Now()) || r.AvailableAt.Equal(r.CreatedAt) || r.Ordered != want[i].Ordered {
					t.Fatalf("dead letter %d: the client's %+v, the library's %+v; want AvailableAt the time it died, %v", r.ID, r, want[i], clock.Now())
				}
			}
			if page, err := c.Dead(ctx, outbox.Filter{Topic: "mail"}, big, 10); err != nil || len(page) != 1 || page[0].ID != small {
				t.Fatalf("dead after %d: %+v, %v; want only message %d", big, page, err, small)
			}

			if err := lossy.Redrive(ctx, big); err != nil {
				t.Fatalf("a redrive whose reply was lost: %v; want it done, once", err)
			}
			if m, err := o.Get(ctx, db, big); err != nil || m.State != outbox.Ready {
				t.Fatalf("the redriven message: %+v, %v; want it ready", m, err)
			}
			if err := c.Discard(ctx, small); err != nil {
				t.Fatalf("discard of a dead letter: %v", err)
			}
			if m, err := c.Message(ctx, small); !errors.Is(err, racefree.ErrNotFound) {
				t.Fatalf("the discarded message: %+v, %v; want it gone, not found", m, err)
			}

			if _, err := lossy.Enqueue(ctx, outbox.Message{Topic: "once"}); err != nil {
				t.Fatalf("an enqueue whose reply was lost: %v", err)
			}
			if ds, err := o.Claim(ctx, "w", 10, time.Hour, "once"); err != nil || len(ds) != 1 {
				t.Fatalf("messages of topic once after an enqueue whose reply was lost: %d, %v; want exactly 1", len(ds), err)
			}

			var ie *racefree.InputError
			var e *client.Error
			_, err = c.Enqueue(ctx, outbox.Message{Topic: "mail", Headers: map[string]string{"Racefree-Outbox-Fence": "1"}})
			if !errors.As(err, &ie) || !errors.As(err, &e) || e.Detail == "" || ie.Reason != e.Detail {
				t.Fatalf("enqueue with a Racefree- header: %v (%+v); want an InputError whose reason is the server's detail", err, ie)
			}
		})

		t.Run("inbox page at its limit", func(t *testing.T) {
			body := []byte(`{"id":"evt_1"}`)
			if err := c.Deliver(ctx, "stripe", signed(t, "evt_1", body), body); err != nil {
				t.Fatal(err)
			}
			if evs, err := c.InboxEvents(ctx, "stripe", 0, inbox.MaxListLimit); err != nil || len(evs) != 1 || evs[0].ID != "evt_1" {
				t.Fatalf("inbox events with a limit of exactly %d: %+v, %v; want evt_1", inbox.MaxListLimit, evs, err)
			}
		})

		t.Run("sequences", func(t *testing.T) {
			if first, err := lossy.Next(ctx, "invoices", "lost", 1); err != nil || first != 1 {
				t.Fatalf("next after a lost reply: %d, %v; want 1, the lost attempt's number", first, err)
			}
			if cur, err := seq.New(db).Current(ctx, db, "invoices", "lost"); err != nil || cur != 1 {
				t.Fatalf("the library's current after it: %d, %v; want 1, no number skipped", cur, err)
			}
		})

		t.Run("tokens", func(t *testing.T) {
			code, err := c.IssueCode(ctx, "verify", "u1", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			clock.Advance(2 * time.Second)
			red, err := c.ConsumeCode(ctx, "verify", code.Token)
			if err != nil || red.Outcome != onetime.Consumed || !red.UsedAt.Equal(clock.Now()) || !red.IssuedAt.Equal(code.IssuedAt) || !red.ExpiresAt.Equal(code.ExpiresAt) {
				t.Fatalf("consume 2s after the issue: %+v, %v; want used at %v, issued at %v", red, err, clock.Now(), code.IssuedAt)
			}
			r, err := c.IssueRefresh(ctx, "u1", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			first, err := c.Rotate(ctx, r.Token)
			if err != nil || first.Outcome != onetime.Rotated || first.Next == nil {
				t.Fatalf("rotate: %+v, %v", first, err)
			}
			again, err := c.Rotate(ctx, r.Token)
			if err != nil || again.Outcome != onetime.Replayed || again.Next == nil || again.Next.Token != first.Next.Token {
				t.Fatalf("the same rotation again within the grace: %+v, %v; want Replayed with the same successor", again, err)
			}
		})

		t.Run("audit", func(t *testing.T) {
			rec, err := c.Append(ctx, "files", audit.Entry{Actor: "alice", Action: "upload", Subject: "file-1"})
			if err != nil || rec.Subject != "file-1" {
				t.Fatalf("append with a subject: %+v, %v; want it returned with its subject", rec, err)
			}
			log, err := audit.New(db, ring)
			if err != nil {
				t.Fatal(err)
			}
			data := []byte{0, 0xff, 'x'}
			if _, err := log.Append(ctx, db, "files", audit.Entry{Actor: "batch", Action: "import", Subject: "file-2", Data: data}); err != nil {
				t.Fatal(err)
			}
			got, err := c.Entries(ctx, "files", 0, 0)
			if err != nil || len(got) != 2 || got[0].Subject != "file-1" || got[1].Subject != "file-2" || !bytes.Equal(got[1].Data, data) {
				t.Fatalf("entries: %+v, %v; want both subjects and the second entry's bytes %q", got, err, data)
			}
		})
	})
}

// TestOutsideProblemsOfAProxyOrAGateway: the problems a real server
// answers only in states a test cannot reach on its own, answered by a
// proxy as the server writes them, are the library's errors: an
// Idempotency-Key reused for another request matches racefree.ErrMismatch
// after one request; a key without the route's scope matches
// ErrForbidden, never ErrUnauthorized; a schema problem matches
// racefree.ErrSchemaOutdated; and a proxy's 503 page with no problem body
// keeps the answer's X-Request-Id.
func TestOutsideProblemsOfAProxyOrAGateway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := heldServer(t)
	for _, c := range []struct {
		kind     problems.Kind
		requests int
		is, not  error
	}{
		{problems.KeyMismatch, 1, racefree.ErrMismatch, nil},
		{problems.InsufficientScope, 1, client.ErrForbidden, client.ErrUnauthorized},
		{problems.Schema, 2, racefree.ErrSchemaOutdated, nil},
	} {
		cl, f, _ := outsideClient(t, h, written(c.kind), 100, client.Options{Attempts: 2})
		_, err := cl.Acquire(ctx, "held", "me", time.Minute)
		if !errors.Is(err, c.is) || (c.not != nil && errors.Is(err, c.not)) || f.requests() != c.requests {
			t.Errorf("%s: %v after %d requests; want it to match %v (and not %v) after %d", c.kind.Name, err, f.requests(), c.is, c.not, c.requests)
		}
	}
	page := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("X-Request-Id", "gateway-7")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("<html><body>Service Unavailable</body></html>"))
	}
	cl, _, _ := outsideClient(t, h, page, 100, client.Options{Attempts: 1})
	_, err := cl.Get(ctx, "held")
	var e *client.Error
	if !errors.As(err, &e) || e.RequestID != "gateway-7" || !strings.Contains(err.Error(), "gateway-7") {
		t.Fatalf("a gateway's 503 page with X-Request-Id gateway-7: %v (%+v); want the request id kept", err, e)
	}
}

// TestOutsideBaseURLsAndCancelCauses: a server behind a path prefix is
// reached under it; an *UnreachableError names a base URL without its
// password; and a call cancelled with a cause while it waits between
// attempts returns that cause, not only context.Canceled.
func TestOutsideBaseURLsAndCancelCauses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := heldServer(t)

	mux := http.NewServeMux()
	mux.Handle("/racefree/", http.StripPrefix("/racefree", h))
	prefixed := httptest.NewServer(mux)
	defer prefixed.Close()
	pc, err := client.New(prefixed.URL+"/racefree", &client.Options{Key: "secret", Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pc.Get(ctx, "held"); err != nil || got.Holder != "someone" {
		t.Fatalf("get through the prefix /racefree: %+v, %v; want the claim", got, err)
	}

	gone := httptest.NewServer(nil)
	host := strings.TrimPrefix(gone.URL, "http://")
	gone.Close()
	dead, err := client.New("http://alice:hunter2@"+host, &client.Options{Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = dead.Get(ctx, "held")
	var u *client.UnreachableError
	if !errors.As(err, &u) || strings.Contains(u.Server, "hunter2") || strings.Contains(err.Error(), "hunter2") || !strings.Contains(u.Server, host) {
		t.Fatalf("an unreachable server with a password in its URL: %v; want it named without the password", err)
	}

	cl, f, _ := outsideClient(t, h, problem(503, "unavailable", "3600"), 100, client.Options{Attempts: 3, MaxBackoff: time.Hour})
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { _, err := cl.Get(cctx, "held"); done <- err }()
	waitBetweenAttempts(t)
	cause := errors.New("the operator gave up")
	cancel(cause)
	if err := <-done; !errors.Is(err, cause) || f.requests() != 1 {
		t.Fatalf("cancelled with a cause between attempts: %v after %d requests; want the cause after 1", err, f.requests())
	}
}

// waitBetweenAttempts returns once a goroutine is blocked in the client's
// own wait between attempts: a select whose innermost frame is the
// client package's own, not one inside net/http during an attempt.
func waitBetweenAttempts(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			header, rest, _ := strings.Cut(g, "\n")
			if strings.Contains(header, "[select") && strings.HasPrefix(rest, "github.com/racefree/racefree/client.") {
				return
			}
		}
		runtime.Gosched()
	}
}
