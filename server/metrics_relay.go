package server

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/racefree/racefree/outbox"
)

// relayMetrics exports the counters of the relay WatchRelay names
// ([outbox.Relay.Stats]), read at each scrape; nothing before WatchRelay.
type relayMetrics struct {
	relay                 atomic.Pointer[outbox.Relay]
	deliveries, errs, cla *prometheus.Desc
}

func newRelayMetrics() *relayMetrics {
	return &relayMetrics{
		deliveries: prometheus.NewDesc("racefree_outbox_deliveries_total",
			"Deliveries the relay of this process (serve --relay) ended, by outcome: delivered (completed), retried (failed, due again later), dead (failed for good: a new dead letter), lease_lost (a heartbeat found the lease lapsed or taken over), stale (a completion or failure refused: the tenure was over).",
			[]string{"outcome"}, nil),
		cla: prometheus.NewDesc("racefree_outbox_claimed_total", "Messages the relay of this process leased for delivery.", nil, nil),
		errs: prometheus.NewDesc("racefree_outbox_relay_errors_total",
			"Database errors the relay of this process met (it retries them).", nil, nil),
	}
}

func (m *relayMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.deliveries
	ch <- m.cla
	ch <- m.errs
}

func (m *relayMetrics) Collect(ch chan<- prometheus.Metric) {
	r := m.relay.Load()
	if r == nil {
		return
	}
	st := r.Stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, o := range []struct {
		outcome string
		n       int64
	}{{"delivered", st.Delivered}, {"retried", st.Retried}, {"dead", st.Dead}, {"lease_lost", st.LeaseLost}, {"stale", st.Stale}} {
		counter(m.deliveries, o.n, o.outcome)
	}
	counter(m.cla, st.Claimed)
	counter(m.errs, st.Errors)
}

// WatchRelay exports r's counters on /metrics
// (racefree_outbox_deliveries_total{outcome},
// racefree_outbox_claimed_total, racefree_outbox_relay_errors_total):
// `racefree serve --relay` calls it for the relay it runs. A later call
// replaces the relay watched; without one these metrics are absent.
func (s *Server) WatchRelay(r *outbox.Relay) { s.relayMetrics.relay.Store(r) }
