package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// receipt is one request a test receiver got.
type receipt struct {
	key, contentType, topic, body string
	tenant, fence                 string
}

// receiver is an HTTP endpoint that records what relays POST to it.
type receiver struct {
	srv *httptest.Server
	got chan receipt
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{got: make(chan receipt, 100)}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.got <- receipt{key: r.Header.Get("Idempotency-Key"), contentType: r.Header.Get("Content-Type"),
			topic: r.Header.Get("Racefree-Outbox-Topic"), body: string(b),
			tenant: r.Header.Get("Racefree-Outbox-Tenant"), fence: r.Header.Get("Racefree-Outbox-Fence")}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) next(t *testing.T) receipt {
	t.Helper()
	select {
	case r := <-rc.got:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("nothing delivered within 30s")
	}
	return receipt{}
}

// runRelay runs a relay of the server's outbox that POSTs to url until the
// test ends.
func runRelay(t *testing.T, s *server.Server, url string) {
	t.Helper()
	o, err := s.Outbox()
	if err != nil {
		t.Fatal(err)
	}
	h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: url, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, err := o.NewRelay(h, &outbox.RelayOptions{PollInterval: 20 * time.Millisecond, Lease: time.Minute,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestEnqueuedMessagesAreDeliveredByARelay: POST /v1/outbox stores a
// message that a relay POSTs to a receiver with Idempotency-Key set to
// the message id; a JSON payload arrives as sent, as application/json, a
// base64 one as its bytes.
func TestEnqueuedMessagesAreDeliveredByARelay(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		// A request that waits for the database (a lock it cannot get)
		// answers 503 within seconds, as under serve's --request-timeout.
		s := server.New(db, server.Options{RequestTimeout: 5 * time.Second})
		h := s.Handler()
		rc := newReceiver(t)
		runRelay(t, s, rc.srv.URL)

		code, body, _ := do(t, h, "POST", "/v1/outbox", `{"topic":"orders","key":"o-1","payload":{"total": 12}}`, "Content-Type", "application/json")
		if code != 200 || body["topic"] != "orders" || body["key"] != "o-1" {
			t.Fatalf("enqueue: %d %v", code, body)
		}
		id := fmt.Sprint(body["id"])
		if body["idempotency_key"] != id {
			t.Fatalf("idempotency_key %v, want the id %s", body["idempotency_key"], id)
		}
		got := rc.next(t)
		if got.key != id || got.body != `{"total": 12}` || got.contentType != "application/json" || got.topic != "orders" {
			t.Fatalf("delivered %+v; want Idempotency-Key %s, the payload as sent, application/json", got, id)
		}

		code, body, _ = do(t, h, "POST", "/v1/outbox", `{"topic":"raw","payload_base64":"AAEC/w==","headers":{"X-Trace":"t1"}}`)
		if code != 200 {
			t.Fatalf("enqueue base64: %d %v", code, body)
		}
		got = rc.next(t)
		if got.key != fmt.Sprint(body["id"]) || got.body != "\x00\x01\x02\xff" || got.contentType != "application/octet-stream" {
			t.Fatalf("delivered %+v; want the bytes, application/octet-stream", got)
		}
		// Both were delivered once.
		waitStats(t, h, func(st map[string]any) bool { return st["delivered"] == float64(2) && st["backlog"] == float64(0) })
	})
}

// TestOutboxHeadersNameTheTenantOverHTTP: a relay serving two tenants
// sends each message with Racefree-Outbox-Tenant, its key's tenant, and
// the lease's fence; a header racefree-outbox-tenant that tenant A sets
// to B is refused (400 invalid-input problem) and nothing is stored.
func TestOutboxHeadersNameTheTenantOverHTTP(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		as, bs := bearerOf(newKey(t, db, "hdr-a", apikey.AllScopes)), bearerOf(newKey(t, db, "hdr-b", apikey.AllScopes))
		s := server.New(db, server.Options{RequireKey: true})
		h := s.Handler()
		rc := newReceiver(t)
		runRelay(t, s, rc.srv.URL)
		for _, c := range []struct {
			auth   []string
			tenant string
		}{{as, "hdr-a"}, {bs, "hdr-b"}} {
			code, body, _ := do(t, h, "POST", "/v1/outbox", `{"topic":"hdr","payload":1}`, c.auth...)
			if code != 200 {
				t.Fatalf("enqueue as %s: %d %v", c.tenant, code, body)
			}
			if got := rc.next(t); got.key != fmt.Sprint(body["id"]) || got.tenant != c.tenant || got.fence != "1" {
				t.Fatalf("delivered %+v; want Racefree-Outbox-Tenant %s and the first lease's fence, 1", got, c.tenant)
			}
		}
		for _, idem := range []string{"", "hdr-1"} {
			hdr := as
			if idem != "" {
				hdr = append(append([]string{}, as...), "Idempotency-Key", `"`+idem+`"`)
			}
			code, body, got := do(t, h, "POST", "/v1/outbox", `{"topic":"forged","headers":{"racefree-outbox-tenant":"hdr-b"}}`, hdr...)
			if code != 400 || body["type"] != "urn:racefree:problem:invalid-input" || got.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("a Racefree- header (key %q): %d %v, want a 400 invalid-input problem", idem, code, body)
			}
		}
		if n := rows(t, db, `SELECT count(*) FROM racefree_outbox WHERE topic = 'forged'`); n != 0 {
			t.Fatalf("%d forged messages stored", n)
		}
	})
}

// waitStats polls GET /v1/outbox/stats until ok holds.
func waitStats(t *testing.T, h http.Handler, ok func(map[string]any) bool, auth ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, st, _ := do(t, h, "GET", "/v1/outbox/stats", "", auth...)
		if code == 200 && ok(st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats: %d %v", code, st)
		}
		time.Sleep(10 * time.Millisecond) // poll the state
	}
}

// TestIdempotentEnqueueCommitsWithItsStoredResponse: with an
// Idempotency-Key a retried enqueue replays the first answer and enqueues
// nothing more; a crash between the enqueue and its stored response
// rolls both back, so the retry enqueues once.
func TestIdempotentEnqueueCommitsWithItsStoredResponse(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{RequestTimeout: 5 * time.Second}).Handler()
		msg := `{"topic":"mail","key":"u1","payload":"hi"}`
		repair := crashOnStore(t, db)
		if code, body, _ := do(t, h, "POST", "/v1/outbox", msg, "Idempotency-Key", `"e1"`); code < 500 {
			t.Fatalf("with the store failing: %d %v, want a 5xx", code, body)
		}
		if n := rows(t, db, `SELECT count(*) FROM racefree_outbox`); n != 0 {
			t.Fatalf("the enqueue whose response was not stored left %d messages, want none", n)
		}
		repair()
		code, first, hdr := do(t, h, "POST", "/v1/outbox", msg, "Idempotency-Key", `"e1"`)
		if code != 200 || hdr.Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry: %d %v %v", code, first, hdr)
		}
		code, again, hdr := do(t, h, "POST", "/v1/outbox", msg, "Idempotency-Key", `"e1"`)
		if code != 200 || hdr.Get("Idempotent-Replayed") != "true" || again["id"] != first["id"] {
			t.Fatalf("replay: %d %v %v; want the first answer (id %v)", code, again, hdr, first["id"])
		}
		if code, _, _ := do(t, h, "POST", "/v1/outbox", `{"topic":"mail","key":"u2"}`, "Idempotency-Key", `"e1"`); code != 422 {
			t.Fatalf("the key with another message: %d, want 422", code)
		}
		if n := rows(t, db, `SELECT count(*) FROM racefree_outbox`); n != 1 {
			t.Fatalf("%d messages, want 1", n)
		}
		// Without a key every POST enqueues.
		for range 2 {
			if code, _, _ := do(t, h, "POST", "/v1/outbox", msg); code != 200 {
				t.Fatalf("enqueue: %d", code)
			}
		}
		if n := rows(t, db, `SELECT count(*) FROM racefree_outbox`); n != 3 {
			t.Fatalf("%d messages, want 3", n)
		}
	})
}

// TestOutboxBadInputChangesNothing: bad input is 400 invalid-input, a
// body over 1 MiB 413 too-large, a body that is not JSON 415
// unsupported-media-type, with or without an Idempotency-Key: nothing is
// enqueued, redriven, discarded or stored.
func TestOutboxBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{})
		h := s.Handler()
		o, _ := s.Outbox()
		dead := killOne(t, o, context.Background(), "t")
		for _, c := range []struct {
			method, path, body, contentType string
			want                            int
		}{
			{"POST", "/v1/outbox", `{"key":"k"}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":""}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"a\u0000b"}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","key":"` + strings.Repeat("k", outbox.MaxKeyBytes+1) + `"}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","payload":1,"payload_base64":"AA=="}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","payload_base64":"not base64!"}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","payload":{"a":}}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","headers":{"bad name":"v"}}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","headers":{"X":"a\r\nb"}}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","headers":{"racefree-outbox-tenant":"acme"}}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","delay_ms":-1}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","delay_ms":1,"not_before":"2030-01-01T00:00:00Z"}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","not_before":"tomorrow"}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","not_before":"2999-01-01T00:00:00Z"}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","max_attempts":-1}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","ordered":true}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","tenant":"acme"}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t"} {}`, "", 400},
			{"POST", "/v1/outbox", `{"topic":"t","payload":"` + strings.Repeat("x", 1<<20) + `"}`, "", 413},
			{"POST", "/v1/outbox", `{"topic":"t"}`, "text/plain", 415},
			{"POST", "/v1/outbox", `topic=t`, "application/x-www-form-urlencoded", 415},
			{"POST", "/v1/outbox", `{"topic":"t"}`, "application/json; charset=", 415},
			{"GET", "/v1/outbox/dead?limit=0", "", "", 400},
			{"GET", "/v1/outbox/dead?limit=x", "", "", 400},
			{"GET", "/v1/outbox/dead?after=-1", "", "", 400},
			{"GET", "/v1/outbox/dead?topic=a%00b", "", "", 400},
			{"POST", "/v1/outbox/dead/x/redrive", "", "", 400},
			{"POST", "/v1/outbox/dead/0/discard", "", "", 400},
			{"POST", fmt.Sprintf("/v1/outbox/dead/%d/redrive", dead), `{"all":true}`, "", 400},
			{"POST", fmt.Sprintf("/v1/outbox/dead/%d/discard", dead), `{}`, "text/plain", 415},
		} {
			for _, idem := range []string{"", `"bad-` + fmt.Sprint(len(c.body)) + `"`} {
				if c.method == "GET" && idem != "" {
					continue
				}
				var hdr []string
				if c.contentType != "" {
					hdr = append(hdr, "Content-Type", c.contentType)
				}
				if idem != "" {
					hdr = append(hdr, "Idempotency-Key", idem)
				}
				code, body, got := do(t, h, c.method, c.path, c.body, hdr...)
				kind := map[int]string{400: "invalid-input", 413: "too-large", 415: "unsupported-media-type"}[c.want]
				if code != c.want || body["type"] != "urn:racefree:problem:"+kind || got.Get("Content-Type") != "application/problem+json" {
					t.Errorf("%s %s %.60q (%s, key %s): %d %v; want %d %s", c.method, c.path, c.body, c.contentType, idem, code, body, c.want, kind)
				}
			}
		}
		if n := rows(t, db, `SELECT count(*) FROM racefree_outbox`); n != 1 {
			t.Errorf("%d messages, want only the dead one", n)
		}
		if n := rows(t, db, `SELECT count(*) FROM racefree_outbox WHERE state = 'dead'`); n != 1 {
			t.Errorf("the dead message was changed")
		}
		if n := rows(t, db, `SELECT count(*) FROM racefree_idempotency`); n != 0 {
			t.Errorf("refused requests stored %d responses", n)
		}
		// JSON types other than application/json are JSON too.
		for _, ct := range []string{"application/json; charset=utf-8", "application/merge-patch+json"} {
			if code, body, _ := do(t, h, "POST", "/v1/outbox", `{"topic":"t"}`, "Content-Type", ct); code != 200 {
				t.Errorf("Content-Type %s: %d %v", ct, code, body)
			}
		}
	})
}

// killOne enqueues a message of topic for ctx's tenant and makes it dead
// (a permanent failure), returning its id.
func killOne(t *testing.T, o *outbox.Outbox, ctx context.Context, topic string) int64 {
	t.Helper()
	id, err := o.Enqueue(ctx, o.DB(), outbox.Message{Topic: topic, Key: "k", Payload: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := o.Claim(ctx, "test-worker", 1, time.Minute, topic)
	if err != nil || len(ds) != 1 || ds[0].ID != id {
		t.Fatalf("claim: %v, %v", ds, err)
	}
	if _, err := o.Fail(ctx, ds[0], outbox.Permanent(errors.New("refused by the receiver"))); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestDeadLettersOverHTTP: dead messages are listed (filtered by topic,
// paged by id), redriven and discarded by id; a message that is not dead
// is 404 and left alone; with an Idempotency-Key a repeated redrive
// replays its answer.
func TestDeadLettersOverHTTP(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{})
		h := s.Handler()
		o, _ := s.Outbox()
		ctx := context.Background()
		d1, d2, d3 := killOne(t, o, ctx, "mail"), killOne(t, o, ctx, "sms"), killOne(t, o, ctx, "mail")
		live, err := o.Enqueue(ctx, db, outbox.Message{Topic: "mail"})
		if err != nil {
			t.Fatal(err)
		}
		ids := func(body map[string]any) []int64 {
			var out []int64
			for _, m := range body["messages"].([]any) {
				out = append(out, int64(m.(map[string]any)["id"].(float64)))
			}
			return out
		}
		code, body, _ := do(t, h, "GET", "/v1/outbox/dead?topic=mail&limit=1", "")
		if code != 200 || fmt.Sprint(ids(body)) != fmt.Sprint([]int64{d1}) || body["next"] != fmt.Sprint(d1) {
			t.Fatalf("first page: %d %v", code, body)
		}
		m := body["messages"].([]any)[0].(map[string]any)
		if m["topic"] != "mail" || m["last_error"] == "" || m["payload"].(map[string]any)["n"] != float64(1) || m["died_at"] == "" {
			t.Fatalf("dead message: %v", m)
		}
		code, body, _ = do(t, h, "GET", "/v1/outbox/dead?topic=mail&after="+fmt.Sprint(d1), "")
		if code != 200 || fmt.Sprint(ids(body)) != fmt.Sprint([]int64{d3}) {
			t.Fatalf("second page: %d %v", code, body)
		}
		code, body, _ = do(t, h, "GET", "/v1/outbox/stats", "")
		if code != 200 || body["dead"] != float64(3) || body["ready"] != float64(1) || body["backlog"] != float64(1) {
			t.Fatalf("stats: %d %v", code, body)
		}

		// Redrive one, with a key: the repeat replays, the message is due.
		path := fmt.Sprintf("/v1/outbox/dead/%d/redrive", d1)
		if code, body, _ := do(t, h, "POST", path, "", "Idempotency-Key", `"r1"`); code != 200 || body["state"] != "ready" {
			t.Fatalf("redrive: %d %v", code, body)
		}
		if code, body, hdr := do(t, h, "POST", path, "", "Idempotency-Key", `"r1"`); code != 200 || hdr.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("redrive replayed: %d %v %v", code, body, hdr)
		}
		if code, body, _ := do(t, h, "POST", path, ""); code != 404 || body["type"] != "urn:racefree:problem:not-found" {
			t.Fatalf("redrive of a message no longer dead: %d %v, want 404", code, body)
		}
		// Discard one; a message that is not dead is neither redriven nor
		// discarded.
		if code, body, _ := do(t, h, "POST", fmt.Sprintf("/v1/outbox/dead/%d/discard", d2), `{}`); code != 200 || body["state"] != "discarded" {
			t.Fatalf("discard: %d %v", code, body)
		}
		for _, p := range []string{fmt.Sprintf("/v1/outbox/dead/%d/discard", live), fmt.Sprintf("/v1/outbox/dead/%d/redrive", live),
			fmt.Sprintf("/v1/outbox/dead/%d/discard", d2), "/v1/outbox/dead/999999/discard"} {
			if code, body, _ := do(t, h, "POST", p, ""); code != 404 {
				t.Fatalf("POST %s: %d %v, want 404", p, code, body)
			}
		}
		code, body, _ = do(t, h, "GET", "/v1/outbox/dead", "")
		if code != 200 || fmt.Sprint(ids(body)) != fmt.Sprint([]int64{d3}) {
			t.Fatalf("dead after a redrive and a discard: %d %v, want only %d", code, body, d3)
		}
		if n := rows(t, db, fmt.Sprintf(`SELECT count(*) FROM racefree_outbox WHERE id = %d AND state = 'ready' AND attempts = 0`, d1)); n != 1 {
			t.Fatal("the redriven message is not ready with a fresh set of attempts")
		}
		if n := rows(t, db, fmt.Sprintf(`SELECT count(*) FROM racefree_outbox WHERE id IN (%d, %d)`, d2, live)); n != 1 {
			t.Fatal("the discarded message is still there, or the live one is gone")
		}
	})
}

// TestOutboxTenantsAreIsolatedOverHTTP: two tenants' keys enqueue to the
// same topic and key; each tenant's dead letters, figures, redrive and
// discard see its own messages only. On PostgreSQL also as the
// application role, under row-level security.
func TestOutboxTenantsAreIsolatedOverHTTP(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		owner := testdb.Open(t, d, nil)
		t.Run("owner", func(t *testing.T) { outboxTenantsAreIsolated(t, owner, owner, "ob-a1", "ob-b1") })
		if owner.Engine() == racefree.Postgres {
			t.Run("app-role", func(t *testing.T) { outboxTenantsAreIsolated(t, owner, testdb.App(t, owner, d), "ob-a2", "ob-b2") })
		}
	})
}

// outboxTenantsAreIsolated runs with tenants of its own (the two runs
// share a database).
func outboxTenantsAreIsolated(t *testing.T, owner, db *racefree.DB, tenantA, tenantB string) {
	topic := "iso"
	as, bs := bearerOf(newKey(t, owner, tenantA, apikey.AllScopes)), bearerOf(newKey(t, owner, tenantB, apikey.AllScopes))
	s := server.New(db, server.Options{RequireKey: true})
	h := s.Handler()
	o, _ := s.Outbox()
	dead := map[string]int64{}
	for _, id := range []string{tenantA, tenantB} {
		ctx, err := tenant.With(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		dead[id] = killOne(t, o, ctx, topic)
	}
	for _, c := range []struct {
		auth       []string
		own, other int64
	}{{as, dead[tenantA], dead[tenantB]}, {bs, dead[tenantB], dead[tenantA]}} {
		code, body, _ := do(t, h, "GET", "/v1/outbox/dead?topic="+topic, "", c.auth...)
		ms, _ := body["messages"].([]any)
		if code != 200 || len(ms) != 1 || ms[0].(map[string]any)["id"] != float64(c.own) {
			t.Fatalf("dead list: %d %v; want only the tenant's own %d", code, body, c.own)
		}
		if code, body, _ := do(t, h, "GET", "/v1/outbox/stats", "", c.auth...); code != 200 || body["dead"] != float64(1) {
			t.Fatalf("stats: %d %v; want the tenant's one dead message", code, body)
		}
		for _, op := range []string{"redrive", "discard"} {
			if code, body, _ := do(t, h, "POST", fmt.Sprintf("/v1/outbox/dead/%d/%s", c.other, op), "", c.auth...); code != 404 {
				t.Fatalf("%s of the other tenant's message: %d %v, want 404", op, code, body)
			}
		}
	}
	if n := rows(t, owner, fmt.Sprintf(`SELECT count(*) FROM racefree_outbox WHERE topic = '%s' AND state = 'dead' AND tenant IN ('%s', '%s')`, topic, tenantA, tenantB)); n != 2 {
		t.Fatalf("%d dead messages, want both left alone", n)
	}
	// An enqueue belongs to the key's tenant, whatever the request says.
	code, body, _ := do(t, h, "POST", "/v1/outbox?tenant="+tenantB, `{"topic":"`+topic+`","key":"k"}`, append(as, "X-Racefree-Tenant", tenantB)...)
	if code != 200 {
		t.Fatalf("enqueue: %d %v", code, body)
	}
	if n := rows(t, owner, fmt.Sprintf(`SELECT count(*) FROM racefree_outbox WHERE id = %v AND tenant = '%s'`, body["id"], tenantA)); n != 1 {
		t.Fatal("the message is not the key's tenant's")
	}
	for _, c := range []struct {
		auth  []string
		ready float64
	}{{as, 1}, {bs, 0}} {
		if code, body, _ := do(t, h, "GET", "/v1/outbox/stats", "", c.auth...); code != 200 || body["ready"] != c.ready {
			t.Fatalf("stats after A's enqueue: %d %v, want ready %v", code, body, c.ready)
		}
	}
}

// TestEnqueueDelays: delay_ms and not_before hold a message back, by the
// database's clock; a not_before in the past is due at once.
func TestEnqueueDelays(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		due := func() (ready, due float64) {
			t.Helper()
			code, st, _ := do(t, h, "GET", "/v1/outbox/stats", "")
			if code != 200 {
				t.Fatalf("stats: %d %v", code, st)
			}
			return st["ready"].(float64), st["due"].(float64)
		}
		for i, body := range []string{
			`{"topic":"t","delay_ms":3600000}`,
			`{"topic":"t","not_before":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}`,
			`{"topic":"t","not_before":"2001-01-01T00:00:00Z"}`,
			`{"topic":"t","delay_ms":0}`,
		} {
			if code, resp, _ := do(t, h, "POST", "/v1/outbox", body); code != 200 {
				t.Fatalf("%s: %d %v", body, code, resp)
			}
			wantDue := float64(max(0, i-1))
			if ready, d := due(); ready != float64(i+1) || d != wantDue {
				t.Fatalf("after %s: %v ready, %v due; want %d ready, %v due", body, ready, d, i+1, wantDue)
			}
		}
	})
}
