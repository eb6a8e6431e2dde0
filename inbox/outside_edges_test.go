package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// The tests of this file try, at their edges, what a reading of the inbox
// from outside found no test of: a permanent failure kept for the
// retention as a processed event is, a delivery without webhook-id whose
// signature covers the empty ID, the request's context handed to Process,
// and a realm that holds the characters a quoted-string escapes.

// TestOutsideEdgesFailureIsKeptForItsRetention records a permanent
// failure and a processed event at the same instant and reaps at the
// last millisecond of their retention and at its end: until then the
// failed event is kept as the processed one is (its redelivery a
// duplicate, the processing not called again); at the end both go, and
// the redelivery of the failed event is processed again.
func TestOutsideEdgesFailureIsKeptForItsRetention(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		b := setup(t, db, &inbox.Options{Retention: time.Hour})
		permanent := func(*sql.Tx) error { return inbox.Permanent(errors.New("unknown type")) }
		if res, err := b.in.Receive(ctx, "s", "failed", []byte("f"), permanent); err != nil || !res.Failed || res.Seq != 1 {
			t.Fatalf("a permanent failure: %+v, %v; want failed with seq 1", res, err)
		}
		if res, err := b.in.Receive(ctx, "s", "processed", []byte("p"), b.effect(ctx, "processed")); err != nil || res.Duplicate || res.Seq != 2 {
			t.Fatalf("a processed event: %+v, %v; want new with seq 2", res, err)
		}
		redeliver := func(what string, wantDuplicate bool) {
			t.Helper()
			called := false
			res, err := b.in.Receive(ctx, "s", "failed", []byte("f"), func(*sql.Tx) error { called = true; return nil })
			if err != nil || res.Duplicate != wantDuplicate || called == wantDuplicate {
				t.Fatalf("%s: %+v, %v, processing called %v; want duplicate %v", what, res, err, called, wantDuplicate)
			}
		}

		clock.Set(t0.Add(time.Hour - time.Millisecond))
		if n, err := b.in.Reap(ctx, db); err != nil || n != 0 {
			t.Fatalf("reap at the retention's last millisecond: %d, %v; want nothing reaped", n, err)
		}
		if evs, err := b.in.List(ctx, "s", 0, 10); err != nil || len(evs) != 2 || evs[0].Status != inbox.StatusFailed || evs[1].Status != inbox.StatusProcessed {
			t.Fatalf("List before the end of the retention: %v, %v; want the failed and the processed event", ids(evs), err)
		}
		redeliver("the failed event's redelivery within its retention", true)

		clock.Set(t0.Add(time.Hour))
		if n, err := b.in.Reap(ctx, db); err != nil || n != 2 {
			t.Fatalf("reap at the end of the retention: %d, %v; want both events", n, err)
		}
		redeliver("the failed event's redelivery after its retention", false)
	})
}

// TestOutsideEdgesVerifyRefusesAnEmptyID sends a delivery whose
// webhook-id header is present and empty, with a signature that a
// sender computed over that empty ID: Verify refuses it with
// ErrSignature (webhook-id is required), and the Handler answers 401
// with its challenge, not the 400 of an event ID the inbox refuses, and
// records nothing.
func TestOutsideEdgesVerifyRefusesAnEmptyID(t *testing.T) {
	t.Parallel()
	at := time.Unix(1796032020, 0)
	v := verifierAt(t, at)
	const body = `{"type":"invoice.paid"}`
	h := signed(t, secretA, "", at, body)
	if _, ok := h["Webhook-Id"]; !ok {
		t.Fatal("the header webhook-id is not there: the case tests nothing")
	}
	if id, err := v.Verify(h, []byte(body)); !errors.Is(err, inbox.ErrSignature) {
		t.Fatalf("Verify of an empty webhook-id signed as such: %q, %v; want ErrSignature", id, err)
	}
	if id, err := v.Verify(signed(t, secretA, "e1", at, body), []byte(body)); err != nil || id != "e1" {
		t.Fatalf("Verify of the same delivery with an ID: %q, %v", id, err)
	}

	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		b := setup(t, db, nil)
		now := time.Now()
		v, err := inbox.NewVerifier([]string{secretA}, nil)
		if err != nil {
			t.Fatal(err)
		}
		handler := &inbox.Handler{Inbox: b.in, Source: "s", Verifier: v}
		req := httptest.NewRequest("POST", "/", strings.NewReader(body))
		req.Header = signed(t, secretA, "", now, body)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized || rec.Header().Get("WWW-Authenticate") == "" {
			t.Fatalf("a delivery with an empty webhook-id: %d, WWW-Authenticate %q; want 401 with a challenge", rec.Code, rec.Header().Get("WWW-Authenticate"))
		}
		if n := b.rows(t); n != 0 {
			t.Fatalf("%d events recorded, want none", n)
		}
	})
}

type requestKey struct{}

// TestOutsideEdgesProcessGetsTheRequestsContext delivers through the
// Handler a request whose context names a tenant and carries a value of
// the caller's: Process sees both (the event is the tenant's, so is what
// Process does with it), and when the request's context is cancelled
// before the Handler runs, Process is never called and nothing is
// recorded.
func TestOutsideEdgesProcessGetsTheRequestsContext(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		b := setup(t, db, nil)
		v, err := inbox.NewVerifier([]string{secretA}, nil)
		if err != nil {
			t.Fatal(err)
		}
		acme, err := tenant.With(context.Background(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		var seen []string
		handler := &inbox.Handler{Inbox: b.in, Source: "s", Verifier: v,
			Process: func(ctx context.Context, tx *sql.Tx, d inbox.Delivery) error {
				value, _ := ctx.Value(requestKey{}).(string)
				seen = append(seen, d.ID+" "+tenant.From(ctx)+" "+value)
				if err := ctx.Err(); err != nil {
					return err
				}
				return b.effect(ctx, d.ID)(tx)
			}}
		post := func(ctx context.Context, id string) int {
			t.Helper()
			req := httptest.NewRequestWithContext(ctx, "POST", "/", strings.NewReader(`{}`))
			req.Header = signed(t, secretA, id, time.Now(), `{}`)
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			return rec.Code
		}
		if code := post(context.WithValue(acme, requestKey{}, "r1"), "e1"); code != http.StatusNoContent {
			t.Fatalf("a delivery for acme: %d, want 204", code)
		}
		if len(seen) != 1 || seen[0] != "e1 acme r1" {
			t.Fatalf("Process saw %q, want [\"e1 acme r1\"]: the request's tenant and value", seen)
		}
		if evs, err := b.in.List(acme, "s", 0, 10); err != nil || len(evs) != 1 || evs[0].ID != "e1" {
			t.Fatalf("acme lists %v, %v; want e1", ids(evs), err)
		}

		cancelled, cancel := context.WithCancel(context.WithValue(acme, requestKey{}, "r2"))
		cancel()
		if code := post(cancelled, "e2"); code < 500 {
			t.Fatalf("a delivery whose request was cancelled: %d, want a 5xx", code)
		}
		if len(seen) != 1 {
			t.Fatalf("Process saw %q after the cancelled request, want it not called again", seen)
		}
		if got := b.effects(t); got["e1"] != 1 || got["e2"] != 0 {
			t.Fatalf("effects %v, want e1 once alone", got)
		}
	})
}

// TestOutsideEdgesRealmEscapesWhatAQuotedStringMust answers a bad
// signature for sources holding a backslash and a double quote: the
// challenge's realm escapes each (RFC 9110 §5.6.4), so a source ending
// in a backslash does not escape the closing quote.
func TestOutsideEdgesRealmEscapesWhatAQuotedStringMust(t *testing.T) {
	t.Parallel()
	v, err := inbox.NewVerifier([]string{secretA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for source, want := range map[string]string{
		`plain`:      `Standard-Webhooks realm="plain"`,
		`back\slash`: `Standard-Webhooks realm="back\\slash"`,
		`ends\`:      `Standard-Webhooks realm="ends\\"`,
		`say "hi"`:   `Standard-Webhooks realm="say \"hi\""`,
		`\"`:         `Standard-Webhooks realm="\\\""`,
	} {
		// A bad signature is answered before the inbox is used.
		handler := &inbox.Handler{Source: source, Verifier: v}
		req := httptest.NewRequest("POST", "/", strings.NewReader(`{}`))
		req.Header = signed(t, secretB, "e1", time.Now(), `{}`)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		if got := rec.Header().Get("WWW-Authenticate"); rec.Code != http.StatusUnauthorized || got != want {
			t.Errorf("source %q: %d with WWW-Authenticate %s, want 401 with %s", source, rec.Code, got, want)
		}
	}
}

// TestOutsideEdgesOnlyVersionOneIsAnHMAC labels a genuine v1 signature
// with the versions next to "v1": "v1a" (the Standard Webhooks
// asymmetric scheme), "v10", "V1" and " v1" are other schemes or none,
// and none verifies, alone or listed beside another secret's signature;
// "v1" itself does, anywhere in the list.
func TestOutsideEdgesOnlyVersionOneIsAnHMAC(t *testing.T) {
	t.Parallel()
	at := time.Unix(1796032020, 0)
	v := verifierAt(t, at)
	const body = `{"type":"invoice.paid"}`
	good := signed(t, secretA, "e1", at, body)
	mac := strings.TrimPrefix(good.Get("webhook-signature"), "v1,")
	other := signed(t, secretB, "e1", at, body).Get("webhook-signature")
	for sigs, ok := range map[string]bool{
		"v1," + mac:                  true,
		other + " v1," + mac:         true,
		"v1a," + mac:                 false,
		"v10," + mac:                 false,
		"V1," + mac:                  false,
		other + " v1a," + mac:        false,
		"v1a," + mac + " v10," + mac: false,
	} {
		h := good.Clone()
		h.Set("webhook-signature", sigs)
		id, err := v.Verify(h, []byte(body))
		if got := err == nil; got != ok {
			t.Errorf("webhook-signature %q: verified %v (%q, %v), want %v", sigs, got, id, err, ok)
		}
		if err != nil && !errors.Is(err, inbox.ErrSignature) {
			t.Errorf("webhook-signature %q: %v does not match ErrSignature", sigs, err)
		}
	}
}

// TestOutsideEdgesAReapOfOneTenantBesideAnotherTenantsOlderEvents reaps,
// in acme's transaction and one event a batch, while globex holds
// expired events older than acme's (as the owner, whom no row security
// hides globex's rows from): acme's batches pick acme's events, so the
// reap deletes both of acme's, batch after batch, and leaves globex's.
func TestOutsideEdgesAReapOfOneTenantBesideAnotherTenantsOlderEvents(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		acme, globex := tenants(t)
		in, err := inbox.New(db, &inbox.Options{Retention: time.Hour, ReapBatch: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []struct {
			ctx context.Context
			id  string
		}{{globex, "g1"}, {globex, "g2"}, {acme, "a1"}, {acme, "a2"}} {
			if _, err := in.Receive(d.ctx, "s", d.id, nil, nil); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Millisecond)
		}
		clock.Set(t0.Add(2 * time.Hour))
		err = tenant.InTx(context.Background(), db, "acme", func(ctx context.Context, tx *sql.Tx) error {
			n, err := in.Reap(ctx, tx)
			if err == nil && n != 2 {
				t.Errorf("reap in acme's transaction deleted %d, want acme's 2", n)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := list(t, acme, in, "s"); len(got) != 0 {
			t.Fatalf("acme lists %v after its reap, want nothing", got)
		}
		if got, want := list(t, globex, in, "s"), []string{"g1=", "g2="}; !equal(got, want) {
			t.Fatalf("globex lists %v after acme's reap, want %v", got, want)
		}
	})
}
