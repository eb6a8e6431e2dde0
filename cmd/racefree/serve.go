package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/doctor"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/problem"
	"github.com/racefree/racefree/onetime"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
	"github.com/spf13/cobra"
)

func serveCmd() *cobra.Command {
	var (
		db, addr, token string
		migrate         bool
		combine         bool
		strict          bool
		requireKey      bool
		grace           time.Duration
		inboxSecrets    []string
		inboxOpts       server.Options
		limits          timeouts
		reaping         reapOptions
		refreshSecret   string
		dashSecret      string
		auditKeys       string
		relay           relayOptions
		logFormat       string
		logLevel        string
		waitForDB       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP API (binds 127.0.0.1:8080 by default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("inbox-secret") {
				inboxSecrets = strings.Split(os.Getenv("RACEFREE_INBOX_SECRETS"), ",")
			}
			secrets, err := server.ParseInboxSecrets(inboxSecrets)
			if err != nil {
				return err
			}
			inboxOpts.InboxSecrets = secrets
			if refreshSecret != "" {
				inboxOpts.RefreshSecret = []byte(refreshSecret)
			}
			if dashSecret != "" {
				inboxOpts.DashboardSecret = []byte(dashSecret)
			}
			switch _, inEnv := os.LookupEnv(audit.EnvKeys); {
			case auditKeys != "":
				inboxOpts.AuditKeys, err = audit.LoadKeyring(auditKeys)
			case inEnv:
				inboxOpts.AuditKeys, err = audit.KeyringFromEnv()
			}
			if err != nil {
				return err
			}
			inboxOpts.RequireKey = requireKey
			if inboxOpts.Logger, err = newLogger(os.Stderr, logFormat, logLevel); err != nil {
				return err
			}
			if v, ok := os.LookupEnv("RACEFREE_WAIT_FOR_DB"); ok && !cmd.Flags().Changed("wait-for-db") {
				if waitForDB, err = time.ParseDuration(v); err != nil {
					return racefree.Invalid("RACEFREE_WAIT_FOR_DB", "must be a duration such as 60s, got %q", v)
				}
			}
			if waitForDB < 0 {
				return racefree.Invalid("wait-for-db", "must not be negative")
			}
			return serve(cmd.Context(), db, addr, token, migrate, combine, strict, grace, inboxOpts, limits, reaping, &relay, waitForDB)
		},
	}
	f := cmd.Flags()
	f.StringVar(&db, "db", envOr("RACEFREE_DB", dsn.Default), "database: sqlite:PATH or postgres://… (env RACEFREE_DB)")
	f.StringVar(&addr, "addr", envOr("RACEFREE_ADDR", "127.0.0.1:8080"), "listen address (env RACEFREE_ADDR)")
	f.StringVar(&token, "token", envOr("RACEFREE_TOKEN", ""), "single-tenant credential: a bearer token of the default tenant with every scope; when set, /v1/ needs it or an API key (env RACEFREE_TOKEN)")
	f.BoolVar(&requireKey, "require-key", envOr("RACEFREE_REQUIRE_KEY", "") == "1", "refuse /v1/ requests without an API key (racefree keys create) even without --token (env RACEFREE_REQUIRE_KEY=1)")
	f.BoolVar(&migrate, "migrate", true, "apply pending schema migrations at start; false: refuse an outdated schema, except the expand step of a rollout (migration 011 on), served for the default tenant")
	f.BoolVar(&combine, "combine", !slices.Contains([]string{"0", "false"}, envOr("RACEFREE_COMBINE", "1")), "gather concurrent claim acquires, renewals and releases, dedup observes, webhook deliveries and quota charges (the requests without an Idempotency-Key) into batches of one commit each; on by default, --combine=false commits each alone (racefree.Config.Combine; env RACEFREE_COMBINE=0 or false turns it off)")
	f.BoolVar(&strict, "require-synchronous-replication", envOr("RACEFREE_REQUIRE_SYNCHRONOUS_REPLICATION", "") == "1", "PostgreSQL: refuse every write, 503 not-durable with nothing committed, unless a synchronous standby will wait for its commit, checked in the write's own first statement (racefree.Config.RequireSynchronousReplication; the role needs pg_read_all_stats; refused on SQLite; env RACEFREE_REQUIRE_SYNCHRONOUS_REPLICATION=1)")
	f.StringArrayVar(&inboxSecrets, "inbox-secret", nil, "[tenant/]source=whsec_… : serve POST /v1/inbox/{source} with this Standard Webhooks secret, for the default tenant or the one named; repeatable, also per source for rotation (env RACEFREE_INBOX_SECRETS=src=whsec_a,acme/src=whsec_b)")
	f.StringVar(&auditKeys, "audit-keys", "", "keyring file of the audit log served at /v1/audit (default: the keyring in "+audit.EnvKeys+"; neither: no audit routes)")
	f.Int64Var(&inboxOpts.InboxMaxBody, "inbox-max-body", inbox.DefaultMaxBody, "largest webhook body accepted, in bytes (at most 8388608, 8 MiB)")
	f.DurationVar(&inboxOpts.InboxRetention, "inbox-retention", inbox.DefaultRetention, "how long webhook event IDs are kept to recognise redeliveries (at least the senders' retry horizon)")
	f.DurationVar(&reaping.ClaimGrace, "claim-grace", defaultClaimGrace, "how long a lapsed or released application claim stays readable before the reaper deletes it (fences never go backwards after a reap)")
	f.DurationVar(&reaping.TokenRetention, "token-retention", defaultTokenRetention, "how long after they expire one-time codes and refresh-token families are kept, to answer expired or already used rather than unknown")
	f.DurationVar(&reaping.DedupRetention, "dedup-retention", defaultDedupRetention, "how long after its window lapsed a dedup fingerprint (its counts and recorded result) is kept")
	f.DurationVar(&waitForDB, "wait-for-db", defaultWaitForDB, "how long serve waits at start for a database it can use (one that answers, with a schema it can serve), retrying and logging each failed attempt; /healthz answers 200 and everything else 503 meanwhile; 0: one attempt (env RACEFREE_WAIT_FOR_DB)")
	f.DurationVar(&grace, "shutdown-timeout", 30*time.Second, "how long in-flight requests may finish after SIGINT or SIGTERM")
	f.StringVar(&inboxOpts.MetricsToken, "metrics-token", envOr("RACEFREE_METRICS_TOKEN", ""), "bearer token required on /metrics when set; may equal --token (env RACEFREE_METRICS_TOKEN)")
	f.DurationVar(&limits.readHeader, "read-header-timeout", 10*time.Second, "how long a client may take to send the request headers")
	f.DurationVar(&limits.read, "read-timeout", 15*time.Second, "how long a client may take to send the whole request, body included")
	f.DurationVar(&inboxOpts.RequestTimeout, "request-timeout", 20*time.Second, "how long a request may wait for the database before it answers 503")
	f.DurationVar(&limits.write, "write-timeout", 30*time.Second, "how long a request may take from its headers to the end of its response (more than --request-timeout)")
	f.DurationVar(&limits.idle, "idle-timeout", 60*time.Second, "how long an idle keep-alive connection is kept open")
	f.DurationVar(&inboxOpts.MetricsTimeout, "metrics-timeout", 5*time.Second, "how long one scrape of /metrics may spend reading the database's gauges (outbox backlog and oldest due message, audit checkpoints); past it they are left out of that scrape and racefree_database_gauges_ok is 0")
	f.DurationVar(&inboxOpts.RefreshGrace, "refresh-grace", 0, "how long after a rotation a retry with the rotated refresh token gets the same successor back instead of revoking its family; above 0 needs --refresh-secret")
	f.StringVar(&refreshSecret, "refresh-secret", envOr("RACEFREE_REFRESH_SECRET", ""), "secret (at least 32 bytes, the same on every instance) that derives refresh-token successors (env RACEFREE_REFRESH_SECRET)")
	f.StringVar(&logFormat, "log-format", envOr("RACEFREE_LOG_FORMAT", "text"), "log format on stderr: text or json (env RACEFREE_LOG_FORMAT)")
	f.StringVar(&logLevel, "log-level", envOr("RACEFREE_LOG_LEVEL", "info"), "lowest level logged: debug, info (one access-log line per request), warn or error (env RACEFREE_LOG_LEVEL)")
	f.StringVar(&dashSecret, "dashboard-secret", envOr("RACEFREE_DASHBOARD_SECRET", ""), "secret (at least 32 bytes, the same on every instance behind one address) that seals the dashboard's sessions; default: one of this process, so sessions end when it stops (env RACEFREE_DASHBOARD_SECRET)")
	relay.flags(cmd)
	return cmd
}

// newLogger returns the logger of serve: text or JSON lines on w, from
// level up. Anything else is an *racefree.InputError.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, racefree.Invalid("log-level", "must be debug, info, warn or error, got %q", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, racefree.Invalid("log-format", "must be text or json, got %q", format)
}

// minDashboardSecret is the shortest --dashboard-secret: 256 bits.
const minDashboardSecret = 32

// timeouts bound how long a client may hold a connection.
type timeouts struct {
	readHeader, read, write, idle time.Duration
}

func (t timeouts) check(request time.Duration) error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read-header-timeout", t.readHeader}, {"read-timeout", t.read}, {"write-timeout", t.write}, {"idle-timeout", t.idle}, {"request-timeout", request}} {
		if d.v <= 0 {
			return racefree.Invalid(d.name, "must be positive")
		}
	}
	if t.write <= request {
		return racefree.Invalid("write-timeout", "must be longer than --request-timeout (%v), so that a request that timed out still gets its 503", request)
	}
	return nil
}

func serve(ctx context.Context, dsnStr, addr, token string, migrate, combine, strict bool, grace time.Duration, opts server.Options, limits timeouts, reaping reapOptions, relay *relayOptions, waitForDB time.Duration) error {
	if ctx == nil {
		ctx = context.Background()
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	if _, _, err := dsn.Parse(dsnStr); err != nil {
		return err
	}
	if opts.InboxMaxBody < 1 {
		return racefree.Invalid("inbox-max-body", "must be positive")
	}
	if opts.InboxMaxBody > server.MaxInboxBody {
		return racefree.Invalid("inbox-max-body", "must be at most %d (8 MiB), got %d: a larger body could not be listed in one reply", server.MaxInboxBody, opts.InboxMaxBody)
	}
	if opts.InboxRetention < time.Millisecond {
		return racefree.Invalid("inbox-retention", "must be positive")
	}
	if opts.MetricsTimeout <= 0 {
		return racefree.Invalid("metrics-timeout", "must be positive")
	}
	if err := limits.check(opts.RequestTimeout); err != nil {
		return err
	}
	if reaping.ClaimGrace < 0 {
		return racefree.Invalid("claim-grace", "must not be negative")
	}
	if reaping.DedupRetention < 0 {
		return racefree.Invalid("dedup-retention", "must not be negative")
	}
	if reaping.TokenRetention < 0 {
		return racefree.Invalid("token-retention", "must not be negative")
	}
	if err := checkRefresh(opts.RefreshGrace, opts.RefreshSecret); err != nil {
		return err
	}
	if n := len(opts.DashboardSecret); n > 0 && n < minDashboardSecret {
		return racefree.Invalid("dashboard-secret", "must be at least %d bytes", minDashboardSecret)
	}
	if err := relay.check(); err != nil {
		return err
	}
	// Listen before opening the database, so that a port in use fails
	// before anything is written.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()

	// Serve at once: while the database is not usable yet, /healthz
	// answers 200 (the process is up) and everything else 503 (waiting),
	// so that a load balancer holds traffic back and a liveness probe
	// does not restart a process that is only waiting.
	var api atomic.Pointer[http.Handler]
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h := api.Load(); h != nil {
				(*h).ServeHTTP(w, r)
				return
			}
			waitingForDB(w, r)
		}),
		ReadHeaderTimeout: limits.readHeader,
		ReadTimeout:       limits.read,
		WriteTimeout:      limits.write,
		IdleTimeout:       limits.idle,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	defer srv.Close() // on the way out before the graceful shutdown below

	db, err := openWaiting(ctx, log, waitForDB, func(ctx context.Context) (*racefree.DB, error) {
		return openForServe(ctx, dsnStr, migrate, combine, strict, &opts, log)
	})
	if err != nil {
		return err
	}
	defer db.Close()
	opts.Token, opts.Logger = token, log
	a := server.New(db, opts)
	// Judge the role serve logs in as, by every role it can become: a
	// warning in the log, on /readyz and in racefree_role_findings.
	judgeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	found, err := a.JudgeRole(judgeCtx)
	cancel()
	if err != nil {
		log.Warn("could not judge the database role: it may bypass row-level security", "code", server.RoleNotJudged, "err", err)
	}
	for _, f := range found {
		log.Warn("the database role escapes row-level security: serve as a role that `racefree migrate up --app-role` accepts", "code", f.Code, "path", f.Path)
	}
	// racefree doctor's checks, once: one log line a finding, on /readyz
	// under "doctor" and in racefree_doctor_findings.
	doctorCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	rep, err := a.Doctor(doctorCtx)
	cancel()
	if err != nil {
		log.Warn("could not run racefree doctor's checks", "code", server.DoctorNotRun, "err", err)
	}
	for _, f := range rep.Findings {
		level := slog.LevelWarn
		if f.Severity == doctor.Info {
			level = slog.LevelInfo
		}
		log.Log(ctx, level, "doctor: "+f.Detail, "code", f.Code, "severity", f.Severity, "fix", f.Fix)
	}
	h := a.Handler()
	api.Store(&h)
	if token == "" && !opts.RequireKey && !loopback(ln.Addr()) {
		log.Warn("listening on a non-loopback address without --token or --require-key: anyone who can reach it can use the default tenant", "addr", ln.Addr().String())
	}
	return serving(ctx, db, a, srv, ln, errc, token != "" || opts.RequireKey, grace, reaping, relay, log)
}

// defaultWaitForDB is how long serve waits at start for a usable database.
const defaultWaitForDB = time.Minute

// waitingForDB answers while serve waits for its database: /healthz 200,
// /readyz 503 not-ready, every other route 503 unavailable, each 503
// with Retry-After.
func waitingForDB(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
	case "/readyz":
		problem.Write(w, problem.NotReady.New("waiting for the database"))
	default:
		problem.Write(w, problem.Unavailable.New("waiting for the database; retry"))
	}
}

// openWaiting calls open until it returns a database, an error that
// waiting cannot cure, or wait has passed since the first attempt (then
// the last error, saying how long it waited). Curable are an outage
// ([racefree.ErrUnavailable]: no connection, a server starting or shutting
// down, a read-only node where a migration was due), any PostgreSQL
// connection the server refused (a database not created or restored
// yet, too many clients, a role not yet provisioned), a transient
// conflict and an attempt that timed out; a schema newer than this
// racefree, or an outdated one with --migrate=false, is not. Each failed attempt is logged
// with its reason and the delay before the next: 500ms, doubling, at
// most 5s.
func openWaiting(ctx context.Context, log *slog.Logger, wait time.Duration, open func(context.Context) (*racefree.DB, error)) (*racefree.DB, error) {
	start := time.Now()
	delay := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		db, err := open(ctx)
		if err == nil {
			if attempt > 1 {
				log.Info("the database is usable", "attempts", attempt, "waited", time.Since(start).Round(time.Millisecond))
			}
			return db, nil
		}
		var ce *pgconn.ConnectError // any refused connection: no such database yet, too many clients, ...
		curable := errors.Is(err, racefree.ErrUnavailable) || errors.Is(err, racefree.ErrRetryable) ||
			errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ce)
		if !curable || ctx.Err() != nil {
			return nil, err
		}
		if time.Since(start)+delay > wait {
			if wait == 0 {
				return nil, err
			}
			return nil, fmt.Errorf("no usable database after waiting %v (%d attempts; --wait-for-db): %w", time.Since(start).Round(time.Second), attempt, err)
		}
		log.Warn("waiting for the database", "attempt", attempt, "reason", err.Error(), "retry_in", delay, "wait_for_db", wait)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("stopped while waiting for the database: %w", err)
		case <-t.C:
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// openForServe opens the database once for serve, within 30 seconds:
// without migrating, then migrating only when something is pending (the
// application role, which owns nothing, may serve a database the owner
// migrated). With --migrate=false, an outdated schema at the expand step
// of a rollout lowers opts.OldestSchema.
func openForServe(ctx context.Context, dsnStr string, migrate, combine, strict bool, opts *server.Options, log *slog.Logger) (*racefree.DB, error) {
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	db, err := dsn.Open(openCtx, dsnStr, &racefree.Config{Schema: racefree.SchemaAllowOutdated, Combine: combinePolicy(combine), RequireSynchronousReplication: strict})
	if err == nil {
		err = db.CheckSchema(openCtx)
		switch {
		case migrate && errors.Is(err, racefree.ErrSchemaOutdated):
			_, err = db.MigrateUp(openCtx)
		case errors.Is(err, racefree.ErrSchemaOutdated):
			// --migrate=false during a rollout: the expand-only tenant
			// columns (011) are enough to serve the default tenant while
			// the previous release still runs; migrate up applies the rest.
			var have int64
			if have, err = db.SchemaVersion(openCtx); err == nil && have >= tenant.TenantsVersion {
				opts.OldestSchema = tenant.TenantsVersion
				log.Warn("the schema is not current: serving the default tenant only, until `racefree migrate up` applies the remaining migrations")
			} else if err == nil {
				err = db.CheckSchema(openCtx)
			}
		}
		if err != nil {
			db.Close()
		}
	}
	if err != nil {
		return nil, err
	}
	return db, nil
}

// serving runs the relay and the reaper beside srv, which serves api,
// until ctx ends, then shuts down gracefully.
func serving(ctx context.Context, db *racefree.DB, api *server.Server, srv *http.Server, ln net.Listener, errc chan error, auth bool, grace time.Duration, reaping reapOptions, relay *relayOptions, log *slog.Logger) error {
	// The relay stops with serve: on shutdown its running deliveries get
	// the same grace as the requests, then are cancelled and released.
	relayCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	stopped := make(chan struct{})
	close(stopped)
	var relayDone <-chan struct{} = stopped
	if relay.On {
		o, err := api.Outbox()
		if err != nil {
			return err
		}
		r, err := relay.newRelay(o, grace, log)
		if err != nil {
			return err
		}
		api.WatchRelay(r)
		relayDone = runRelay(relayCtx, r)
		log.Info("outbox relay running", "worker", r.Worker(), "topics", relay.topics())
	}
	defer func() { stopRelay(); <-relayDone }()
	reapCtx, stopReaping := context.WithCancel(ctx)
	reaped := make(chan struct{})
	go func() { defer close(reaped); reap(reapCtx, db, api, claim.New(db), dedup.New(db), reaping, log) }()
	defer func() { stopReaping(); <-reaped }()
	log.Info("racefree serving", "addr", ln.Addr().String(), "engine", db.Engine(), "auth", auth, "inbox_sources", api.InboxSources())

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests", "timeout", grace)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	<-relayDone // the relay stopped with ctx, in parallel
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}

// loopback reports whether addr accepts connections from this machine
// only.
func loopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// Defaults of the reaper's retention flags.
const (
	defaultClaimGrace     = time.Hour
	defaultDedupRetention = 24 * time.Hour
	defaultTokenRetention = 24 * time.Hour
)

// reapOptions says how long the reaper keeps what lapsed.
type reapOptions struct {
	ClaimGrace     time.Duration // application claims, after they lapse or are released
	DedupRetention time.Duration // dedup fingerprints, after their window lapses
	TokenRetention time.Duration // one-time codes and refresh-token families, after they expire
}

// reap runs reapOnce every minute until ctx ends, except while the
// database accepts no writes (a standby): deleting is then for the
// primary, and each failed delete would only be a warning in the log.
func reap(ctx context.Context, db *racefree.DB, api *server.Server, claims *claim.Store, fingerprints *dedup.Log, opts reapOptions, log *slog.Logger) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		if err := db.CheckWritable(ctx); errors.Is(err, racefree.ErrReadOnly) {
			log.Debug("reap skipped: the database is read-only", "err", err)
		} else {
			reapOnce(ctx, api, claims, fingerprints, opts, log)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reapOnce deletes what has outlived its retention: inbox events,
// idempotency records, quota counters and consumption keys, application
// claims, dedup fingerprints, delivered outbox messages and spent tokens. A
// failure is logged and does not stop the others.
func reapOnce(ctx context.Context, api *server.Server, claims *claim.Store, fingerprints *dedup.Log, opts reapOptions, log *slog.Logger) {
	if events, records, err := api.Reap(ctx); err != nil && ctx.Err() == nil {
		log.Warn("reap failed", "err", err)
	} else if events+records > 0 {
		log.Info("reaped", "inbox_events", events, "idempotency_records", records)
	}
	n, err := api.ReapQuotas(ctx)
	api.CountReaped("quotas", n)
	if err != nil && ctx.Err() == nil {
		log.Warn("reap of quota counters failed", "err", err)
	} else if n > 0 {
		log.Info("reaped", "quota_rows", n)
	}
	n, err = claims.Reap(ctx, opts.ClaimGrace, 0)
	api.CountReaped("claims", n)
	if err != nil && ctx.Err() == nil {
		log.Warn("reap of claims failed", "err", err)
	} else if n > 0 {
		log.Info("reaped", "claims", n)
	}
	n, err = fingerprints.Reap(ctx, opts.DedupRetention, 0)
	api.CountReaped("dedup_fingerprints", n)
	if err != nil && ctx.Err() == nil {
		log.Warn("reap of dedup fingerprints failed", "err", err)
	} else if n > 0 {
		log.Info("reaped", "dedup_fingerprints", n)
	}
	n, err = api.ReapOutbox(ctx)
	if err != nil && ctx.Err() == nil && !errors.Is(err, racefree.ErrSchemaOutdated) {
		log.Warn("reap of outbox messages failed", "err", err)
	} else if n > 0 {
		log.Info("reaped", "outbox_messages", n)
	}
	codes, families, err := api.ReapTokens(ctx, opts.TokenRetention)
	if err != nil && ctx.Err() == nil {
		log.Warn("reap of tokens failed", "err", err)
	} else if codes+families > 0 {
		log.Info("reaped", "token_codes", codes, "token_families", families)
	}
}

// checkRefresh refuses refresh-token options that [onetime.New] would
// refuse, before anything is opened.
func checkRefresh(grace time.Duration, secret []byte) error {
	switch {
	case grace < 0 || grace > onetime.MaxGrace || grace%time.Millisecond != 0:
		return racefree.Invalid("refresh-grace", "must be between 0 and %s in whole milliseconds", onetime.MaxGrace)
	case len(secret) == 0 && grace > 0:
		return racefree.Invalid("refresh-secret", "is required with a --refresh-grace above 0, and must be the same on every instance")
	case len(secret) > 0 && len(secret) < onetime.MinSecretBytes:
		return racefree.Invalid("refresh-secret", "must be at least %d bytes", onetime.MinSecretBytes)
	}
	return nil
}

// combinePolicy is the Config.Combine of serve's --combine: the library's
// default (on) when true, CombineOff when false.
func combinePolicy(on bool) racefree.CombinePolicy {
	if on {
		return racefree.CombineDefault
	}
	return racefree.CombineOff
}
