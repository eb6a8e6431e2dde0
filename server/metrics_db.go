package server

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// The read queries of the database gauges.
//
//go:embed metrics/sql
var metricsFiles embed.FS

// metricsCountBound bounds each count a scrape makes (per tenant and
// state): a backlog of millions costs a scrape no more than this many
// index entries, and reads as this many, far past any alert threshold.
const metricsCountBound = 100000

// defaultMetricsTimeout is Options.MetricsTimeout's default.
const defaultMetricsTimeout = 5 * time.Second

// databaseGauges is the collector of the gauges that need a database
// read: the outbox's backlog, due messages, oldest due age and dead
// letters, and the audit log's entries not covered by a checkpoint, the
// age of the oldest of them and the entries this process has not
// verified. It reads at scrape time, not in a background loop: the
// figures are as fresh as the scrape, nothing runs while nobody scrapes,
// and a standby (read-only) answers them like a primary, since every read
// is one statement in a read-only transaction of each tenant
// ([tenant.ReadTx]). A scrape's reads are bounded by Options.MetricsTimeout
// and each count by metricsCountBound; scrapes that arrive during a
// collection wait for it and answer its figures, so concurrent scrapers
// (two Prometheus replicas) cost one collection, not two. A read that
// fails or runs out of time leaves every database gauge out of that
// scrape (a partial sum would read as a healthy figure) and sets
// racefree_database_gauges_ok to 0.
//
// Each gauge sums (counts) or takes the maximum (ages) over tenants and
// scopes: a tenant or a scope is never a label, since both are unbounded
// and chosen by the service's users. Every instance serving one database
// reports the same database figures: aggregate them across instances with
// max, not sum.
type databaseGauges struct {
	s       *Server
	q       query.Set
	timeout time.Duration

	mu       sync.Mutex
	last     *dbFigures // the latest collection
	lastDone time.Time  // when it ended

	ok, took, messages, due, oldestDue, uncheckpointed, checkpointAge, unverified, broken *prometheus.Desc
}

// dbFigures is one collection's figures.
type dbFigures struct {
	ok    bool
	took  time.Duration
	state map[string]int64 // ready, leased, dead
	due   int64
	// oldestDue is how long the earliest due message has been due (0
	// when none is due).
	oldestDue time.Duration
	// audit is false on a schema without the audit log's retention floor
	// (before migration 14): no audit figures then.
	audit                     bool
	uncheckpointed            int64
	checkpointAge, unverified int64 // checkpointAge in ms
}

func newDatabaseGauges(s *Server) *databaseGauges {
	timeout := s.opts.MetricsTimeout
	if timeout <= 0 {
		timeout = defaultMetricsTimeout
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &databaseGauges{s: s, q: query.MustLoad(metricsFiles, "metrics/sql", s.db.Engine()), timeout: timeout,
		ok:   d("racefree_database_gauges_ok", "1 when this scrape read the database gauges (outbox and audit) in full; 0 when the read failed or outlasted the metrics timeout, and those gauges are left out."),
		took: d("racefree_database_gauges_duration_seconds", "How long this scrape's reads of the database gauges took."),
		messages: d("racefree_outbox_messages", "Outbox messages by state (ready: waiting, due now or later; leased: held by a relay, or lapsed; dead: dead letters awaiting redrive or discard), over every tenant. Each tenant's count stops at 100000.",
			"state"),
		due:       d("racefree_outbox_due_messages", "Outbox messages due now (ready and available, or leased and lapsed: what a relay would claim), over every tenant. Each tenant's count stops at 100000."),
		oldestDue: d("racefree_outbox_oldest_due_age_seconds", "How long the outbox message that has been due the longest has waited since it became due, over every tenant; 0 when none is due. A message delayed on purpose counts only once its time has come."),
		uncheckpointed: d("racefree_audit_uncheckpointed_entries",
			"Audit entries no checkpoint covers yet (past each scope's latest checkpoint and retention floor), over every tenant and scope."),
		checkpointAge: d("racefree_audit_checkpoint_age_seconds",
			"Age of the oldest audit entry no checkpoint covers yet, over every tenant and scope: how long the checkpoints have lagged the log; 0 when every entry is covered."),
		unverified: d("racefree_audit_unverified_entries",
			"Audit entries past the last position this process verified intact (the verify route, the dashboard), over every tenant and scope; a chain it never verified counts whole, from its retention floor."),
		broken: d("racefree_audit_broken_chains",
			"Audit chains (tenant and scope) whose latest verification by this process found a break: truncated, rolled back, tampered, reordered. Read from memory, not the database: it stays until a verification finds the chain intact."),
	}
}

func (g *databaseGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.ok, g.took, g.messages, g.due, g.oldestDue, g.uncheckpointed, g.checkpointAge, g.unverified, g.broken} {
		ch <- d
	}
}

func (g *databaseGauges) Collect(ch chan<- prometheus.Metric) {
	f := g.figures()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(g.broken, float64(g.s.verified.brokenChains()))
	gauge(g.took, f.took.Seconds())
	if !f.ok {
		gauge(g.ok, 0)
		return
	}
	gauge(g.ok, 1)
	for _, st := range []string{"ready", "leased", "dead"} {
		gauge(g.messages, float64(f.state[st]), st)
	}
	gauge(g.due, float64(f.due))
	gauge(g.oldestDue, f.oldestDue.Seconds())
	if f.audit {
		gauge(g.uncheckpointed, float64(f.uncheckpointed))
		gauge(g.checkpointAge, float64(f.checkpointAge)/1000)
		gauge(g.unverified, float64(f.unverified))
	}
}

// figures reads the database, or answers the figures of a collection
// that ended while this one waited for it.
func (g *databaseGauges) figures() *dbFigures {
	asked := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last != nil && g.lastDone.After(asked) {
		return g.last
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	start := time.Now()
	f, err := g.read(ctx)
	if err != nil {
		g.s.log.Warn("metrics: the database gauges were not read", "error", err.Error(), "timeout", g.timeout)
		f = &dbFigures{}
	}
	f.took = time.Since(start)
	g.last, g.lastDone = f, time.Now()
	return f
}

// read sums the figures of every tenant, one read-only transaction each.
func (g *databaseGauges) read(ctx context.Context) (*dbFigures, error) {
	db := g.s.db
	f := &dbFigures{ok: true, state: map[string]int64{}}
	ok, err := wire.Of(db).SchemaAtLeast(ctx, db, audit.RetentionVersion)
	if err != nil || !ok {
		// A schema behind this release (serve --migrate=false during a
		// rollout) has no outbox or no retention floor yet: not read.
		return nil, errors.Join(err, errors.New("the schema is behind this release: the outbox and audit gauges need migration 14"))
	}
	f.audit = true
	var oldestDue int64
	err = tenant.Each(ctx, db, func(ctx context.Context) error {
		t := tenant.From(ctx)
		return tenant.ReadTx(ctx, db, t, func(ctx context.Context, exec racefree.Executor) error {
			var ready, leased, due, dead, now int64
			var earliest sql.NullInt64
			err := exec.QueryRowContext(ctx, g.q.Get("outbox"), t, wire.Of(db).ClockArg(), metricsCountBound).Scan(&ready, &leased, &due, &earliest, &dead, &now)
			if err != nil {
				return err
			}
			f.state["ready"] += ready
			f.state["leased"] += leased
			f.state["dead"] += dead
			f.due += due
			if earliest.Valid && now > earliest.Int64 {
				oldestDue = max(oldestDue, now-earliest.Int64)
			}
			return each(ctx, exec, g.q.Get("audit"), []any{t}, func(rows *sql.Rows) error {
				var scope string
				var last, floor, covered int64
				var firstUncovered sql.NullInt64
				if err := rows.Scan(&scope, &last, &floor, &covered, &firstUncovered); err != nil {
					return err
				}
				f.uncheckpointed += last - covered
				if firstUncovered.Valid && now > firstUncovered.Int64 {
					f.checkpointAge = max(f.checkpointAge, now-firstUncovered.Int64)
				}
				f.unverified += g.s.verified.unverified(t, scope, floor, last)
				return nil
			})
		})
	})
	if err != nil {
		return nil, wire.Of(db).InterpretError(err)
	}
	f.oldestDue = time.Duration(oldestDue) * time.Millisecond
	return f, nil
}
