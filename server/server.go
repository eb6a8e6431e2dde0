package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/problem"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/tenant"
)

// Options configures a Server. The zero value is usable.
type Options struct {
	// Token is the credential of a single-tenant set-up: a request that
	// carries "Authorization: Bearer <Token>" runs for the default tenant
	// with every scope. When set, /v1/ refuses requests without a
	// credential (Token or an API key). Defaults to none.
	Token string
	// RequireKey refuses /v1/ requests that carry no credential (401)
	// even without Token: set it once tenants have API keys. Without
	// Token and RequireKey, a request without Authorization runs for the
	// default tenant with every scope, as before tenants existed (anyone
	// who can reach the server can then use the default tenant). A request
	// that does carry Authorization must always be a valid credential.
	RequireKey bool
	// Keys verifies API keys (package apikey). Defaults to
	// apikey.New(db, nil): verified keys are cached for at most 500ms.
	Keys *apikey.Store
	// Logger receives request failures and the access log (one line per
	// request at Info), each with its request_id. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// InboxSecrets maps each webhook source served at /v1/inbox/{source}
	// to its Standard Webhooks secrets ("whsec_…"; several for rotation).
	// Deliveries POSTed there are authenticated by their signature, not by
	// Token. Defaults to none: every source is unknown (404).
	InboxSecrets map[string][]string
	// InboxMaxBody bounds a delivery's body. Defaults to 1 MiB; at most
	// MaxInboxBody (8 MiB): above it every inbox route answers 500 and
	// stores nothing.
	InboxMaxBody int64
	// InboxRetention is how long delivered event IDs are kept to recognise
	// redeliveries. Defaults to 7 days.
	InboxRetention time.Duration
	// MetricsToken, when set, guards /metrics: scrapes must carry
	// "Authorization: Bearer <MetricsToken>" (it may equal Token).
	// Defaults to none: /metrics is open, like /healthz and /readyz.
	MetricsToken string
	// MetricsTimeout bounds the database reads of one scrape of /metrics
	// (the outbox's and the audit log's gauges, read at scrape time on
	// every tenant): past it those gauges are left out of the scrape and
	// racefree_database_gauges_ok is 0. Defaults to 5 seconds; keep it
	// below Prometheus' scrape_timeout.
	MetricsTimeout time.Duration
	// RequestTimeout bounds each request's work: a request still waiting
	// for the database after it (a lock held elsewhere, a busy SQLite)
	// answers 503 with Retry-After; its transaction rolls back (a single
	// write outside one may have run: retry it). Defaults to none.
	RequestTimeout time.Duration
	// RefreshGrace is how long after a rotation a retry with the rotated
	// refresh token gets the same successor back instead of revoking its
	// family (onetime.Options.Grace). Defaults to 0; more needs
	// RefreshSecret.
	RefreshGrace time.Duration
	// RefreshSecret derives refresh-token successors
	// (onetime.Options.Secret): at least 32 bytes, the same on every
	// instance. Defaults to a random secret of this process.
	RefreshSecret []byte
	// OldestSchema lets /readyz answer 200 for a schema at this version
	// or later, not only the current one: a rollout's expand step, such
	// as the tenant columns of migration 011, which this release serves
	// for the default tenant while the previous release still runs
	// (serve --migrate=false). Defaults to 0: the current version only.
	OldestSchema int64
	// AuditKeys is the keyring of the audit log served at /v1/audit (see
	// package audit). Defaults to nil: the audit routes answer 404
	// audit-unconfigured.
	AuditKeys *audit.Keyring
	// Outbox configures the outbox that POST /v1/outbox enqueues to
	// (outbox.New's options). Defaults to nil: outbox.New's defaults.
	Outbox *outbox.Options
	// DashboardSecret seals the dashboard's session cookies and derives
	// its CSRF tokens: the same on every instance behind one address, so
	// that a session opened on one is valid on the others. Defaults to a
	// random secret of this process: sessions end when it stops.
	DashboardSecret []byte
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
	// The request metrics of the route labels that are no route pattern.
	uncleanMetrics, unauthorizedMetrics, forbiddenMetrics, unmatchedMetrics *routeMetrics
	inbox                                                                   *inboxRoutes
	tokens                                                                  *tokenRoutes
	metrics                                                                 *metrics
	// relayMetrics exports the counters of the relay WatchRelay names.
	relayMetrics *relayMetrics
	keys         *apikey.Store
	admin        map[string]bool // route patterns that need the admin scope
	patterns     []string        // every route pattern, in the order registered

	claims *claim.Store
	events *dedup.Log
	idem   *idempotency.Store
	audit  *audit.Log // nil without Options.AuditKeys
	quotas *quota.Limiter

	outbox    *outbox.Outbox
	outboxErr error // a configuration error of Options.Outbox, answered with 500

	role   *roleState   // JudgeRole's verdict on the server's own database role
	doctor *doctorState // Doctor's last report

	dash     *dashboard
	dashSQL  query.Set
	rates    rates             // the dashboard's charts
	verified verifiedPositions // the dashboard's audit progress
}

// New returns a Server for db. It does no I/O.
func New(db *racefree.DB, opts Options) *Server {
	s := &Server{db: db, opts: opts, log: opts.Logger, mux: http.NewServeMux(), reg: prometheus.NewRegistry(),
		claims: claim.New(db), events: dedup.New(db), idem: idempotency.New(db, nil)}
	s.quotas, _ = quota.New(db, nil) // no options: cannot fail
	s.keys = opts.Keys
	if s.keys == nil {
		s.keys, _ = apikey.New(db, nil) // no options: cannot fail
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = slog.New(withRequestID{s.log.Handler()})
	s.reqs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "racefree_http_requests_total",
		Help: "HTTP requests by route pattern, method and status code.",
	}, []string{"route", "code"})
	s.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "racefree_http_request_duration_seconds",
		Help:    "HTTP request latency by route pattern.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"route"})
	s.uncleanMetrics, s.unauthorizedMetrics = s.requestMetrics("unclean"), s.requestMetrics("unauthorized")
	s.forbiddenMetrics, s.unmatchedMetrics = s.requestMetrics("forbidden"), s.requestMetrics("unmatched")
	s.metrics = newMetrics(s.reg)
	s.role = newRoleState(s.reg)
	s.doctor = newDoctorState(s.reg)
	registerCombineMetrics(s.reg, db)
	s.relayMetrics = newRelayMetrics()
	s.reg.MustRegister(newDatabaseGauges(s), s.relayMetrics)
	s.reg.MustRegister(s.reqs, s.latency,
		collectors.NewDBStatsCollector(db.SQL(), "racefree"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.routes()
	return s
}

// adminRoutes are the operator routes: they need the admin scope.
var adminRoutes = []string{"POST /v1/audit/checkpoints"}

// handle registers h at pattern, behind what every request of a route
// needs (route.ServeHTTP), resolved here once rather than per request.
func (s *Server) handle(pattern string, h http.Handler) {
	s.patterns = append(s.patterns, pattern)
	s.mux.Handle(pattern, &route{s: s, h: h, pattern: pattern, signed: signedRoute(pattern),
		scope: s.scopeOf(pattern), counted: s.requestMetrics(pattern)})
}

func (s *Server) routes() {
	s.admin = map[string]bool{}
	for _, p := range append(adminRoutes, adminOutboxRoutes...) {
		s.admin[p] = true
	}
	s.handle("GET /healthz", http.HandlerFunc(s.healthz))
	s.handle("GET /readyz", http.HandlerFunc(s.readyz))
	s.handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.handle("GET /openapi.json", http.HandlerFunc(s.openAPI))
	s.claimRoutes()
	s.inboxRoutes()
	s.sequenceRoutes()
	s.tokenRoutes()
	s.auditRoutes()
	s.quotaRoutes()
	s.outboxRoutes()
	s.dashboardRoutes()
}

// Handler returns the server's root handler: the request id
// (RequestIDHeader), routing, metrics, the access log, the bearer token on
// /v1/ (and on /metrics with Options.MetricsToken), and problem documents
// for unknown routes and methods.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := requestID(r)
		w.Header().Set(RequestIDHeader, id)
		ctx := context.WithValue(r.Context(), requestIDKey{}, id)
		if s.opts.RequestTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, s.opts.RequestTimeout)
			defer cancel()
		}
		x := &exchange{statusRecorder: statusRecorder{ResponseWriter: w, status: http.StatusOK}, ctx: ctx}
		s.serve(x, r)
		took := time.Since(start)
		x.counted.count(x.status, took)
		if x.tenant != "" {
			s.rates.count(x.tenant, x.status, start)
		}
		s.accessLog(ctx, r, x.counted.label, &x.statusRecorder, took)
		switch h := x.Header(); {
		case h.Get("Idempotent-Replayed") == "true":
			s.metrics.idem.WithLabelValues("replayed").Inc()
		case r.Header.Get(idempotency.Header) == "":
		case x.status == http.StatusConflict && h.Get("Retry-After") != "":
			s.metrics.idem.WithLabelValues("in_progress").Inc()
		case x.status == http.StatusUnprocessableEntity:
			s.metrics.idem.WithLabelValues("mismatch").Inc()
		}
	})
}

// exchange is the response writer of one request in Handler: it records
// the status and the bytes written, and carries what serve learns for the
// metrics, the dashboard's charts and the access log. Until a route takes
// the request (route.ServeHTTP), it is a probe: what the mux answers by
// itself when no route matches (404; 405 with Allow; a redirect) is kept,
// not sent, and serve answers a problem document instead.
type exchange struct {
	statusRecorder
	ctx     context.Context // the request's: its id and deadline
	counted *routeMetrics   // the route label its request metrics count under
	tenant  string          // the tenant of an authenticated /v1/ request

	probing     bool
	probeHeader http.Header
	probeCode   int
}

func (x *exchange) Header() http.Header {
	if x.probing {
		if x.probeHeader == nil {
			x.probeHeader = http.Header{}
		}
		return x.probeHeader
	}
	return x.statusRecorder.Header()
}

func (x *exchange) WriteHeader(code int) {
	if x.probing {
		x.probeCode = code
		return
	}
	x.statusRecorder.WriteHeader(code)
}

func (x *exchange) Write(b []byte) (int, error) {
	if x.probing {
		return len(b), nil
	}
	return x.statusRecorder.Write(b)
}

// serve routes r, once: the route that matches (route.ServeHTTP) admits
// and serves it; when none does, serve answers a problem document, after
// the same authentication as a /v1/ route's.
func (s *Server) serve(x *exchange, r *http.Request) {
	if p := r.URL.Path; !cleanPath(p) {
		// The mux would answer a redirect to the cleaned path; a key of
		// "." or ".." is no key at all.
		x.counted = s.uncleanMetrics
		writeProblem(x, problem.InvalidInput.New("the path must not contain empty, . or .. segments"))
		return
	}
	x.probing = true
	s.mux.ServeHTTP(x, r)
	if !x.probing {
		return // a route took it
	}
	// No route: the mux decided between 404 and 405 (and set Allow);
	// answer with a problem document instead of its plain text.
	x.probing = false
	r = r.WithContext(x.ctx)
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		if _, ok := s.admitCaller(x, r, nil); !ok {
			return
		}
	}
	kind := problem.NoRoute
	if allow := x.probeHeader.Get("Allow"); allow != "" && x.probeCode == http.StatusMethodNotAllowed {
		x.Header().Set("Allow", allow)
		kind = problem.MethodNotAllowed
	}
	x.counted = s.unmatchedMetrics
	writeProblem(x, kind.New(r.Method+" "+r.URL.Path+" is not a route of this server"))
}

// route is one registered route with what its requests need, resolved once
// at registration: whether it is signed (no caller), the scope a caller
// needs, and the children of its request metrics.
type route struct {
	s       *Server
	h       http.Handler
	pattern string
	signed  bool         // the webhook inbox: authenticated by signature, not caller
	scope   apikey.Scope // what a /v1/ caller needs
	counted *routeMetrics
}

// ServeHTTP admits r (MetricsToken on /metrics; on /v1/, the caller, its
// scope and its tenant) and serves it with the route's handler.
func (rt *route) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x, ok := w.(*exchange)
	if !ok { // not through Handler: the mux serves nothing else
		rt.h.ServeHTTP(w, r)
		return
	}
	s := rt.s
	x.probing, x.counted = false, rt.counted
	ctx := x.ctx
	if rt.pattern == "GET /metrics" && s.opts.MetricsToken != "" && !bearer(r, s.opts.MetricsToken) {
		x.counted = s.unauthorizedMetrics
		unauthorized(x)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/v1/") && !rt.signed {
		if ctx, ok = s.admitCaller(x, r, rt); !ok {
			return
		}
	}
	rt.h.ServeHTTP(x, r.WithContext(ctx)) // the one copy of the request
}

// admitCaller authenticates the caller of r, a /v1/ request, checks that
// it has the scope of rt (none for no route), and returns the request's
// context bound to the caller's tenant. Otherwise it answers the refusal
// and reports false.
func (s *Server) admitCaller(x *exchange, r *http.Request, rt *route) (context.Context, bool) {
	c, err := s.authenticate(x.ctx, r)
	if err != nil {
		x.counted = s.unauthorizedMetrics
		s.refuse(x, r.WithContext(x.ctx), err)
		return nil, false
	}
	if rt != nil && !c.scopes.Has(rt.scope) {
		need := rt.scope
		x.counted, x.tenant = s.forbiddenMetrics, c.tenant
		x.Header().Set("WWW-Authenticate", `Bearer realm="racefree", error="insufficient_scope", scope="`+need.String()+`"`)
		writeProblem(x, problem.InsufficientScope.New("this route needs the "+need.String()+" scope, which this key does not have"))
		return nil, false
	}
	ctx, err := tenant.With(x.ctx, c.tenant)
	if err != nil {
		x.counted = s.unauthorizedMetrics
		s.writeError(x, r.WithContext(x.ctx), err) // apikey and Token name valid tenants only
		return nil, false
	}
	x.tenant = c.tenant
	return ctx, true
}

// cleanPath reports whether p is already clean: no empty, "." or ".."
// segment (a trailing slash aside).
func cleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	return c == p || c+"/" == p
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="racefree"`)
	writeProblem(w, problem.Unauthorized.New("this server requires Authorization: Bearer <token>"))
}

// caller is who a /v1/ request runs as: a tenant and its scopes.
type caller struct {
	tenant string
	scopes apikey.Scope
}

// errNoCredential and errBadCredential are the refusals of authenticate
// (401); any other error is the database's, answered like any other.
var (
	errNoCredential  = errors.New("no credential")
	errBadCredential = errors.New("bad credential")
)

// authenticate returns the caller of r: the tenant and scopes of its API
// key, or the default tenant with every scope for Options.Token, or, when
// neither Token nor RequireKey is set and r carries no Authorization, the
// default tenant with every scope. Nothing else of the request (body,
// path, query, other headers) names the tenant. ctx governs the reading
// of an API key.
func (s *Server) authenticate(ctx context.Context, r *http.Request) (caller, error) {
	values := r.Header.Values("Authorization")
	if len(values) == 0 {
		if s.opts.Token == "" && !s.opts.RequireKey {
			return caller{tenant: tenant.Default, scopes: apikey.AllScopes}, nil
		}
		return caller{}, errNoCredential
	}
	got, ok := strings.CutPrefix(values[0], "Bearer ")
	if len(values) > 1 || !ok {
		return caller{}, errBadCredential
	}
	return s.credential(ctx, got)
}

// credential returns the caller whose credential is got: the default
// tenant with every scope for Options.Token, else the tenant and scopes of
// the API key got. A key that is malformed, unknown or revoked is
// errBadCredential; any other error is the database's.
func (s *Server) credential(ctx context.Context, got string) (caller, error) {
	if s.opts.Token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) == 1 {
		return caller{tenant: tenant.Default, scopes: apikey.AllScopes}, nil
	}
	k, err := s.keys.Verify(ctx, got)
	if errors.Is(err, apikey.ErrMalformed) || errors.Is(err, apikey.ErrRefused) {
		return caller{}, errBadCredential
	}
	if err != nil {
		return caller{}, err
	}
	return caller{tenant: k.Tenant, scopes: k.Scopes}, nil
}

// refuse answers a request authenticate refused: 401 with a challenge
// for a missing or bad credential, the database's problem (503) when the
// key could not be read.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, errNoCredential):
		unauthorized(w)
	case errors.Is(err, errBadCredential):
		w.Header().Set("WWW-Authenticate", `Bearer realm="racefree", error="invalid_token"`)
		writeProblem(w, problem.Unauthorized.New("the credential is not a valid token or API key of this server (unknown, revoked or malformed)"))
	default:
		s.writeError(w, r, err)
	}
}

// scopeOf returns the scope a route needs: admin for operator routes,
// read for GET, write for every other method.
func (s *Server) scopeOf(pattern string) apikey.Scope {
	switch {
	case s.admin[pattern]:
		return apikey.Admin
	case strings.HasPrefix(pattern, "GET "):
		return apikey.Read
	}
	return apikey.Write
}

// Scopes returns the scope each /v1/ route needs, by route pattern;
// signed routes (the webhook inbox) need none and are left out.
func (s *Server) Scopes() map[string]string {
	out := map[string]string{}
	for _, p := range s.patterns {
		if strings.Contains(p, " /v1/") && !signedRoute(p) {
			out[p] = s.scopeOf(p).String()
		}
	}
	return out
}

// Reap deletes what has outlived its retention: webhook event IDs and
// idempotency records with their leases. Serve calls it every minute.
func (s *Server) Reap(ctx context.Context) (inboxEvents, idempotencyRecords int64, err error) {
	if s.inbox.in != nil {
		inboxEvents, err = s.inbox.in.Reap(ctx, s.db)
		s.metrics.reaped.WithLabelValues("inbox_events").Add(float64(inboxEvents))
		if err != nil {
			return inboxEvents, 0, err
		}
	}
	idempotencyRecords, err = s.idem.Reap(ctx, 0)
	s.metrics.reaped.WithLabelValues("idempotency_records").Add(float64(idempotencyRecords))
	return inboxEvents, idempotencyRecords, err
}

// CountReaped adds n to the rows reaped of what, for the reapers that run
// beside Reap (serve's, of claims and dedup fingerprints).
func (s *Server) CountReaped(what string, n int64) {
	s.metrics.reaped.WithLabelValues(what).Add(float64(n))
}

// bearer reports whether r carries "Authorization: Bearer <token>".
func bearer(r *http.Request, token string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 while the database answers, accepts writes and its
// schema is current (or at least Options.OldestSchema), with the warnings
// of JudgeRole, if any (codes and a generic detail), and, once Doctor
// ran, its findings under "doctor" (codes and severities; an empty array
// when it found nothing). On a node that
// accepts no writes (a PostgreSQL standby, pg_is_in_recovery(), or
// transactions read-only by default, [racefree.DB.CheckWritable]) it
// answers 503 read-only with a reason, so that a load balancer sends
// writers elsewhere. Anyone may call it, so a failure's detail is
// generic; the database's own error, and the role's path, go to the log.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	err := s.db.SQL().PingContext(r.Context())
	detail := "the database does not answer"
	if err == nil {
		err = s.db.CheckSchema(r.Context())
		if errors.Is(err, racefree.ErrSchemaOutdated) && s.opts.OldestSchema > 0 {
			var ok bool
			if ok, err = wire.Of(s.db).SchemaAtLeast(r.Context(), s.db, s.opts.OldestSchema); err == nil && !ok {
				err = s.db.CheckSchema(r.Context())
			}
		}
		detail = "the database schema does not match this racefree"
	}
	if err == nil {
		if err = s.db.CheckWritable(r.Context()); err != nil {
			detail = "the database does not answer"
		}
		var ro *racefree.ReadOnlyError
		if errors.As(err, &ro) {
			s.log.WarnContext(r.Context(), "not ready: the database is read-only", "reason", ro.Reason)
			p := problem.ReadOnly.New("the database accepts no writes: " + ro.Reason)
			p.Extra = map[string]any{"reason": ro.Reason}
			writeProblem(w, p)
			return
		}
	}
	if err != nil {
		s.log.WarnContext(r.Context(), "not ready", "err", err)
		writeProblem(w, problem.NotReady.New(detail))
		return
	}
	ready := map[string]any{"status": "ready", "engine": s.db.Engine()}
	if s.db.RequiresSynchronousReplication() {
		// Writes are refused while no synchronous standby waits for
		// them; the doctor's strict-refuses-writes finding says so.
		ready["require_synchronous_replication"] = true
	}
	if ws := s.roleWarnings(); len(ws) > 0 {
		ready["warnings"] = ws
	}
	if fs, ran := s.doctorFindings(); ran {
		ready["doctor"] = append([]DoctorFinding{}, fs...)
	}
	writeJSON(w, http.StatusOK, ready)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
