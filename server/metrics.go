package server

import (
	"errors"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
)

// metrics are the domain counters an operator watches, counted where the
// server calls the primitives.
type metrics struct {
	claims *labelled              // op, outcome
	events *prometheus.CounterVec // outcome
	idem   *prometheus.CounterVec // outcome
	inbox  *prometheus.CounterVec // source, outcome
	reaped *prometheus.CounterVec // what
	audits *prometheus.CounterVec // op, outcome
	quotas *prometheus.CounterVec // kind, decision
	// enqueued counts messages enqueued over HTTP. Not by topic: topics
	// are the users' strings, unbounded.
	enqueued prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		claims: &labelled{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "racefree_claim_operations_total",
			Help: "Claim operations by op (acquire, renew, release, record) and outcome (ok, held, not_held, stale, not_found, invalid, error).",
		}, []string{"op", "outcome"})},
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "racefree_event_observations_total",
			Help: "Observed events by outcome: process (this observer won the window) or duplicate.",
		}, []string{"outcome"}),
		idem: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "racefree_idempotency_requests_total",
			Help: "Requests with an Idempotency-Key answered without running: replayed, in_progress (409) or mismatch (422).",
		}, []string{"outcome"}),
		inbox: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "racefree_inbox_deliveries_total",
			Help: "Webhook deliveries by source and outcome: new, duplicate, rejected (4xx) or failed (5xx).",
		}, []string{"source", "outcome"}),
		reaped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "racefree_reaped_rows_total",
			Help: "Rows deleted by the reaper, by what they were.",
		}, []string{"what"}),
	}
	m.audits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "racefree_audit_operations_total",
		Help: "Audit log operations by op (append, verify) and outcome: ok, invalid or error for append; intact or the kind of the break for verify.",
	}, []string{"op", "outcome"})
	// The policy kind is one of quota's three (an unknown kind is refused
	// before it is counted), never the key: keys are unbounded.
	m.quotas = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "racefree_quota_decisions_total",
		Help: "Quota charges decided over HTTP, by policy kind (gcra, window, sliding_window) and decision (admitted, refused). Bad input and failures decide nothing and are not counted.",
	}, []string{"kind", "decision"})
	m.enqueued = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "racefree_outbox_enqueued_total",
		Help: "Messages enqueued to the outbox over HTTP (POST /v1/outbox), replays of an Idempotency-Key excluded.",
	})
	reg.MustRegister(m.claims.vec, m.events, m.idem, m.inbox, m.reaped, m.audits, m.quotas, m.enqueued)
	return m
}

// registerCombineMetrics exports db's combiner figures ([racefree.DB.CombineStats]),
// read at each scrape: commits per second are the rate of batches, the mean
// batch size operations over batches, the mean queue wait the wait over
// operations. All stay 0 unless Config.Combine is on.
func registerCombineMetrics(reg prometheus.Registerer, db *racefree.DB) {
	stat := func(f func(racefree.CombineStats) float64) func() float64 {
		return func() float64 { return f(db.CombineStats()) }
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "racefree_combine_batches_total", Help: "Batches the combiner committed, one commit each."},
			stat(func(s racefree.CombineStats) float64 { return float64(s.Batches) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "racefree_combine_operations_total", Help: "Operations in the batches the combiner committed."},
			stat(func(s racefree.CombineStats) float64 { return float64(s.Ops) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "racefree_combine_failed_batches_total", Help: "Batches that failed whole, whose operations then ran alone."},
			stat(func(s racefree.CombineStats) float64 { return float64(s.Failed) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "racefree_combine_unknown_batches_total", Help: "Batches whose commit got no answer: each operation was answered unavailable, none ran alone."},
			stat(func(s racefree.CombineStats) float64 { return float64(s.Unknown) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "racefree_combine_queue_wait_seconds_total", Help: "Time operations waited for their batch, summed."},
			stat(func(s racefree.CombineStats) float64 { return s.QueueWait.Seconds() })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "racefree_combine_largest_batch", Help: "The largest batch so far, in operations."},
			stat(func(s racefree.CombineStats) float64 { return float64(s.MaxBatch) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "racefree_combine_queued", Help: "Operations waiting for a batch now."},
			stat(func(s racefree.CombineStats) float64 { return float64(s.Queued) })),
	)
}

// claim counts one claim operation by its outcome.
func (m *metrics) claim(op string, err error) {
	outcome := "error"
	switch {
	case err == nil:
		outcome = "ok"
	case errors.Is(err, racefree.ErrHeld):
		outcome = "held"
	case errors.Is(err, racefree.ErrStaleFence):
		outcome = "stale"
	case errors.Is(err, racefree.ErrNotHeld):
		outcome = "not_held"
	case errors.Is(err, racefree.ErrNotFound):
		outcome = "not_found"
	case errors.Is(err, racefree.ErrInvalidInput):
		outcome = "invalid"
	}
	m.claims.with(op, outcome).Inc()
}

func (m *metrics) observation(process bool) {
	if process {
		m.events.WithLabelValues("process").Inc()
	} else {
		m.events.WithLabelValues("duplicate").Inc()
	}
}

// auditAppend counts one append by its outcome.
func (m *metrics) auditAppend(err error) {
	outcome := "ok"
	switch {
	case errors.Is(err, racefree.ErrInvalidInput):
		outcome = "invalid"
	case err != nil:
		outcome = "error"
	}
	m.audits.WithLabelValues("append", outcome).Inc()
}

// auditVerify counts one verification by its finding.
func (m *metrics) auditVerify(b *audit.Break) {
	outcome := "intact"
	if b != nil {
		outcome = string(b.Kind)
	}
	m.audits.WithLabelValues("verify", outcome).Inc()
}

// quota counts one decided charge.
func (m *metrics) quota(kind string, admitted bool) {
	decision := "refused"
	if admitted {
		decision = "admitted"
	}
	m.quotas.WithLabelValues(kind, decision).Inc()
}

// labelled caches the children of a counter with two labels, so that a
// hot path resolves each pair of label values once: WithLabelValues hashes
// and checks them at every call. As with WithLabelValues, a child is made
// at its first use, so that a series appears once counted.
type labelled struct {
	vec      *prometheus.CounterVec
	mu       sync.Mutex                                       // held to add a child
	children atomic.Pointer[map[[2]string]prometheus.Counter] // copied on write
}

// with returns the child of the label values a, b.
func (l *labelled) with(a, b string) prometheus.Counter {
	key := [2]string{a, b}
	if m := l.children.Load(); m != nil {
		if c, ok := (*m)[key]; ok {
			return c
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	next := map[[2]string]prometheus.Counter{}
	if m := l.children.Load(); m != nil {
		if c, ok := (*m)[key]; ok {
			return c
		}
		next = maps.Clone(*m)
	}
	c := l.vec.WithLabelValues(a, b)
	next[key] = c
	l.children.Store(&next)
	return c
}

// routeMetrics are the request metrics of one route label (a route
// pattern, or unclean, unauthorized, forbidden, unmatched): its children of
// racefree_http_requests_total, by status code, and of
// racefree_http_request_duration_seconds, each made at its first use.
type routeMetrics struct {
	label   string
	reqs    *prometheus.CounterVec
	latency *prometheus.HistogramVec

	observeOnce sync.Once
	observer    prometheus.Observer
	mu          sync.Mutex                                 // held to add a code
	codes       atomic.Pointer[map[int]prometheus.Counter] // copied on write
}

// requestMetrics returns the request metrics of a route label.
func (s *Server) requestMetrics(label string) *routeMetrics {
	return &routeMetrics{label: label, reqs: s.reqs, latency: s.latency}
}

// count counts one request answered with code after took.
func (m *routeMetrics) count(code int, took time.Duration) {
	m.code(code).Inc()
	m.observeOnce.Do(func() { m.observer = m.latency.WithLabelValues(m.label) })
	m.observer.Observe(took.Seconds())
}

// code returns the child of racefree_http_requests_total for code.
func (m *routeMetrics) code(code int) prometheus.Counter {
	if codes := m.codes.Load(); codes != nil {
		if c, ok := (*codes)[code]; ok {
			return c
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	next := map[int]prometheus.Counter{}
	if codes := m.codes.Load(); codes != nil {
		if c, ok := (*codes)[code]; ok {
			return c
		}
		next = maps.Clone(*codes)
	}
	c := m.reqs.WithLabelValues(m.label, strconv.Itoa(code))
	next[code] = c
	m.codes.Store(&next)
	return c
}
