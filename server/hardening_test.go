package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// crashOnStore makes every attempt to store an idempotent response fail,
// as a process killed (SQLite) or a connection terminated (PostgreSQL,
// SQLSTATE 57P01) between the operation and its stored response would. It
// returns the function that repairs the database.
func crashOnStore(t *testing.T, db *racefree.DB) (repair func()) {
	t.Helper()
	ctx := context.Background()
	stmts := []string{`CREATE TRIGGER crash BEFORE UPDATE OF status ON racefree_idempotency
		WHEN NEW.status = 'completed' BEGIN SELECT RAISE(ABORT, 'crashed before the response was stored'); END`}
	if db.Engine() == racefree.Postgres {
		stmts = []string{`CREATE FUNCTION crash() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'terminating connection due to administrator command' USING ERRCODE = '57P01'; END $$`,
			`CREATE TRIGGER crash BEFORE UPDATE ON racefree_idempotency FOR EACH ROW WHEN (NEW.status = 'completed') EXECUTE FUNCTION crash()`}
	}
	testdb.ExecAll(t, db, stmts...)
	return func() {
		q := `DROP TRIGGER crash`
		if db.Engine() == racefree.Postgres {
			q += ` ON racefree_idempotency`
		}
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

func claimRow(t *testing.T, db *racefree.DB, key string) (fence, count int64) {
	t.Helper()
	if err := db.QueryRowContext(context.Background(), `SELECT fence, count FROM racefree_claims WHERE ns = '' AND key = $1`, key).Scan(&fence, &count); err != nil {
		t.Fatal(err)
	}
	return fence, count
}

func TestCrashBeforeTheStoredResponseLeavesNoTenure(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		repair := crashOnStore(t, db)
		body := `{"holder":"w1","ttl_ms":60000}`
		if code, resp, _ := do(t, h, "POST", "/v1/claims/job", body, "Idempotency-Key", `"once"`); code < 500 {
			t.Fatalf("with the store failing: %d %v, want a 5xx", code, resp)
		}
		repair()
		// The client retries with the same key: the operation and its stored
		// response rolled back together, so it runs now, once.
		code, first, hdr := do(t, h, "POST", "/v1/claims/job", body, "Idempotency-Key", `"once"`)
		if code != 200 || first["fence"] != float64(1) || hdr.Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry: %d %v %v; want 200, fence 1, not replayed", code, first, hdr)
		}
		if fence, count := claimRow(t, db, "job"); fence != 1 || count != 1 {
			t.Fatalf("claim row: fence %d, count %d; want 1 and 1 (one tenure, one attempt)", fence, count)
		}
		code, again, hdr := do(t, h, "POST", "/v1/claims/job", body, "Idempotency-Key", `"once"`)
		if code != 200 || again["fence"] != float64(1) || hdr.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("second retry: %d %v %v; want the replay", code, again, hdr)
		}
		if fence, count := claimRow(t, db, "job"); fence != 1 || count != 1 {
			t.Fatalf("after the replay: fence %d, count %d; want 1 and 1", fence, count)
		}
	})
}

func TestIdempotentRoutesStoreOnlyWhatExecuted(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		// Refused input runs nothing and stores nothing: the corrected
		// request with the same key runs.
		if code, body, _ := do(t, h, "POST", "/v1/claims/k", `{"holder":"w1","ttl_ms":0}`, "Idempotency-Key", `"a"`); code != 400 {
			t.Fatalf("bad ttl: %d %v", code, body)
		}
		if code, body, hdr := do(t, h, "POST", "/v1/claims/k", `{"holder":"w1","ttl_ms":60000}`, "Idempotency-Key", `"a"`); code != 200 || hdr.Get("Idempotent-Replayed") != "" {
			t.Fatalf("corrected request, same key: %d %v", code, body)
		}
		// An outcome the operation decided (held) is stored and replayed,
		// and the attempt is counted once.
		code, held, _ := do(t, h, "POST", "/v1/claims/k", `{"holder":"w2","ttl_ms":60000}`, "Idempotency-Key", `"b"`)
		if code != 409 || held["type"] != "urn:racefree:problem:held" {
			t.Fatalf("held: %d %v", code, held)
		}
		code, again, hdr := do(t, h, "POST", "/v1/claims/k", `{"holder":"w2","ttl_ms":60000}`, "Idempotency-Key", `"b"`)
		if code != 409 || again["holder"] != "w1" || hdr.Get("Idempotent-Replayed") != "true" || hdr.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("held, replayed: %d %v %v", code, again, hdr)
		}
		if _, count := claimRow(t, db, "k"); count != 2 {
			t.Fatalf("count %d, want 2 attempts", count)
		}
		// Without a key, a held attempt is still counted.
		if code, _, _ := do(t, h, "POST", "/v1/claims/k", `{"holder":"w3","ttl_ms":60000}`); code != 409 {
			t.Fatalf("held without a key: %d", code)
		}
		if _, count := claimRow(t, db, "k"); count != 3 {
			t.Fatalf("count %d, want 3 attempts", count)
		}
	})
}

// proxy forwards TCP connections to target until cut.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

// cut closes the listener and every connection, as a database that went
// away would.
func (p *proxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func TestDatabaseOutageIs503OnEveryRoute(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	u, err := url.Parse(d)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, u.Host)
	u.Host = p.ln.Addr().String()
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	db := testdb.Open(t, u.String(), nil)
	h := server.New(db, server.Options{InboxSecrets: map[string][]string{"stripe": {secret}}}).Handler()
	if code, body, _ := do(t, h, "POST", "/v1/claims/k", `{"holder":"w1","ttl_ms":60000}`); code != 200 {
		t.Fatalf("before the outage: %d %v", code, body)
	}
	p.cut()

	for _, c := range []struct {
		method, path, body string
		header             []string
	}{
		{"POST", "/v1/claims/k", `{"holder":"w1","ttl_ms":60000}`, nil},
		{"POST", "/v1/claims/k", `{"holder":"w1","ttl_ms":60000}`, []string{"Idempotency-Key", `"k1"`}},
		{"POST", "/v1/claims/k/renew", `{"holder":"w1","fence":1,"ttl_ms":60000}`, nil},
		{"DELETE", "/v1/claims/k?holder=w1&fence=1", "", nil},
		{"GET", "/v1/claims/k", "", nil},
		{"POST", "/v1/events", `{"source":"s","level":"l","message":"m"}`, nil},
		{"POST", "/v1/events", `{"source":"s","level":"l","message":"m"}`, []string{"Idempotency-Key", `"k2"`}},
		{"POST", "/v1/events/fp/result", `{"fence":1,"classification":"c"}`, nil},
		{"POST", "/v1/inbox/stripe", `{}`, webhook(t, secret, "evt_1", time.Now(), `{}`)},
		{"GET", "/v1/inbox/stripe", "", nil},
		{"POST", "/v1/tokens", `{"purpose":"p","subject":"s","ttl_ms":60000}`, nil},
		{"POST", "/v1/tokens/consume", `{"purpose":"p","token":"t"}`, []string{"Idempotency-Key", `"k3"`}},
		{"POST", "/v1/tokens/rotate", `{"token":"t"}`, nil},
		{"POST", "/v1/outbox", `{"topic":"t"}`, nil},
		{"POST", "/v1/outbox", `{"topic":"t"}`, []string{"Idempotency-Key", `"k4"`}},
		{"GET", "/v1/outbox/dead", "", nil},
		{"GET", "/v1/outbox/stats", "", nil},
		{"POST", "/v1/outbox/dead/1/redrive", "", nil},
		{"POST", "/v1/outbox/dead/1/discard", "", nil},
		{"POST", "/v1/quotas/q/consume", `{"policy":{"kind":"window","rate":1,"per_ms":1000}}`, nil},
		{"POST", "/v1/quotas/q/consume", `{"policy":{"kind":"window","rate":1,"per_ms":1000}}`, []string{"Idempotency-Key", `"k5"`}},
	} {
		code, body, hdr := do(t, h, c.method, c.path, c.body, c.header...)
		if code != 503 || hdr.Get("Retry-After") == "" || hdr.Get("Content-Type") != "application/problem+json" ||
			hdr.Get("RateLimit") != "" || hdr.Get("RateLimit-Policy") != "" { // nothing was decided
			t.Errorf("%s %s %v: %d %v %v; want 503 problem with Retry-After and no RateLimit", c.method, c.path, c.header, code, body, hdr)
		}
	}
	if m := scrape(t, h); !strings.Contains(m, `racefree_inbox_deliveries_total{outcome="failed",source="stripe"} 1`+"\n") {
		t.Errorf("the failed delivery is not counted")
	}
	code, body, hdr := do(t, h, "GET", "/readyz", "")
	if code != 503 || body["type"] != "urn:racefree:problem:not-ready" || hdr.Get("Retry-After") == "" {
		t.Fatalf("readyz: %d %v", code, body)
	}
	if d, _ := body["detail"].(string); strings.Contains(d, "127.0.0.1") || strings.Contains(d, "dial") || strings.Contains(d, "connect") {
		t.Fatalf("readyz shows the database error to anyone: %q", d)
	}
}

// TestBusyDatabaseIs503: a request that waits for the database (a lock
// another transaction holds) past Options.RequestTimeout answers 503
// unavailable with Retry-After at that deadline, through the combiner (on
// by default), whose batch the request leads, as alone.
func TestBusyDatabaseIs503(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{RequestTimeout: 300 * time.Millisecond}).Handler()
		if code, _, _ := do(t, h, "POST", "/v1/claims/k", `{"holder":"w1","ttl_ms":60000}`); code != 200 {
			t.Fatalf("acquire: %d", code)
		}
		// Another writer holds the claim's row (PostgreSQL) or the write
		// lock (SQLite) for longer than the request may wait.
		tx, err := db.SQL().BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(t.Context(), `UPDATE racefree_claims SET count = count WHERE key = 'k'`); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/v1/claims/k/renew", `{"holder":"w1","fence":1,"ttl_ms":60000}`},
			{"DELETE", "/v1/claims/k?holder=w1&fence=1", ""},
		} {
			start := time.Now()
			code, body, hdr := do(t, h, c.method, c.path, c.body)
			if code != 503 || hdr.Get("Retry-After") == "" || body["type"] != "urn:racefree:problem:unavailable" {
				t.Errorf("%s %s while busy: %d %v; want 503 unavailable", c.method, c.path, code, body)
			}
			// At the request's deadline, not once the database gives up
			// (a lock timeout, the busy timeout and its retries: a minute
			// and more).
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("%s %s while busy answered after %s; want about the RequestTimeout of 300ms", c.method, c.path, took)
			}
		}
		tx.Rollback()
		// A 503 leaves the outcome of a write unknown (the release may have
		// run once the lock was free); the database answers again.
		if code, body, _ := do(t, h, "GET", "/v1/claims/k", ""); code != 200 {
			t.Fatalf("get after: %d %v", code, body)
		}
	})
}

func TestNULBytesAre400AndChangeNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{InboxSecrets: map[string][]string{"stripe": {secret}}}).Handler()
		for _, c := range []struct {
			method, path, body string
			header             []string
		}{
			{"POST", "/v1/claims/a%00b", `{"holder":"w","ttl_ms":1000}`, nil},
			{"POST", "/v1/claims/k", `{"holder":"w\u0000","ttl_ms":1000}`, nil},
			{"POST", "/v1/claims/k", `{"holder":"w\u0000","ttl_ms":1000}`, []string{"Idempotency-Key", `"n"`}},
			{"POST", "/v1/claims/k/renew", `{"holder":"w\u0000","fence":1,"ttl_ms":1000}`, nil},
			{"DELETE", "/v1/claims/k?holder=w%00&fence=1", "", nil},
			{"GET", "/v1/claims/a%00b", "", nil},
			{"POST", "/v1/events", `{"source":"s\u0000","level":"l","message":"m"}`, nil},
			{"POST", "/v1/events", `{"source":"s","level":"l","message":"m","fingerprint":"f\u0000"}`, nil},
			{"POST", "/v1/events/f%00p/result", `{"fence":1,"classification":"c"}`, nil},
			{"POST", "/v1/inbox/stripe", `{}`, webhook(t, secret, "evt\x00", time.Now(), `{}`)},
			// A NUL as the first byte, where a search for it finds index 0.
			{"POST", "/v1/claims/%00k", `{"holder":"w","ttl_ms":1000}`, nil},
			{"POST", "/v1/claims/k", `{"holder":"\u0000w","ttl_ms":1000}`, nil},
			{"POST", "/v1/events", `{"source":"\u0000s","level":"l","message":"m"}`, nil},
			{"POST", "/v1/events", `{"source":"s","level":"l","message":"m","fingerprint":"\u0000f"}`, nil},
			{"POST", "/v1/inbox/stripe", `{}`, webhook(t, secret, "\x00evt", time.Now(), `{}`)},
		} {
			code, body, _ := do(t, h, c.method, c.path, c.body, c.header...)
			if code != 400 || body["type"] != "urn:racefree:problem:invalid-input" || !strings.Contains(body["detail"].(string), "NUL") {
				t.Errorf("%s %s %q: %d %v; want 400 invalid-input naming the NUL byte", c.method, c.path, c.body, code, body)
			}
		}
		for _, table := range []string{"racefree_claims", "racefree_dedup_events", "racefree_idempotency", "racefree_inbox"} {
			var n int
			if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != 0 {
				t.Errorf("%s: %d rows, %v; want none", table, n, err)
			}
		}
	})
}

func TestHTTPEdges(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{InboxMaxBody: 1 << 20, InboxSecrets: map[string][]string{"stripe": {secret}}}).Handler()
		for _, p := range []string{"/v1/claims/.", "/v1/claims/..", "/v1/claims//k", "/v1/claims/./renew", "/v1/../healthz"} {
			code, body, hdr := do(t, h, "POST", p, `{"holder":"w","ttl_ms":1000}`)
			if code != 400 || hdr.Get("Location") != "" || body["type"] != "urn:racefree:problem:invalid-input" {
				t.Errorf("POST %s: %d %v %v; want a 400 problem, no redirect", p, code, body, hdr)
			}
		}

		big := `{"holder":"` + strings.Repeat("x", 1<<20) + `"}`
		for _, c := range []struct {
			path   string
			header []string
		}{
			{"/v1/claims/k", nil},
			{"/v1/claims/k", []string{"Idempotency-Key", `"big"`}},
			{"/v1/claims/k/renew", nil},
			{"/v1/events", nil},
			{"/v1/events", []string{"Idempotency-Key", `"big"`}},
			{"/v1/events/fp/result", nil},
			{"/v1/inbox/stripe", webhook(t, secret, "evt_big", time.Now(), big)},
		} {
			code, body, _ := do(t, h, "POST", c.path, big, c.header...)
			if code != 413 || body["type"] != "urn:racefree:problem:too-large" {
				t.Errorf("POST %s %v with 1 MiB: %d %v; want 413 too-large", c.path, c.header, code, body)
			}
		}

		// At the bound: a body of exactly 1 MiB is read (and judged: its
		// holder is too long, 400); one byte more is 413.
		frame := `{"holder":"","ttl_ms":1000}`
		atBound := strings.Replace(frame, `""`, `"`+strings.Repeat("x", 1<<20-len(frame))+`"`, 1)
		if code, body, _ := do(t, h, "POST", "/v1/claims/k", atBound); len(atBound) != 1<<20 || code != 400 || body["type"] != "urn:racefree:problem:invalid-input" {
			t.Errorf("a body of exactly 1 MiB (%d bytes): %d %v; want it read: 400 invalid-input, not 413", len(atBound), code, body)
		}
		if code, body, _ := do(t, h, "POST", "/v1/claims/k", atBound+" "); code != 413 || body["type"] != "urn:racefree:problem:too-large" {
			t.Errorf("a body of 1 MiB and 1 byte: %d %v; want 413 too-large", code, body)
		}

		for _, c := range []struct{ body, field, want string }{
			{`{"holder":[1],"ttl_ms":1000}`, "holder", "must be a string"},
			{`{"holder":"w","ttl_ms":"soon"}`, "ttl_ms", "must be an integer"},
			{`{"holder":"w","ttl_ms":1.5}`, "ttl_ms", "must be an integer"},
			{`[]`, "request body", "must be a JSON object"},
			{`{"holder":"w","ttl_ms":1000,"extra":1}`, "extra", "is not a field"},
			{`{"holder":`, "request body", "not valid JSON"},
			{`{"holder":"w","ttl_ms":1000} {}`, "request body", "after the JSON object"},
			{``, "request body", "is empty"},
		} {
			code, body, _ := do(t, h, "POST", "/v1/claims/k", c.body)
			d, _ := body["detail"].(string)
			if code != 400 || !strings.Contains(d, c.field) || !strings.Contains(d, c.want) || strings.Contains(d, "Go ") || strings.Contains(d, "struct") || strings.Contains(d, "int64") {
				t.Errorf("%s: %d %q; want 400 saying %s %s", c.body, code, d, c.field, c.want)
			}
		}

		if code, _, _ := do(t, h, "POST", "/v1/claims/k", `{"holder":"w","ttl_ms":60000}`); code != 200 {
			t.Fatalf("acquire: %d", code)
		}
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/v1/claims/k/renew", `{"holder":"w","fence":0,"ttl_ms":1000}`},
			{"POST", "/v1/claims/k/renew", `{"holder":"w","fence":-1,"ttl_ms":1000}`},
			{"DELETE", "/v1/claims/k?holder=w&fence=0", ""},
			{"DELETE", "/v1/claims/k?holder=w&fence=-3", ""},
			{"POST", "/v1/events/fp/result", `{"fence":0,"classification":"c"}`},
		} {
			code, body, _ := do(t, h, c.method, c.path, c.body)
			if code != 400 || body["type"] != "urn:racefree:problem:invalid-input" {
				t.Errorf("%s %s %s: %d %v; want 400", c.method, c.path, c.body, code, body)
			}
		}
	})
}

func TestMetricsToken(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{Token: "api", MetricsToken: "scrape"}).Handler()
		for _, c := range []struct {
			auth string
			want int
		}{{"", 401}, {"Bearer api", 401}, {"Bearer scrape", 200}} {
			if code, _, hdr := do(t, h, "GET", "/metrics", "", "Authorization", c.auth); code != c.want || (code == 401 && hdr.Get("WWW-Authenticate") == "") {
				t.Errorf("/metrics with %q: %d, want %d", c.auth, code, c.want)
			}
		}
		if code, _, _ := do(t, server.New(db, server.Options{Token: "api"}).Handler(), "GET", "/metrics", ""); code != 200 {
			t.Errorf("/metrics without MetricsToken: %d, want 200 (open)", code)
		}
	})
}

func TestDomainMetricsMove(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		srv := server.New(db, server.Options{InboxRetention: time.Hour, InboxSecrets: map[string][]string{"stripe": {secret}}})
		h := srv.Handler()
		do(t, h, "POST", "/v1/claims/k", `{"holder":"w1","ttl_ms":60000}`)
		do(t, h, "POST", "/v1/claims/k", `{"holder":"w2","ttl_ms":60000}`)
		do(t, h, "DELETE", "/v1/claims/k?holder=w1&fence=1", "")
		do(t, h, "POST", "/v1/claims/k", `{"holder":"w2","ttl_ms":60000}`)
		do(t, h, "POST", "/v1/claims/k/renew", `{"holder":"w1","fence":1,"ttl_ms":60000}`)
		do(t, h, "POST", "/v1/claims/j", `{"holder":"w1","ttl_ms":60000}`, "Idempotency-Key", `"r"`)
		do(t, h, "POST", "/v1/claims/j", `{"holder":"w1","ttl_ms":60000}`, "Idempotency-Key", `"r"`)
		do(t, h, "POST", "/v1/claims/j", `{"holder":"w9","ttl_ms":60000}`, "Idempotency-Key", `"r"`)
		ev := `{"source":"s","level":"l","message":"m"}`
		do(t, h, "POST", "/v1/events", ev)
		do(t, h, "POST", "/v1/events", ev)
		now := time.Now()
		do(t, h, "POST", "/v1/inbox/stripe", `{}`, webhook(t, secret, "evt_1", now, `{}`)...)
		do(t, h, "POST", "/v1/inbox/stripe", `{}`, webhook(t, secret, "evt_1", now, `{}`)...)
		do(t, h, "POST", "/v1/inbox/stripe", `{}`, webhook(t, rotated, "evt_2", now, `{}`)...)
		clock.Advance(2 * time.Hour)
		if n, _, err := srv.Reap(t.Context()); err != nil || n != 1 {
			t.Fatalf("reap: %d, %v; want 1 inbox event", n, err)
		}

		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, want := range []string{
			`racefree_claim_operations_total{op="acquire",outcome="ok"} 3`,
			`racefree_claim_operations_total{op="acquire",outcome="held"} 1`,
			`racefree_claim_operations_total{op="release",outcome="ok"} 1`,
			`racefree_claim_operations_total{op="renew",outcome="stale"} 1`,
			`racefree_idempotency_requests_total{outcome="replayed"} 1`,
			`racefree_idempotency_requests_total{outcome="mismatch"} 1`,
			`racefree_event_observations_total{outcome="process"} 1`,
			`racefree_event_observations_total{outcome="duplicate"} 1`,
			`racefree_inbox_deliveries_total{outcome="new",source="stripe"} 1`,
			`racefree_inbox_deliveries_total{outcome="duplicate",source="stripe"} 1`,
			`racefree_inbox_deliveries_total{outcome="rejected",source="stripe"} 1`,
			`racefree_reaped_rows_total{what="inbox_events"} 1`,
		} {
			if !strings.Contains(rec.Body.String(), want+"\n") {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

func TestBearerTokenOnEveryV1Route(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{Token: "s3cret", InboxSecrets: map[string][]string{"stripe": {secret}}}).Handler()
		routes := []struct{ method, path, body string }{
			{"POST", "/v1/claims/k", `{"holder":"w","ttl_ms":60000}`},
			{"POST", "/v1/claims/k/renew", `{"holder":"w","fence":1,"ttl_ms":60000}`},
			{"GET", "/v1/claims/k", ""},
			{"DELETE", "/v1/claims/k?holder=w&fence=1", ""},
			{"POST", "/v1/events", `{"source":"s","level":"l","message":"m"}`},
			{"POST", "/v1/events/fp/result", `{"fence":1,"classification":"c"}`},
			{"GET", "/v1/inbox/stripe", ""},
			{"POST", "/v1/tokens", `{"purpose":"p","subject":"s","ttl_ms":60000}`},
			{"POST", "/v1/tokens/consume", `{"purpose":"p","token":"t"}`},
			{"POST", "/v1/tokens/rotate", `{"token":"t"}`},
			{"POST", "/v1/outbox", `{"topic":"t"}`},
			{"GET", "/v1/outbox/dead", ""},
			{"GET", "/v1/outbox/stats", ""},
			{"POST", "/v1/outbox/dead/1/redrive", ""},
			{"POST", "/v1/outbox/dead/1/discard", ""},
			{"GET", "/v1/nowhere", ""},
		}
		for _, auth := range []string{"", "Bearer wrong", "s3cret", "Bearer s3cret "} {
			for _, r := range routes {
				code, body, hdr := do(t, h, r.method, r.path, r.body, "Authorization", auth, "Idempotency-Key", `"x"`)
				if code != 401 || hdr.Get("WWW-Authenticate") == "" || body["type"] != "urn:racefree:problem:unauthorized" {
					t.Errorf("%s %s with %q: %d %v; want 401", r.method, r.path, auth, code, body)
				}
			}
		}
		for _, table := range []string{"racefree_claims", "racefree_dedup_events", "racefree_idempotency", "racefree_outbox"} {
			var n int
			if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != 0 {
				t.Errorf("%s: %d rows after refused requests, %v; want none", table, n, err)
			}
		}
		// With the token every route answers; the signed inbox POST needs none.
		if code, body, _ := do(t, h, "POST", "/v1/claims/k", `{"holder":"w","ttl_ms":60000}`, "Authorization", "Bearer s3cret"); code != 200 {
			t.Fatalf("with the token: %d %v", code, body)
		}
		if code, body, _ := do(t, h, "POST", "/v1/inbox/stripe", `{}`, webhook(t, secret, "evt_1", time.Now(), `{}`)...); code != 204 {
			t.Fatalf("signed delivery without the token: %d %v", code, body)
		}
	})
}

func TestEventRoutesCommitWithTheirStoredResponse(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		repair := crashOnStore(t, db)
		ev := `{"source":"s","level":"l","message":"m"}`
		if code, body, _ := do(t, h, "POST", "/v1/events", ev, "Idempotency-Key", `"e"`); code < 500 {
			t.Fatalf("with the store failing: %d %v, want a 5xx", code, body)
		}
		repair()
		code, first, hdr := do(t, h, "POST", "/v1/events", ev, "Idempotency-Key", `"e"`)
		if code != 200 || first["process"] != true || first["count"] != float64(1) || hdr.Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry: %d %v; want the first observation, counted once", code, first)
		}
		fp := first["fingerprint"].(string)
		result := `{"fence":1,"classification":"c","external_id":"X"}`
		if code, body, _ := do(t, h, "POST", "/v1/events/"+fp+"/result", result, "Idempotency-Key", `"r"`); code != 200 {
			t.Fatalf("result: %d %v", code, body)
		}
		if code, body, hdr := do(t, h, "POST", "/v1/events/"+fp+"/result", result, "Idempotency-Key", `"r"`); code != 200 || hdr.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("result again: %d %v %v; want the replay", code, body, hdr)
		}
		code, again, hdr := do(t, h, "POST", "/v1/events", ev, "Idempotency-Key", `"e"`)
		if code != 200 || again["count"] != float64(1) || hdr.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("observe again: %d %v %v; want the replay", code, again, hdr)
		}
	})
}

func TestDuplicateWhileAnotherRunHoldsTheKeyIs409(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		body := `{"holder":"w1","ttl_ms":60000}`
		req := httptest.NewRequest("POST", "/v1/claims/k", strings.NewReader(body))
		scope, fp := idempotency.DefaultScope(req), idempotency.Fingerprint(req, []byte(body))
		// Another process runs the same request under the key's lease.
		running, finish := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := idempotency.New(db, nil).Do(context.Background(), scope, "busy", fp, func(context.Context, *idempotency.Call) ([]byte, error) {
				close(running)
				<-finish
				return []byte(`{"status":200,"body":{}}`), nil
			})
			done <- err
		}()
		<-running
		code, resp, hdr := do(t, h, "POST", "/v1/claims/k", body, "Idempotency-Key", `"busy"`)
		close(finish)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if code != 409 || hdr.Get("Retry-After") == "" || resp["type"] != "urn:racefree:problem:idempotency-in-progress" {
			t.Fatalf("duplicate in flight: %d %v %v; want 409 with Retry-After", code, resp, hdr)
		}
		if m := scrape(t, h); !strings.Contains(m, `racefree_idempotency_requests_total{outcome="in_progress"} 1`+"\n") {
			t.Errorf("the in-progress 409 is not counted")
		}
		var n int
		if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM racefree_claims WHERE ns = ''`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d claims, %v; the duplicate must not run", n, err)
		}
	})
}

// scrape returns what /metrics shows.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// TestControlCharactersInHeadersAreRefusedByNetHTTP pins down what the
// README says: Go's net/http refuses such a request with a plain-text 400
// before racefree's handler sees it.
func TestControlCharactersInHeadersAreRefusedByNetHTTP(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	ts := httptest.NewServer(server.New(db, server.Options{}).Handler())
	defer ts.Close()
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /v1/claims/k HTTP/1.1\r\nHost: x\r\nIdempotency-Key: \"a\x01b\"\r\nContent-Length: 2\r\n\r\n{}")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 400 || strings.Contains(resp.Header.Get("Content-Type"), "problem") {
		t.Fatalf("%d %s; want net/http's plain 400", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM racefree_claims`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d claims, %v; want none", n, err)
	}

	// A tab is the one control character net/http lets through in a
	// header value: racefree refuses it in an Idempotency-Key, quoted (no
	// Structured Field string holds one) or not (no token does), with a
	// 400 problem, and changes nothing.
	for _, key := range []string{"\"a\tb\"", "a\tb"} {
		conn, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		body := `{"holder":"w","ttl_ms":1000}`
		fmt.Fprintf(conn, "POST /v1/claims/k HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		var p map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != 400 || p["type"] != "urn:racefree:problem:idempotency-key-malformed" {
			t.Errorf("Idempotency-Key %q: %d %v; want 400 idempotency-key-malformed", key, resp.StatusCode, p)
		}
	}
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM racefree_claims`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d claims, %v; want none", n, err)
	}
}

// TestTerminatedBackendIs503 terminates the connection of a request that
// waits for a row lock, as a PostgreSQL restart or an operator would: the
// request answers 503 with Retry-After, not 500.
func TestTerminatedBackendIs503(t *testing.T) {
	t.Parallel()
	app := fmt.Sprintf("rf_terminate_%d", time.Now().UnixNano())
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres)+"&application_name="+app, nil)
	admin := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	h := server.New(db, server.Options{}).Handler()
	if code, body, _ := do(t, h, "POST", "/v1/claims/k", `{"holder":"w1","ttl_ms":60000}`); code != 200 {
		t.Fatalf("acquire: %d %v", code, body)
	}
	for _, c := range []struct {
		method, path, body string
		header             []string
	}{
		{"POST", "/v1/claims/k/renew", `{"holder":"w1","fence":1,"ttl_ms":60000}`, nil},
		{"POST", "/v1/claims/k", `{"holder":"w1","ttl_ms":60000}`, []string{"Idempotency-Key", `"t1"`}},
		{"DELETE", "/v1/claims/k?holder=w1&fence=1", "", nil},
	} {
		tx, err := db.SQL().BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(t.Context(), `SELECT 1 FROM racefree_claims WHERE key = 'k' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		type answer struct {
			code int
			body map[string]any
			hdr  http.Header
		}
		done := make(chan answer, 1)
		go func() {
			code, body, hdr := do(t, h, c.method, c.path, c.body, c.header...)
			done <- answer{code, body, hdr}
		}()
		var pid int
		for pid == 0 {
			err := admin.QueryRowContext(t.Context(), `SELECT COALESCE(max(pid), 0) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&pid)
			if err != nil {
				t.Fatal(err)
			}
			if pid == 0 {
				time.Sleep(10 * time.Millisecond) // poll the state
			}
		}
		if _, err := admin.ExecContext(t.Context(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Fatal(err)
		}
		a := <-done
		if a.code != 503 || a.hdr.Get("Retry-After") == "" || a.body["type"] != "urn:racefree:problem:unavailable" {
			t.Errorf("%s %s %v with its connection terminated: %d %v; want 503 unavailable with Retry-After", c.method, c.path, c.header, a.code, a.body)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
	if code, body, _ := do(t, h, "POST", "/v1/claims/k/renew", `{"holder":"w1","fence":1,"ttl_ms":60000}`); code != 200 {
		t.Fatalf("renew once the database answers again: %d %v", code, body)
	}
}

func TestConcurrentDuplicatesWaitAndReplay(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		const n = 16
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			fences   = map[any]int{}
			replayed int
		)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, body, hdr := do(t, h, "POST", "/v1/claims/dup", `{"holder":"w1","ttl_ms":60000}`, "Idempotency-Key", `"same"`)
				mu.Lock()
				defer mu.Unlock()
				if code != 200 {
					t.Errorf("duplicate: %d %v", code, body)
					return
				}
				fences[body["fence"]]++
				if hdr.Get("Idempotent-Replayed") == "true" {
					replayed++
				}
			}()
		}
		wg.Wait()
		if len(fences) != 1 || fences[float64(1)] != n || replayed != n-1 {
			t.Fatalf("fences %v, %d replayed; want fence 1 for all %d and %d replays", fences, replayed, n, n-1)
		}
		if fence, count := claimRow(t, db, "dup"); fence != 1 || count != 1 {
			t.Fatalf("claim row: fence %d, count %d; want one attempt", fence, count)
		}
	})
}
