package server_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/server"
)

// metricSet is a scrape of /metrics: each series ("name{a="x",b="y"}",
// labels sorted) and its value.
type metricSet map[string]float64

func parseMetrics(t *testing.T, text string) metricSet {
	t.Helper()
	m := metricSet{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		series := line[:i]
		if j := strings.IndexByte(series, '{'); j >= 0 {
			labels := strings.Split(strings.TrimSuffix(series[j+1:], "}"), ",")
			sort.Strings(labels)
			series = series[:j] + "{" + strings.Join(labels, ",") + "}"
		}
		m[series] = v
	}
	return m
}

// get returns the value of name with labels ("a", "x", "b", "y"), and
// whether the scrape had it.
func (m metricSet) get(name string, labels ...string) (float64, bool) {
	series := name
	if len(labels) > 0 {
		var ls []string
		for i := 0; i+1 < len(labels); i += 2 {
			ls = append(ls, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
		}
		sort.Strings(ls)
		series += "{" + strings.Join(ls, ",") + "}"
	}
	v, ok := m[series]
	return v, ok
}

// names returns the metric names of the scrape, histogram series folded
// into their family.
func (m metricSet) names() map[string]bool {
	out := map[string]bool{}
	for s := range m {
		if i := strings.IndexByte(s, '{'); i >= 0 {
			s = s[:i]
		}
		out[s] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			out[strings.TrimSuffix(s, suffix)] = true
		}
	}
	return out
}

// want checks the value of each series: "name", labels..., value.
func (m metricSet) want(t *testing.T, what string, name string, value float64, labels ...string) {
	t.Helper()
	v, ok := m.get(name, labels...)
	if !ok || v != value {
		t.Errorf("%s: %s%v = %v (present %v), want %v", what, name, labels, v, ok, value)
	}
}

// TestPrimitiveMetricsMove exercises each primitive over HTTP on both
// engines and checks that its metric moves: quota decisions by kind,
// outbox enqueues, backlog, due messages, oldest due age, dead letters
// and the relay's deliveries, sequence numbers, audit appends, the
// entries no checkpoint covers and their age, the entries not verified
// and broken chains. It ends by checking that every metric the Grafana
// dashboard and the alerting rules name is one this server exposes.
func TestPrimitiveMetricsMove(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		s := server.New(db, server.Options{AuditKeys: auditRing(t, true), InboxSecrets: map[string][]string{"stripe": {secret}}})
		h := s.Handler()
		post := func(path, body string, want int) {
			t.Helper()
			if code, b, _ := do(t, h, "POST", path, body, "Content-Type", "application/json"); code != want {
				t.Fatalf("POST %s: %d %v, want %d", path, code, b, want)
			}
		}
		m := parseMetrics(t, scrape(t, h))
		m.want(t, "an empty database", "racefree_database_gauges_ok", 1)
		m.want(t, "an empty database", "racefree_outbox_messages", 0, "state", "ready")
		m.want(t, "an empty database", "racefree_outbox_oldest_due_age_seconds", 0)
		m.want(t, "an empty database", "racefree_audit_checkpoint_age_seconds", 0)

		// Quotas: admitted and refused, by policy kind.
		post("/v1/quotas/user-1/consume", `{"policy":{"kind":"window","rate":1,"per_ms":60000}}`, 200)
		post("/v1/quotas/user-1/consume", `{"policy":{"kind":"window","rate":1,"per_ms":60000}}`, 429)
		post("/v1/quotas/user-2/consume", `{"policy":{"kind":"gcra","rate":5,"per_ms":1000,"burst":5}}`, 200)
		post("/v1/quotas/user-2/consume", `{"policy":{"kind":"bogus","rate":5,"per_ms":1000}}`, 400)

		// Sequences: numbers handed out.
		post("/v1/sequences/invoices/2026/next", `{"n":3}`, 200)

		// The outbox: one message due in a minute, then, 30 s on, two due
		// at once: the delayed one is the oldest, not the longest due.
		post("/v1/outbox", `{"topic":"later","payload":{"n":3},"delay_ms":60000}`, 200)
		clock.Advance(30 * time.Second)
		m = parseMetrics(t, scrape(t, h))
		m.want(t, "outbox, a delayed message", "racefree_outbox_messages", 1, "state", "ready")
		m.want(t, "outbox, a delayed message", "racefree_outbox_due_messages", 0)
		m.want(t, "outbox, a delayed message", "racefree_outbox_oldest_due_age_seconds", 0)
		post("/v1/outbox", `{"topic":"ok","payload":{"n":1}}`, 200)
		post("/v1/outbox", `{"topic":"bad","payload":{"n":2}}`, 200)

		// The audit log: three entries, none checkpointed yet.
		for i := range 3 {
			post("/v1/audit", fmt.Sprintf(`{"scope":"billing","actor":"ops","action":"refund","subject":"order-%d"}`, i), 200)
		}
		clock.Advance(90 * time.Second)

		m = parseMetrics(t, scrape(t, h))
		m.want(t, "quota", "racefree_quota_decisions_total", 1, "kind", "window", "decision", "admitted")
		m.want(t, "quota", "racefree_quota_decisions_total", 1, "kind", "window", "decision", "refused")
		m.want(t, "quota", "racefree_quota_decisions_total", 1, "kind", "gcra", "decision", "admitted")
		if _, ok := m.get("racefree_quota_decisions_total", "kind", "bogus", "decision", "refused"); ok {
			t.Error("an invalid policy kind became a label")
		}
		m.want(t, "sequence", "racefree_sequence_numbers_total", 3)
		m.want(t, "sequence", "racefree_sequence_operations_total", 1, "outcome", "ok")
		m.want(t, "outbox", "racefree_outbox_enqueued_total", 3)
		m.want(t, "outbox", "racefree_outbox_messages", 3, "state", "ready")
		m.want(t, "outbox", "racefree_outbox_messages", 0, "state", "leased")
		m.want(t, "outbox", "racefree_outbox_messages", 0, "state", "dead")
		m.want(t, "outbox", "racefree_outbox_due_messages", 3)
		m.want(t, "outbox", "racefree_outbox_oldest_due_age_seconds", 90) // ok and bad, due since they were enqueued; the delayed one is older but due for 60 s
		m.want(t, "audit", "racefree_audit_operations_total", 3, "op", "append", "outcome", "ok")
		m.want(t, "audit", "racefree_audit_uncheckpointed_entries", 3)
		m.want(t, "audit", "racefree_audit_checkpoint_age_seconds", 90)
		m.want(t, "audit", "racefree_audit_unverified_entries", 3)
		m.want(t, "audit", "racefree_audit_broken_chains", 0)

		// A checkpoint covers the entries; a verification verifies them;
		// a fourth entry is neither.
		post("/v1/audit/checkpoints", `{"scope":"billing"}`, 200)
		if code, body, _ := do(t, h, "GET", "/v1/audit/verify?scope=billing", ""); code != 200 || body["intact"] != true {
			t.Fatalf("verify: %d %v", code, body)
		}
		clock.Advance(10 * time.Second)
		post("/v1/audit", `{"scope":"billing","actor":"ops","action":"refund","subject":"order-4"}`, 200)
		clock.Advance(5 * time.Second)
		m = parseMetrics(t, scrape(t, h))
		m.want(t, "audit after a checkpoint", "racefree_audit_uncheckpointed_entries", 1)
		m.want(t, "audit after a checkpoint", "racefree_audit_checkpoint_age_seconds", 5)
		m.want(t, "audit after a verification", "racefree_audit_unverified_entries", 1)

		// A tampered entry: the verification finds the break, the gauge
		// counts the chain until a verification finds it intact.
		tamper := []string{`ALTER TABLE racefree_audit DISABLE TRIGGER USER`}
		if db.Engine() == racefree.SQLite {
			tamper = []string{`DROP TRIGGER racefree_audit_no_update`}
		}
		testdb.ExecAll(t, db.SQL(), append(tamper, `UPDATE racefree_audit SET actor = 'mallory' WHERE scope = 'billing' AND seq = 2`)...)
		if code, body, _ := do(t, h, "GET", "/v1/audit/verify?scope=billing", ""); code != 200 || body["intact"] != false {
			t.Fatalf("verify a tampered chain: %d %v", code, body)
		}
		m = parseMetrics(t, scrape(t, h))
		m.want(t, "a broken chain", "racefree_audit_broken_chains", 1)
		m.want(t, "a broken chain", "racefree_audit_unverified_entries", 4)

		// The relay delivers one message, kills one (a permanent failure)
		// and, a minute on, delivers the delayed one.
		o, _ := s.Outbox()
		r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
			if d.Topic == "bad" {
				return outbox.Permanent(errors.New("refused by the receiver"))
			}
			return nil
		}, &outbox.RelayOptions{PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		s.WatchRelay(r)
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		deadline := time.Now().Add(20 * time.Second)
		for st := r.Stats(); st.Delivered < 2 || st.Dead < 1; st = r.Stats() {
			if time.Now().After(deadline) {
				t.Fatalf("the relay did not settle the messages: %+v", st)
			}
			time.Sleep(5 * time.Millisecond)
		}
		stop()
		<-done
		m = parseMetrics(t, scrape(t, h))
		m.want(t, "relay", "racefree_outbox_deliveries_total", 2, "outcome", "delivered")
		m.want(t, "relay", "racefree_outbox_deliveries_total", 1, "outcome", "dead")
		m.want(t, "relay", "racefree_outbox_claimed_total", 3)
		m.want(t, "outbox after the relay", "racefree_outbox_messages", 0, "state", "ready")
		m.want(t, "outbox after the relay", "racefree_outbox_messages", 1, "state", "dead")
		m.want(t, "outbox after the relay", "racefree_outbox_due_messages", 0)
		m.want(t, "outbox after the relay", "racefree_outbox_oldest_due_age_seconds", 0)

		// Every other family the dashboard and the rules name: claims,
		// events, idempotency replays, tokens, the reaper, the doctor.
		post("/v1/claims/job", `{"holder":"w1","ttl_ms":30000}`, 200)
		post("/v1/events", `{"source":"s","level":"error","message":"m","window_ms":60000}`, 200)
		if code, body, _ := do(t, h, "POST", "/v1/tokens", `{"purpose":"login","subject":"user-1","ttl_ms":60000}`, "Content-Type", "application/json"); code != 200 {
			t.Fatalf("token: %d %v", code, body)
		}
		post("/v1/sequences/x/y/next", `{}`, 200)
		if code, body, _ := do(t, h, "POST", "/v1/inbox/stripe", `{}`, webhook(t, secret, "evt_1", time.Now(), `{}`)...); code != 204 {
			t.Fatalf("inbox: %d %v", code, body)
		}
		for range 2 {
			if code, b, _ := do(t, h, "POST", "/v1/sequences/x/z/next", `{}`, "Content-Type", "application/json", "Idempotency-Key", `"i1"`); code != 200 {
				t.Fatalf("idempotent next: %d %v", code, b)
			}
		}
		if _, err := s.ReapOutbox(ctx); err != nil {
			t.Fatal(err)
		}
		_, _ = s.Doctor(ctx)
		_, _ = s.JudgeRole(ctx)
		exposed := parseMetrics(t, scrape(t, h)).names()
		for _, f := range []string{"../deploy/grafana/racefree.json", "../deploy/prometheus/alerts.yml"} {
			for _, name := range referencedMetrics(t, f) {
				if !exposed[name] && !(name == "racefree_role_findings" && db.Engine() != racefree.Postgres) {
					t.Errorf("%s names %s, which the server does not expose", f, name)
				}
			}
		}
	})
}

// TestDatabaseGaugesTimeout: past Options.MetricsTimeout the database
// gauges are left out of the scrape, never reported partial, and
// racefree_database_gauges_ok is 0; the counters are still there.
func TestDatabaseGaugesTimeout(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{MetricsTimeout: time.Nanosecond}).Handler()
		m := parseMetrics(t, scrape(t, h))
		m.want(t, "timed out", "racefree_database_gauges_ok", 0)
		for _, name := range []string{"racefree_outbox_messages", "racefree_outbox_due_messages", "racefree_outbox_oldest_due_age_seconds",
			"racefree_audit_checkpoint_age_seconds", "racefree_audit_uncheckpointed_entries", "racefree_audit_unverified_entries"} {
			if m.names()[name] {
				t.Errorf("%s reported by a scrape whose reads timed out", name)
			}
		}
		if !m.names()["racefree_audit_broken_chains"] || !m.names()["racefree_combine_queued"] {
			t.Error("the metrics that need no database read are gone too")
		}
	})
}

// TestConcurrentScrapes: scrapes running at once while messages are
// enqueued each read the database gauges in full (a scrape that waited
// for another's read shares its figures), never more than were enqueued,
// and the scrape after the last enqueue counts them all.
func TestConcurrentScrapes(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		const writers, each, scrapers = 3, 3, 3
		var wg sync.WaitGroup
		errs := make(chan error, writers*each+scrapers*each)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					if code, body, _ := do(t, h, "POST", "/v1/outbox", fmt.Sprintf(`{"topic":"t%d","payload":{"n":%d}}`, w, i), "Content-Type", "application/json"); code != 200 {
						errs <- fmt.Errorf("enqueue: %d %v", code, body)
					}
				}
			}()
		}
		for range scrapers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					m := parseMetrics(t, scrape(t, h))
					ok, _ := m.get("racefree_database_gauges_ok")
					ready, _ := m.get("racefree_outbox_messages", "state", "ready")
					if ok != 1 || ready > writers*each {
						errs <- fmt.Errorf("a concurrent scrape: ok %v, ready %v", ok, ready)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		parseMetrics(t, scrape(t, h)).want(t, "after every enqueue", "racefree_outbox_messages", writers*each, "state", "ready")
	})
}

// BenchmarkDatabaseGauges measures one scrape of /metrics, whose database
// reads dominate, over a backlog of RACEFREE_BENCH_BACKLOG ready messages
// (default 10000) and 100 audit entries in 10 scopes, on both engines.
func BenchmarkDatabaseGauges(b *testing.B) {
	backlog := 10000
	if v, err := strconv.Atoi(os.Getenv("RACEFREE_BENCH_BACKLOG")); err == nil {
		backlog = v
	}
	for _, engine := range []string{racefree.SQLite, racefree.Postgres} {
		b.Run(engine, func(b *testing.B) {
			if engine == racefree.Postgres && os.Getenv("TEST_DATABASE_URL") == "" {
				b.Skip("TEST_DATABASE_URL is not set")
			}
			db := testdb.Open(b, testdb.NewDSN(b, engine), nil)
			ring, err := audit.ParseKeyring("mac m1 " + auditMAC + "\n")
			if err != nil {
				b.Fatal(err)
			}
			s := server.New(db, server.Options{AuditKeys: ring})
			o, _ := s.Outbox()
			ctx := context.Background()
			for i := range backlog {
				if _, err := o.Enqueue(ctx, db, outbox.Message{Topic: "t", Payload: []byte(strconv.Itoa(i))}); err != nil {
					b.Fatal(err)
				}
			}
			h := s.Handler()
			for i := range 100 {
				req := httptest.NewRequest("POST", "/v1/audit", strings.NewReader(fmt.Sprintf(`{"scope":"s%d","actor":"a","action":"x"}`, i%10)))
				req.Header.Set("Content-Type", "application/json")
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
			want := fmt.Sprintf("racefree_outbox_messages{state=\"ready\"} %d\n", backlog)
			b.ResetTimer()
			for range b.N {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
				if !strings.Contains(rec.Body.String(), want) || !strings.Contains(rec.Body.String(), "racefree_audit_uncheckpointed_entries 100\n") {
					b.Fatalf("the scrape lacks %q or 100 uncheckpointed entries", want)
				}
			}
		})
	}
}

// TestEdgesRequestMetricsKeepRouteAndCodeApart checks that the request
// metrics count each request under its own route label and status code,
// told apart where they differ in one alone: one route answered with two
// codes, one code on two routes, and the labels that are no route
// (unmatched, unauthorized, unclean); that the latency histogram counts by
// route; and that a route never called has no series.
func TestEdgesRequestMetricsKeepRouteAndCodeApart(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{Token: "tok", Logger: slog.New(slog.DiscardHandler)}).Handler()
		auth := []string{"Authorization", "Bearer tok"}
		for _, c := range []struct {
			method, path, body string
			header             []string
			want               int
		}{
			{"GET", "/v1/claims/a", "", auth, 404},
			{"GET", "/v1/claims/a", "", auth, 404},
			{"POST", "/v1/claims/a", `{"holder":"w1","ttl_ms":60000}`, auth, 200},
			{"POST", "/v1/claims/a", `{"holder":"w2","ttl_ms":60000}`, auth, 409},
			{"GET", "/v1/claims/a", "", auth, 200},
			{"GET", "/v1/nowhere", "", auth, 404},
			{"DELETE", "/healthz", "", nil, 405},
			{"GET", "/v1/claims/a", "", nil, 401},
			{"GET", "/v1/claims/./a", "", auth, 400},
		} {
			if code, body, _ := do(t, h, c.method, c.path, c.body, c.header...); code != c.want {
				t.Fatalf("%s %s: %d %v, want %d", c.method, c.path, code, body, c.want)
			}
		}
		m := parseMetrics(t, scrape(t, h))
		const reqs, took = "racefree_http_requests_total", "racefree_http_request_duration_seconds_count"
		for _, w := range []struct {
			route, code string
			n           float64
		}{
			{"GET /v1/claims/{key}", "404", 2},
			{"GET /v1/claims/{key}", "200", 1},
			{"POST /v1/claims/{key}", "200", 1},
			{"POST /v1/claims/{key}", "409", 1},
			{"unmatched", "404", 1},
			{"unmatched", "405", 1},
			{"unauthorized", "401", 1},
			{"unclean", "400", 1},
		} {
			m.want(t, "requests", reqs, w.n, "code", w.code, "route", w.route)
		}
		for route, n := range map[string]float64{"GET /v1/claims/{key}": 3, "POST /v1/claims/{key}": 2, "unmatched": 2, "unauthorized": 1, "unclean": 1} {
			m.want(t, "latency", took, n, "route", route)
		}
		for series := range m {
			if strings.Contains(series, `route="DELETE /v1/claims/{key}"`) {
				t.Errorf("a route never called has a series: %s", series)
			}
		}
	})
}
