package server

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/tenant"
)

// dashLimit bounds every list on the dashboard, so that a page load costs
// what it shows, whatever the tables hold.
const dashLimit = 50

// auditScopesShown bounds the audit scopes the dashboard verifies per load.
const auditScopesShown = 20

// dashData is what the dashboard shows, all of one tenant.
type dashData struct {
	Title     string
	Tenant    string
	Engine    string
	Admin     bool // the caller may redrive (the admin scope)
	CSRF      string
	SignedIn  bool // a session cookie, not an open server, got the caller in
	Redriven  string
	Discarded string
	ReadAt    string
	Claims    []dashClaim
	Quotas    []dashQuota
	Idem      []dashIdem
	Sources   []dashSource
	Failed    []dashFailed
	Outbox    *outbox.Stats
	// OldestDue is how long the message due the longest has waited since
	// it became due (0 when none is due): a message delayed on purpose,
	// or leased by a relay whose lease still runs, counts only once its
	// time has come, unlike Outbox.OldestPending.
	OldestDue time.Duration
	Dead      []deadMessage
	Audit     []dashAudit
	AuditOff  bool // no keyring: the audit log is not served
	Charts    []chart
	ChartsEnd string
	Limit     int
	// Each list's filter and page, as the request asked for them.
	Lists dashLists
	// The tenants whose keys the session holds, Tenant's among them, for
	// the switcher (shown with two or more); Dropped says a key of the
	// session was revoked or expired and is gone from it.
	Held    []string
	Dropped bool
}

// dashLists are the filter and page of each list of the dashboard.
type dashLists struct {
	Claims, Quotas, Idem, Sources, Failed, Dead, Audit *dashList
}

// The dashboard's lists: each one's parameters, filter fields, sort key
// and page size.
var (
	claimsList = &listSpec{name: "claims", what: "live claims", prefix: "claims.", anchor: "claims", limit: dashLimit,
		fields: []fieldSpec{{name: "key", label: "Key begins with", max: claim.MaxKeyBytes}, {name: "holder", label: "Holder begins with", max: claim.MaxHolderBytes}},
		cursor: []cursorKind{cursorInt, cursorText}} // expires_at, key
	quotasList = &listSpec{name: "quotas", what: "quota counters", prefix: "quotas.", anchor: "quotas", limit: dashLimit,
		fields: []fieldSpec{{name: "limiter", label: "Limiter", max: quota.MaxKeyBytes}, {name: "default", label: "Default limiter", check: true},
			{name: "key", label: "Key begins with", max: quota.MaxKeyBytes}},
		cursor: []cursorKind{cursorInt, cursorText, cursorText, cursorText}} // updated_at, scope, key, kind
	idemList = &listSpec{name: "idem", what: "requests in progress", prefix: "idem.", anchor: "idempotency", limit: dashLimit,
		fields: []fieldSpec{{name: "scope", label: "Scope", max: idempotency.MaxScopeBytes}, {name: "key", label: "Key begins with", max: idempotency.MaxKeyBytes}},
		cursor: []cursorKind{cursorInt, cursorText, cursorText}} // created_at, scope, key
	sourcesList = &listSpec{name: "sources", what: "webhook sources", prefix: "sources.", anchor: "inbox", limit: dashLimit,
		fields: []fieldSpec{{name: "source", label: "Source begins with", max: dashTextMax}},
		cursor: []cursorKind{cursorText}} // source
	failedList = &listSpec{name: "failed", what: "failed deliveries", prefix: "failed.", anchor: "inbox", limit: dashLimit,
		fields: []fieldSpec{{name: "source", label: "Source", max: dashTextMax}, {name: "event", label: "Event begins with", max: dashTextMax}},
		cursor: []cursorKind{cursorInt}} // id, descending
	deadList = &listSpec{name: "dead", what: "dead letters", prefix: "", anchor: "outbox", limit: dashLimit,
		fields: []fieldSpec{{name: "topic", label: "Topic", max: outbox.MaxTopicBytes}, {name: "key", label: "Key", max: outbox.MaxKeyBytes}},
		cursor: []cursorKind{cursorInt}} // id
	auditList = &listSpec{name: "audit", what: "audit scopes", prefix: "audit.", anchor: "audit", limit: auditScopesShown,
		fields: []fieldSpec{{name: "scope", label: "Scope begins with", max: dashTextMax}},
		cursor: []cursorKind{cursorText}} // scope
)

// parseLists reads every list's filter and page from the query q.
func parseLists(q url.Values) (dashLists, error) {
	var ls dashLists
	for _, x := range []struct {
		to   **dashList
		spec *listSpec
	}{{&ls.Claims, claimsList}, {&ls.Quotas, quotasList}, {&ls.Idem, idemList}, {&ls.Sources, sourcesList},
		{&ls.Failed, failedList}, {&ls.Dead, deadList}, {&ls.Audit, auditList}} {
		l, err := parseList(q, x.spec)
		if err != nil {
			return ls, err
		}
		*x.to = l
	}
	// The default limiter has no name: a checkbox selects it, so that no
	// limiter's name stands for it. Both at once select nothing.
	if ls.Quotas.value("default") == "on" && ls.Quotas.value("limiter") != "" {
		return ls, racefree.Invalid(quotasList.prefix+"default", "selects the default limiter: give it or a limiter's name, not both")
	}
	return ls, nil
}

type dashClaim struct {
	Key, Holder string
	Fence       int64
	Left        string
	expires     int64
}

type dashQuota struct {
	Scope, Key, Kind string
	Used, Prev       int64
	Charged, Lapses  string
	updated          int64
}

type dashIdem struct {
	Scope, Key string
	Age        string
	created    int64
}

type dashSource struct {
	Source   string
	Received int64
}

type dashFailed struct {
	Source, EventID, Reason, At string
	Seq                         int64
	id                          int64
}

type dashAudit struct {
	Scope      string
	Intact     bool
	Verified   int64
	Break      string
	Checkpoint string // the latest checkpoint, or "none"
	Anchored   bool
}

// load reads the tenant of ctx's figures. On PostgreSQL it reads in one
// transaction of the tenant (row-level security binds it); on SQLite on
// the pool.
func (s *Server) load(ctx context.Context, d *dashData) error {
	q := s.dashSQL
	clock := wire.Of(s.db).ClockArg()
	t := tenant.From(ctx)
	err := s.reading(ctx, func(ctx context.Context, exec racefree.Executor) error {
		d.Claims, d.Quotas, d.Idem, d.Sources, d.Failed = nil, nil, nil, nil, nil
		ls := &d.Lists
		var now int64
		// Each list reads one row more than a page, to know whether there is a next one.
		err := each(ctx, exec, q.Get("claims"), append([]any{t, clock, ls.Claims.spec.limit + 1, ls.Claims.value("key"), ls.Claims.value("holder")},
			ls.Claims.afterArgs()...), func(rows *sql.Rows) error {
			var c dashClaim
			if err := rows.Scan(&c.Key, &c.Holder, &c.Fence, &c.expires, &now); err != nil {
				return err
			}
			c.Left = span(c.expires - now)
			d.Claims = append(d.Claims, c)
			return nil
		})
		if err != nil {
			return err
		}
		d.Claims = paged(ls.Claims, d.Claims, func(c dashClaim) []any { return []any{c.expires, c.Key} })
		err = each(ctx, exec, q.Get("quotas"), append([]any{t, clock, ls.Quotas.spec.limit + 1, ls.Quotas.limiter(), ls.Quotas.value("key")},
			ls.Quotas.afterArgs()...), func(rows *sql.Rows) error {
			var x dashQuota
			var exp int64
			if err := rows.Scan(&x.Scope, &x.Key, &x.Kind, &x.Used, &x.Prev, &x.updated, &exp, &now); err != nil {
				return err
			}
			x.Charged, x.Lapses = span(now-x.updated)+" ago", span(exp-now)
			d.Quotas = append(d.Quotas, x)
			return nil
		})
		if err != nil {
			return err
		}
		d.Quotas = paged(ls.Quotas, d.Quotas, func(x dashQuota) []any { return []any{x.updated, x.Scope, x.Key, x.Kind} })
		err = each(ctx, exec, q.Get("idempotency"), append([]any{t, clock, ls.Idem.spec.limit + 1, ls.Idem.value("scope"), ls.Idem.value("key")},
			ls.Idem.afterArgs()...), func(rows *sql.Rows) error {
			var x dashIdem
			if err := rows.Scan(&x.Scope, &x.Key, &x.created, &now); err != nil {
				return err
			}
			x.Age = span(now - x.created)
			d.Idem = append(d.Idem, x)
			return nil
		})
		if err != nil {
			return err
		}
		d.Idem = paged(ls.Idem, d.Idem, func(x dashIdem) []any { return []any{x.created, x.Scope, x.Key} })
		err = each(ctx, exec, q.Get("inbox_sources"), append([]any{t, ls.Sources.spec.limit + 1, ls.Sources.value("source")},
			ls.Sources.afterArgs()...), func(rows *sql.Rows) error {
			var x dashSource
			if err := rows.Scan(&x.Source, &x.Received); err != nil {
				return err
			}
			d.Sources = append(d.Sources, x)
			return nil
		})
		if err != nil {
			return err
		}
		d.Sources = paged(ls.Sources, d.Sources, func(x dashSource) []any { return []any{x.Source} })
		err = each(ctx, exec, q.Get("inbox_failed"), append([]any{t, ls.Failed.spec.limit + 1, ls.Failed.value("source"), ls.Failed.value("event")},
			ls.Failed.afterArgs()...), func(rows *sql.Rows) error {
			var x dashFailed
			var at int64
			if err := rows.Scan(&x.Source, &x.EventID, &x.Seq, &x.Reason, &at, &x.id); err != nil {
				return err
			}
			x.At = formatTime(racefree.FromMillis(at))
			d.Failed = append(d.Failed, x)
			return nil
		})
		if err != nil {
			return err
		}
		d.Failed = paged(ls.Failed, d.Failed, func(x dashFailed) []any { return []any{x.id} })
		o, err := s.Outbox()
		if err != nil {
			return err
		}
		if d.Outbox, err = o.Stats(ctx, exec); err != nil {
			return err
		}
		var earliest sql.NullInt64
		var ready, leased, due, deadN int64
		if err := exec.QueryRowContext(ctx, s.dash.outboxSQL, t, clock, metricsCountBound).Scan(&ready, &leased, &due, &earliest, &deadN, &now); err != nil {
			return err
		}
		d.OldestDue = 0
		if earliest.Valid && now > earliest.Int64 {
			d.OldestDue = time.Duration(now-earliest.Int64) * time.Millisecond
		}
		dl := ls.Dead
		dead, err := o.Dead(ctx, exec, outbox.Filter{Topic: dl.value("topic"), Key: dl.value("key")}, dl.afterInt(), dl.spec.limit+1)
		if err != nil {
			return err
		}
		dead = paged(dl, dead, func(r *outbox.Record) []any { return []any{r.ID} })
		d.Dead = d.Dead[:0]
		for _, r := range dead {
			d.Dead = append(d.Dead, toDeadMessage(r))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dashboard: %w", wire.Of(s.db).InterpretError(err))
	}
	return s.loadAudit(ctx, d)
}

// each runs query with args on exec and calls fn for each row.
func each(ctx context.Context, exec racefree.Executor, query string, args []any, fn func(*sql.Rows) error) error {
	rows, err := exec.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// loadAudit verifies each of the tenant's audit scopes of the page (by
// name, auditScopesShown a page, those that begin with the filter's, read
// a page at a time: [audit.Log.ScopesPage])
// against its stored checkpoints, resuming from where this process last
// found it intact (verified), so that a page load checks only the entries
// appended since.
func (s *Server) loadAudit(ctx context.Context, d *dashData) error {
	if s.audit == nil {
		d.AuditOff = true
		return nil
	}
	al := d.Lists.Audit
	after := ""
	if len(al.after) > 0 {
		after = al.after[0]
	}
	page, err := s.audit.ScopesPage(ctx, al.value("scope"), after, al.spec.limit+1)
	if err != nil {
		return err
	}
	scopes := paged(al, page, func(sc string) []any { return []any{sc} })
	t := tenant.From(ctx)
	for _, scope := range scopes {
		cps, err := s.audit.Checkpoints(ctx, scope, 0)
		if err != nil {
			return err
		}
		res, err := s.audit.Verify(ctx, scope, &audit.VerifyOptions{Checkpoints: cps, After: s.verified.get(t, scope)})
		if err != nil {
			return err
		}
		a := dashAudit{Scope: scope, Intact: res.Intact(), Verified: res.Verified.Seq, Anchored: res.Anchored, Checkpoint: "none"}
		if res.Break != nil {
			a.Break = fmt.Sprintf("%s at entry %d", res.Break.Kind, res.Break.Seq)
		}
		s.verified.record(t, scope, &res)
		if n := len(cps); n > 0 {
			c := cps[n-1]
			a.Checkpoint = fmt.Sprintf("#%d at entry %d, %s", c.N, c.Seq, formatTime(c.At))
		}
		d.Audit = append(d.Audit, a)
	}
	return nil
}

// verifiedPositions remembers, per tenant and audit scope, the last
// position a Verify found intact, for the next page load to resume from
// and for racefree_audit_unverified_entries, and the chains whose latest
// verification found a break (racefree_audit_broken_chains). It holds at
// most maxVerified of each; when full it starts over (the next load of
// each scope verifies its whole chain again; a broken chain is counted
// again at its next verification).
type verifiedPositions struct {
	mu     sync.Mutex
	m      map[[2]string]audit.Position
	broken map[[2]string]bool
}

const maxVerified = 10000

func (v *verifiedPositions) get(t, scope string) *audit.Position {
	v.mu.Lock()
	defer v.mu.Unlock()
	p, ok := v.m[[2]string{t, scope}]
	if !ok {
		return nil
	}
	return &p
}

// set records that the chain is intact up to p.
func (v *verifiedPositions) set(t, scope string, p audit.Position) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m) >= maxVerified {
		v.m = map[[2]string]audit.Position{}
	}
	v.m[[2]string{t, scope}] = p
	delete(v.broken, [2]string{t, scope})
}

// forget records that a verification found the chain broken: the next
// one starts from its beginning, and the chain counts as broken until a
// verification finds it intact.
func (v *verifiedPositions) forget(t, scope string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.m, [2]string{t, scope})
	if v.broken == nil || len(v.broken) >= maxVerified {
		v.broken = map[[2]string]bool{}
	}
	v.broken[[2]string{t, scope}] = true
}

// record records a verification's result.
func (v *verifiedPositions) record(t, scope string, res *audit.Result) {
	if res.Break != nil {
		v.forget(t, scope)
	} else {
		v.set(t, scope, res.Verified)
	}
}

// brokenChains is how many chains the latest verification found broken.
func (v *verifiedPositions) brokenChains() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.broken)
}

// unverified is how many of the chain's entries up to last lie past the
// position last verified intact (or past its retention floor, when none
// was verified or pruning passed it).
func (v *verifiedPositions) unverified(t, scope string, floor, last int64) int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	from := floor
	if p, ok := v.m[[2]string{t, scope}]; ok {
		from = max(from, p.Seq)
	}
	return max(last-from, 0)
}

// span formats a number of milliseconds for a person: 850 ms, 12.3 s,
// 4m05s, 3h02m.
func span(ms int64) string {
	d := time.Duration(max(ms, 0)) * time.Millisecond
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
