package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/client"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/onetime"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/seq"
	"github.com/racefree/racefree/server"
)

const webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// testRing returns an audit keyring of one new key, "m1" (since "s1").
func testRing(t *testing.T) *audit.Keyring {
	t.Helper()
	var text bytes.Buffer
	if err := audit.Keygen(&text, "m1", "s1"); err != nil {
		t.Fatal(err)
	}
	ring, err := audit.ParseKeyring(text.String())
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

// TestClientCoversEveryRouteFamily drives the outbox, sequence, token,
// event, audit and inbox routes through the client against a live server
// per engine, and checks each answer against the library's own view of the
// database.
func TestClientCoversEveryRouteFamily(t *testing.T) {
	t.Parallel()
	ring := testRing(t)
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{Token: "secret", AuditKeys: ring, InboxSecrets: map[string][]string{"stripe": {webhookSecret}}})
		routes := newRouteRecorder(t, s.Handler())
		srv := httptest.NewServer(routes)
		defer srv.Close()
		c, err := client.New(srv.URL, &client.Options{Key: "secret", Backoff: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()

		t.Run("Outbox", func(t *testing.T) {
			payload := []byte("not json \x00\xff bytes")
			id, err := c.Enqueue(ctx, outbox.Message{Topic: "mail", Key: "u1", Payload: payload, Headers: map[string]string{"Content-Type": "application/octet-stream"}, MaxAttempts: 1})
			if err != nil || id < 1 {
				t.Fatalf("enqueue: %d, %v", id, err)
			}
			if _, err := c.Enqueue(ctx, outbox.Message{Topic: "mail", Headers: map[string]string{"Racefree-Outbox-Fence": "1"}}); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("enqueue with a Racefree- header: %v, want an InputError", err)
			}
			st, err := c.OutboxStats(ctx)
			if err != nil || st.Ready != 1 || st.Due != 1 || st.Dead != 0 {
				t.Fatalf("stats: %+v, %v; want 1 ready and due", st, err)
			}
			// A relay fails it for good: it is dead, and listed with its bytes.
			o, _ := s.Outbox()
			ds, err := o.Claim(ctx, "w", 1, time.Minute, "mail")
			if err != nil || len(ds) != 1 || ds[0].ID != id || !bytes.Equal(ds[0].Payload, payload) {
				t.Fatalf("claim: %v, %v; want message %d with the payload as sent", ds, err, id)
			}
			if m, err := c.Message(ctx, id); err != nil || m.State != outbox.Leased || m.LeasedBy != "w" || m.Fence != ds[0].Fence || m.Attempts != 1 || len(m.History) != 0 {
				t.Fatalf("the message while a relay holds it: %+v, %v; want leased by w at the delivery's fence, no failure yet", m, err)
			}
			if _, err := o.Fail(ctx, ds[0], outbox.Permanent(errors.New("refused"))); err != nil {
				t.Fatal(err)
			}
			m, err := c.Message(ctx, id)
			if err != nil || m.State != outbox.Dead || !bytes.Equal(m.Payload, payload) || m.Headers["Content-Type"] != "application/octet-stream" ||
				len(m.History) != 1 || m.History[0].Outcome != "dead" || m.History[0].Worker != "w" || m.History[0].Fence != ds[0].Fence ||
				!strings.Contains(m.History[0].Error, "refused") || m.History[0].At.IsZero() {
				t.Fatalf("the dead message: %+v, %v; want dead, its bytes and headers, one failed attempt by w with its error", m, err)
			}
			lib, err := o.Get(ctx, db, id)
			if err != nil || !lib.AvailableAt.Equal(m.AvailableAt) || !lib.CreatedAt.Equal(m.CreatedAt) || lib.MaxAttempts != m.MaxAttempts {
				t.Fatalf("the library's record %+v, %v; the client's %+v", lib, err, m)
			}
			if _, err := c.Message(ctx, id+1000); !errors.Is(err, racefree.ErrNotFound) || !strings.Contains(err.Error(), strconv.FormatInt(id+1000, 10)) {
				t.Fatalf("a message that does not exist: %v, want not found, naming the id", err)
			}
			if _, err := c.Message(ctx, 0); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("message 0: %v, want an InputError", err)
			}
			rs, err := c.Dead(ctx, outbox.Filter{Topic: "mail"}, 0, 10)
			if err != nil || len(rs) != 1 || rs[0].ID != id || !bytes.Equal(rs[0].Payload, payload) || rs[0].Key != "u1" || !strings.Contains(rs[0].LastError, "refused") {
				t.Fatalf("dead: %+v, %v", rs, err)
			}
			if err := c.Redrive(ctx, id); err != nil {
				t.Fatalf("redrive: %v", err)
			}
			if err := c.Redrive(ctx, id); !errors.Is(err, racefree.ErrNotFound) || !strings.Contains(err.Error(), "no dead outbox message") {
				t.Fatalf("a second redrive: %v, want not found, saying what", err)
			}
			if err := c.Discard(ctx, id); !errors.Is(err, racefree.ErrNotFound) {
				t.Fatalf("discard of a live message: %v, want not found", err)
			}
			if st, err := c.OutboxStats(ctx); err != nil || st.Ready != 1 || st.Dead != 0 {
				t.Fatalf("stats after the redrive: %+v, %v", st, err)
			}
		})

		t.Run("Sequences", func(t *testing.T) {
			first, err := c.Next(ctx, "invoices", "2026", 3)
			if err != nil || first != 1 {
				t.Fatalf("next 3: %d, %v; want 1", first, err)
			}
			if first, err = c.Next(ctx, "invoices", "2026", 1); err != nil || first != 4 {
				t.Fatalf("next: %d, %v; want 4", first, err)
			}
			lib, err := seq.New(db).Next(ctx, db, "invoices", "2026")
			if err != nil || lib != 5 {
				t.Fatalf("the library after the client: %d, %v; want 5", lib, err)
			}
			if _, err := c.Next(ctx, "invoices", "2026", 0); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("next 0: %v, want an InputError", err)
			}
			if cur, err := c.Current(ctx, "invoices", "2026"); err != nil || cur != 5 {
				t.Fatalf("current: %d, %v; want 5, the last number handed out", cur, err)
			}
			if cur, err := c.Current(ctx, "invoices", "2027"); err != nil || cur != 0 {
				t.Fatalf("current of a counter that handed nothing out: %d, %v; want 0", cur, err)
			}
			if first, err := c.Next(ctx, "invoices", "2027", 1); err != nil || first != 1 {
				t.Fatalf("next after reading a new counter: %d, %v; want 1: reading creates nothing", first, err)
			}
			if _, err := c.Current(ctx, "", "2026"); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("current of an empty scope: %v, want an InputError", err)
			}
		})

		t.Run("Tokens", func(t *testing.T) {
			code, err := c.IssueCode(ctx, "email-verify", "u1", time.Hour)
			if err != nil || code.Token == "" || code.Subject != "u1" || !code.ExpiresAt.After(code.IssuedAt) {
				t.Fatalf("issue: %+v, %v", code, err)
			}
			red, err := c.ConsumeCode(ctx, "email-verify", code.Token)
			if err != nil || red.Outcome != onetime.Consumed || red.Subject != "u1" {
				t.Fatalf("consume: %+v, %v", red, err)
			}
			if red, err = c.ConsumeCode(ctx, "email-verify", code.Token); err != nil || red.Outcome != onetime.AlreadyUsed {
				t.Fatalf("consume again: %+v, %v; want already used, not an error", red, err)
			}
			if red, err = c.ConsumeCode(ctx, "email-verify", "no-such-code"); err != nil || red.Outcome != onetime.Unknown {
				t.Fatalf("consume of no code: %+v, %v; want unknown", red, err)
			}
			r1, err := c.IssueRefresh(ctx, "u1", time.Hour)
			if err != nil || r1.Generation != 1 || r1.Token == "" {
				t.Fatalf("issue refresh: %+v, %v", r1, err)
			}
			rot, err := c.Rotate(ctx, r1.Token)
			if err != nil || rot.Outcome != onetime.Rotated || rot.Next == nil || rot.Next.Generation != 2 {
				t.Fatalf("rotate: %+v, %v", rot, err)
			}
			// Reusing the retired token revokes the family: the successor too.
			if again, err := c.Rotate(ctx, r1.Token); err != nil || again.Outcome != onetime.Reused || again.Next != nil {
				t.Fatalf("rotate the retired token: %+v, %v; want reused", again, err)
			}
			if after, err := c.Rotate(ctx, rot.Next.Token); err != nil || after.Outcome != onetime.Revoked {
				t.Fatalf("rotate the successor of a reused token: %+v, %v; want revoked", after, err)
			}
			if _, err := c.IssueCode(ctx, "p", "u1", 0); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("issue with no ttl: %v, want an InputError", err)
			}
		})

		t.Run("Events", func(t *testing.T) {
			// The reply to the first observation is lost: its retry carries
			// the same key and gets the same won window back, counted once.
			lose := &loseFirstReply{seen: map[string]bool{}}
			lossy, _ := client.New(srv.URL, &client.Options{Key: "secret", Backoff: time.Millisecond, HTTPClient: &http.Client{Transport: lose}})
			ev := dedup.Event{Source: "billing", Level: "error", Message: "card 4242 declined", Fingerprint: "card-declined"}
			o, err := lossy.Observe(ctx, ev, time.Hour)
			if err != nil || !o.Process || o.Fence != 1 || o.Count != 1 || o.Fingerprint != "card-declined" || o.FirstSeen.IsZero() {
				t.Fatalf("observe after a lost reply: %+v, %v; want the won window, fence 1, counted once", o, err)
			}
			if len(lose.keys) != 2 || lose.keys[0] == "" || lose.keys[0] != lose.keys[1] {
				t.Fatalf("Idempotency-Keys of the observation's attempts: %q; want one key, sent again", lose.keys)
			}
			again, err := c.Observe(ctx, ev, time.Hour)
			if err != nil || again.Process || again.Fence != 1 || again.Count != 2 {
				t.Fatalf("a second observer: %+v, %v; want not to process, count 2", again, err)
			}
			if err := c.Record(ctx, "card-declined", 1, dedup.Result{Classification: "fraud", ExternalID: "T-1"}); err != nil {
				t.Fatalf("record: %v", err)
			}
			rec, err := dedup.New(db).Get(ctx, db, "card-declined")
			if err != nil || rec.Classification != "fraud" || rec.ExternalID != "T-1" || rec.ResultFence != 1 || rec.Source != "billing" {
				t.Fatalf("the library after the client's record: %+v, %v", rec, err)
			}
			if got, err := c.Event(ctx, "card-declined"); err != nil || *got != *rec {
				t.Fatalf("the client's event: %+v, %v; the library's %+v", got, err, rec)
			}
			if _, err := c.Event(ctx, "never-seen"); !errors.Is(err, racefree.ErrNotFound) || !strings.Contains(err.Error(), "never-seen") {
				t.Fatalf("the event of a fingerprint never observed: %v, want not found, naming it", err)
			}
			if err := c.Record(ctx, "card-declined", 7, dedup.Result{}); !errors.Is(err, racefree.ErrNotHeld) {
				t.Fatalf("record at a fence never issued: %v, want not held", err)
			}
			if err := c.Record(ctx, "never-seen", 1, dedup.Result{}); !errors.Is(err, racefree.ErrNotFound) || !strings.Contains(err.Error(), "never-seen") {
				t.Fatalf("record of no event: %v, want not found, naming it", err)
			}
			// A window of 1 ms: wait for a later window to be won, then the
			// first window's fence is stale.
			short := dedup.Event{Source: "billing", Level: "warn", Message: "slow", Fingerprint: "slow"}
			if o, err := c.Observe(ctx, short, time.Millisecond); err != nil || o.Fence != 1 {
				t.Fatalf("observe: %+v, %v", o, err)
			}
			for {
				o, err := c.Observe(ctx, short, time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				if o.Process {
					break
				}
			}
			var stale *claim.StaleFenceError
			if err := c.Record(ctx, "slow", 1, dedup.Result{}); !errors.As(err, &stale) || stale.Current != 2 || !errors.Is(err, racefree.ErrStaleFence) {
				t.Fatalf("record at the first window's fence after the second was won: %v, want a *claim.StaleFenceError with current 2", err)
			}
			if _, err := c.Observe(ctx, dedup.Event{Source: "x", Level: "e"}, 0); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("observe without a message: %v, want an InputError", err)
			}
		})

		t.Run("Audit", func(t *testing.T) {
			lose := &loseFirstReply{seen: map[string]bool{}}
			lossy, _ := client.New(srv.URL, &client.Options{Key: "secret", Backoff: time.Millisecond, HTTPClient: &http.Client{Transport: lose}})
			first, err := lossy.Append(ctx, "orders", audit.Entry{Actor: "alice", Action: "refund", Subject: "order-1", Data: []byte(`{"amount":5}`)})
			if err != nil || first.Seq != 1 || first.Scope != "orders" || first.Actor != "alice" || len(first.MAC) == 0 || first.At.IsZero() {
				t.Fatalf("append after a lost reply: %+v, %v; want entry 1", first, err)
			}
			second, err := c.Append(ctx, "orders", audit.Entry{Actor: "bob", Action: "cancel"})
			if err != nil || second.Seq != 2 || !bytes.Equal(second.PrevMAC, first.MAC) {
				t.Fatalf("a second append: %+v, %v; want entry 2, chained to entry 1: the retry must not append twice", second, err)
			}
			if _, err := c.Append(ctx, "orders", audit.Entry{Actor: "bob", Action: "cancel", Data: []byte("not json")}); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("append of data that is not JSON: %v, want an InputError", err)
			}
			log, _ := audit.New(db, ring)
			lib, err := log.List(ctx, "orders", 0, 10)
			if err != nil || len(lib) != 2 {
				t.Fatalf("the library's list: %d entries, %v; want 2", len(lib), err)
			}
			got, err := c.Entries(ctx, "orders", 0, 0)
			if err != nil || len(got) != 2 {
				t.Fatalf("entries: %+v, %v", got, err)
			}
			for i := range got {
				if got[i].Seq != lib[i].Seq || !bytes.Equal(got[i].MAC, lib[i].MAC) || !bytes.Equal(got[i].Data, lib[i].Data) || got[i].Actor != lib[i].Actor || !got[i].At.Equal(lib[i].At) {
					t.Fatalf("entry %d: client %+v, library %+v", i+1, got[i], lib[i])
				}
			}
			if page, err := c.Entries(ctx, "orders", 1, 1); err != nil || len(page) != 1 || page[0].Seq != 2 {
				t.Fatalf("entries after 1: %+v, %v; want entry 2", page, err)
			}
			cp, err := c.Checkpoint(ctx, "orders")
			if err != nil || cp.Seq != 2 || !bytes.Equal(cp.MAC, second.MAC) || len(cp.Sig) == 0 {
				t.Fatalf("checkpoint: %+v, %v; want the head, entry 2, signed", cp, err)
			}
			latest, err := c.LatestCheckpoint(ctx, "orders")
			if err != nil || latest.Seq != cp.Seq || !bytes.Equal(latest.Sig, cp.Sig) {
				t.Fatalf("latest checkpoint: %+v, %v; want %+v", latest, err, cp)
			}
			if _, err := c.LatestCheckpoint(ctx, "no-such-scope"); !errors.Is(err, racefree.ErrNotFound) {
				t.Fatalf("latest checkpoint of a scope without one: %v, want not found", err)
			}
			if res, err := c.Verify(ctx, "orders"); err != nil || !res.Intact() || res.Verified.Seq != 2 {
				t.Fatalf("verify: %+v, %v", res, err)
			}
		})

		t.Run("Inbox", func(t *testing.T) {
			body := []byte(`{"type":"invoice.paid","id":"in_1"}`)
			h := signed(t, "msg_1", body)
			for i := 0; i < 2; i++ { // a redelivery is a success too, recorded once
				if err := c.Deliver(ctx, "stripe", h, body); err != nil {
					t.Fatalf("delivery %d: %v", i+1, err)
				}
			}
			text := []byte("plain text, not JSON")
			if err := c.Deliver(ctx, "stripe", signed(t, "msg_2", text), text); err != nil {
				t.Fatalf("a delivery that is not JSON: %v", err)
			}
			evs, err := c.InboxEvents(ctx, "stripe", 0, 0)
			if err != nil || len(evs) != 2 || evs[0].ID != "msg_1" || evs[0].Seq != 1 || !bytes.Equal(evs[0].Payload, body) ||
				evs[0].Status != inbox.StatusProcessed || evs[0].ReceivedAt.IsZero() || evs[1].ID != "msg_2" || !bytes.Equal(evs[1].Payload, text) {
				t.Fatalf("inbox events: %+v, %v; want msg_1 once, then msg_2, with their bodies", evs, err)
			}
			if page, err := c.InboxEvents(ctx, "stripe", 1, 1); err != nil || len(page) != 1 || page[0].ID != "msg_2" {
				t.Fatalf("inbox events after 1: %+v, %v", page, err)
			}
			forged := signed(t, "msg_3", body)
			var e *client.Error
			if err := c.Deliver(ctx, "stripe", forged, []byte(`{"type":"forged"}`)); !errors.As(err, &e) || e.Status != http.StatusUnauthorized || !strings.HasSuffix(e.Type, "bad-signature") {
				t.Fatalf("a delivery whose body is not the one signed: %v, want 401 bad-signature", err)
			}
			if _, err := c.InboxEvents(ctx, "github", 0, 0); !errors.As(err, &e) || !strings.HasSuffix(e.Type, "unknown-source") {
				t.Fatalf("events of an unconfigured source: %v, want unknown-source", err)
			}
		})

		t.Run("ClaimsAndQuotas", func(t *testing.T) {
			cl, err := c.Acquire(ctx, "job", "w1", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Renew(ctx, "job", "w1", cl.Fence, time.Minute); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Get(ctx, "job"); err != nil {
				t.Fatal(err)
			}
			if err := c.Release(ctx, "job", "w1", cl.Fence); err != nil {
				t.Fatal(err)
			}
			if d, err := c.Consume(ctx, "u1", 1, quota.Policy{Kind: quota.GCRA, Rate: 1, Per: time.Minute, Burst: 1}); err != nil || !d.Allowed {
				t.Fatalf("consume: %+v, %v", d, err)
			}
		})

		t.Run("EveryRouteOfTheDocument", func(t *testing.T) {
			// Runs after the subtests above: every /v1/ operation of the
			// OpenAPI document was reached through a client method.
			if missing := routes.missing(); len(missing) > 0 {
				t.Fatalf("operations no client method reached: %v", missing)
			}
		})

		t.Run("AnUnreachableServerIsNotADatabaseOutage", func(t *testing.T) {
			gone := httptest.NewServer(nil)
			u := gone.URL
			gone.Close()
			dead, _ := client.New(u, &client.Options{Attempts: 2, Backoff: time.Millisecond})
			_, err := dead.Next(ctx, "a", "b", 1)
			var ue *client.UnreachableError
			if !errors.Is(err, client.ErrUnreachable) || !errors.As(err, &ue) || ue.Attempts != 2 ||
				!strings.Contains(err.Error(), "server unreachable at "+u) || strings.Contains(err.Error(), "database") {
				t.Fatalf("a call to a closed port: %v; want server unreachable, naming the server and not the database", err)
			}
			if !errors.Is(err, racefree.ErrUnavailable) {
				t.Fatalf("%v: want it to match racefree.ErrUnavailable still (retry with the same key)", err)
			}
		})
	})
}

// signed returns the Standard Webhooks headers of body, signed now with
// webhookSecret as event id.
func signed(t *testing.T, id string, body []byte) http.Header {
	t.Helper()
	now := time.Now()
	sig, err := inbox.Sign(webhookSecret, id, now, body)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	h.Set("webhook-signature", sig)
	return h
}

// routeRecorder serves h and records which operation of the server's
// OpenAPI document each request reached.
type routeRecorder struct {
	h    http.Handler
	mux  *http.ServeMux // the document's /v1/ operations, to name a request's
	ops  []string
	mu   sync.Mutex
	seen map[string]bool
}

func newRouteRecorder(t *testing.T, h http.Handler) *routeRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/openapi.json", nil))
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || len(doc.Paths) == 0 {
		t.Fatalf("/openapi.json: %v", err)
	}
	r := &routeRecorder{h: h, mux: http.NewServeMux(), seen: map[string]bool{}}
	for path, ops := range doc.Paths {
		if !strings.HasPrefix(path, "/v1/") {
			continue
		}
		for method := range ops {
			switch method {
			case "get", "post", "put", "patch", "delete":
				op := strings.ToUpper(method) + " " + path
				r.ops = append(r.ops, op)
				r.mux.Handle(op, http.NotFoundHandler())
			}
		}
	}
	sort.Strings(r.ops)
	return r
}

func (r *routeRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if _, pattern := r.mux.Handler(req); pattern != "" {
		r.mu.Lock()
		r.seen[pattern] = true
		r.mu.Unlock()
	}
	r.h.ServeHTTP(w, req)
}

// missing returns the operations no request reached.
func (r *routeRecorder) missing() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, op := range r.ops {
		if !r.seen[op] {
			out = append(out, op)
		}
	}
	return out
}
