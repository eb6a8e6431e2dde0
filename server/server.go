package server

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/idempotency"
)

// Options configures a Server. The zero value is usable.
type Options struct {
	// Token, when set, guards /v1/: requests must carry
	// "Authorization: Bearer <Token>". Defaults to none.
	Token string
	// Logger receives request failures. Defaults to slog.Default().
	Logger *slog.Logger
	// InboxSecrets maps each webhook source served at /v1/inbox/{source}
	// to its Standard Webhooks secrets ("whsec_…"; several for rotation).
	// Deliveries POSTed there are authenticated by their signature, not by
	// Token. Defaults to none: every source is unknown (404).
	InboxSecrets map[string][]string
	// InboxMaxBody bounds a delivery's body. Defaults to 1 MiB.
	InboxMaxBody int64
	// InboxRetention is how long delivered event IDs are kept to recognise
	// redeliveries. Defaults to 7 days.
	InboxRetention time.Duration
}

// Server represents racefree's HTTP API over one database.
type Server struct {
	db      *racefree.DB
	opts    Options
	log     *slog.Logger
	mux     *http.ServeMux
	reg     *prometheus.Registry
	reqs    *prometheus.CounterVec
	latency *prometheus.HistogramVec
	inbox   *inboxRoutes

	claims *claim.Store
	events *dedup.Log
	idem   *idempotency.Store
}

// New returns a Server for db. It does no I/O.
func New(db *racefree.DB, opts Options) *Server {
	s := &Server{db: db, opts: opts, log: opts.Logger, mux: http.NewServeMux(), reg: prometheus.NewRegistry(),
		claims: claim.New(db), events: dedup.New(db), idem: idempotency.New(db, nil)}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.reqs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "racefree_http_requests_total",
		Help: "HTTP requests by route pattern, method and status code.",
	}, []string{"route", "code"})
	s.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "racefree_http_request_duration_seconds",
		Help:    "HTTP request latency by route pattern.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"route"})
	s.reg.MustRegister(s.reqs, s.latency,
		collectors.NewDBStatsCollector(db.SQL(), "racefree"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.routes()
	return s
}

func (s *Server) routes() {
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.claimRoutes()
	s.inboxRoutes()
}

// Handler returns the server's root handler: routing, metrics, the bearer
// token on /v1/, and problem documents for unknown routes and methods.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		route := s.serve(rec, r)
		s.reqs.WithLabelValues(route, strconv.Itoa(rec.status)).Inc()
		s.latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

// serve routes r and returns the route pattern for the metrics.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) string {
	h, pattern := s.mux.Handler(r)
	if s.opts.Token != "" && strings.HasPrefix(r.URL.Path, "/v1/") && !signedRoute(pattern) && !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="racefree"`)
		writeProblem(w, Problem{Type: ProblemType("unauthorized"), Title: "Unauthorized", Status: http.StatusUnauthorized,
			Detail: "this server requires Authorization: Bearer <token>"})
		return "unauthorized"
	}
	if pattern == "" {
		// No route: let the mux decide between 404 and 405 (it sets Allow),
		// then answer with a problem document instead of its plain text.
		probe := &probeWriter{header: http.Header{}}
		h.ServeHTTP(probe, r)
		if allow := probe.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		writeProblem(w, Problem{Type: ProblemType("no-route"), Title: http.StatusText(probe.code), Status: probe.code,
			Detail: r.Method + " " + r.URL.Path + " is not a route of this server"})
		return "unmatched"
	}
	s.mux.ServeHTTP(w, r)
	return pattern
}

// Reap deletes what has outlived its retention: webhook event IDs and
// idempotency records with their leases. Serve calls it every minute.
func (s *Server) Reap(ctx context.Context) (inboxEvents, idempotencyRecords int64, err error) {
	if s.inbox.in != nil {
		if inboxEvents, err = s.inbox.in.Reap(ctx, s.db); err != nil {
			return inboxEvents, 0, err
		}
	}
	idempotencyRecords, err = s.idem.Reap(ctx, 0)
	return inboxEvents, idempotencyRecords, err
}

// idempotent wraps a state-changing handler in the Idempotency-Key
// middleware: a client that retries with the same key after a lost reply
// gets the first answer instead of a second effect.
func (s *Server) idempotent(h http.HandlerFunc) http.Handler {
	return s.idem.Middleware(idempotency.MiddlewareOptions{})(h)
}

func (s *Server) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) == 1
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.db.SQL().PingContext(r.Context()); err != nil {
		writeProblem(w, Problem{Type: ProblemType("not-ready"), Title: "Not ready", Status: http.StatusServiceUnavailable, Detail: "database: " + err.Error()})
		return
	}
	if err := s.db.CheckSchema(r.Context()); err != nil {
		writeProblem(w, Problem{Type: ProblemType("not-ready"), Title: "Not ready", Status: http.StatusServiceUnavailable, Detail: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "engine": s.db.Engine()})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// probeWriter keeps only the status and headers of the mux's own 404 and 405
// answers.
type probeWriter struct {
	header http.Header
	code   int
}

func (p *probeWriter) Header() http.Header         { return p.header }
func (p *probeWriter) Write(b []byte) (int, error) { return len(b), nil }
func (p *probeWriter) WriteHeader(code int)        { p.code = code }
