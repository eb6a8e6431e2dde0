package server

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/outbox"
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
	ReadAt    string
	Claims    []dashClaim
	Quotas    []dashQuota
	Idem      []dashIdem
	Sources   []dashSource
	Failed    []dashFailed
	Outbox    *outbox.Stats
	Dead      []deadMessage
	Audit     []dashAudit
	AuditOff  bool // no keyring: the audit log is not served
	Charts    []chart
	ChartsEnd string
	Limit     int
}

type dashClaim struct {
	Key, Holder string
	Fence       int64
	Left        string
}

type dashQuota struct {
	Scope, Key, Kind string
	Used, Prev       int64
	Charged, Lapses  string
}

type dashIdem struct {
	Scope, Key string
	Age        string
}

type dashSource struct {
	Source   string
	Received int64
}

type dashFailed struct {
	Source, EventID, Reason, At string
	Seq                         int64
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
	clock := s.db.ClockArg()
	t := tenant.From(ctx)
	err := s.reading(ctx, func(ctx context.Context, exec racefree.Executor) error {
		d.Claims, d.Quotas, d.Idem, d.Sources, d.Failed = nil, nil, nil, nil, nil
		var now int64
		err := each(ctx, exec, q.Get("claims"), []any{t, clock, dashLimit}, func(rows *sql.Rows) error {
			var c dashClaim
			var exp int64
			if err := rows.Scan(&c.Key, &c.Holder, &c.Fence, &exp, &now); err != nil {
				return err
			}
			c.Left = span(exp - now)
			d.Claims = append(d.Claims, c)
			return nil
		})
		if err != nil {
			return err
		}
		err = each(ctx, exec, q.Get("quotas"), []any{t, clock, dashLimit}, func(rows *sql.Rows) error {
			var x dashQuota
			var upd, exp int64
			if err := rows.Scan(&x.Scope, &x.Key, &x.Kind, &x.Used, &x.Prev, &upd, &exp, &now); err != nil {
				return err
			}
			x.Charged, x.Lapses = span(now-upd)+" ago", span(exp-now)
			d.Quotas = append(d.Quotas, x)
			return nil
		})
		if err != nil {
			return err
		}
		err = each(ctx, exec, q.Get("idempotency"), []any{t, clock, dashLimit}, func(rows *sql.Rows) error {
			var x dashIdem
			var created int64
			if err := rows.Scan(&x.Scope, &x.Key, &created, &now); err != nil {
				return err
			}
			x.Age = span(now - created)
			d.Idem = append(d.Idem, x)
			return nil
		})
		if err != nil {
			return err
		}
		err = each(ctx, exec, q.Get("inbox_sources"), []any{t, dashLimit}, func(rows *sql.Rows) error {
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
		err = each(ctx, exec, q.Get("inbox_failed"), []any{t, dashLimit}, func(rows *sql.Rows) error {
			var x dashFailed
			var at int64
			if err := rows.Scan(&x.Source, &x.EventID, &x.Seq, &x.Reason, &at); err != nil {
				return err
			}
			x.At = formatTime(racefree.FromMillis(at))
			d.Failed = append(d.Failed, x)
			return nil
		})
		if err != nil {
			return err
		}
		o, err := s.Outbox()
		if err != nil {
			return err
		}
		if d.Outbox, err = o.Stats(ctx, exec); err != nil {
			return err
		}
		dead, err := o.Dead(ctx, exec, outbox.Filter{}, 0, dashLimit)
		if err != nil {
			return err
		}
		d.Dead = d.Dead[:0]
		for _, r := range dead {
			d.Dead = append(d.Dead, toDeadMessage(r))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dashboard: %w", s.db.InterpretError(err))
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

// loadAudit verifies each of the tenant's audit scopes (the first
// auditScopesShown) against its stored checkpoints, resuming from where
// this process last found it intact (verified), so that a page load
// checks only the entries appended since.
func (s *Server) loadAudit(ctx context.Context, d *dashData) error {
	if s.audit == nil {
		d.AuditOff = true
		return nil
	}
	scopes, err := s.audit.Scopes(ctx)
	if err != nil {
		return err
	}
	if len(scopes) > auditScopesShown {
		scopes = scopes[:auditScopesShown]
	}
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
			s.verified.forget(t, scope)
		} else {
			s.verified.set(t, scope, res.Verified)
		}
		if n := len(cps); n > 0 {
			c := cps[n-1]
			a.Checkpoint = fmt.Sprintf("#%d at entry %d, %s", c.N, c.Seq, formatTime(c.At))
		}
		d.Audit = append(d.Audit, a)
	}
	return nil
}

// verifiedPositions remembers, per tenant and audit scope, the last
// position a Verify found intact, for the next page load to resume from.
// It holds at most maxVerified positions; when full it starts over (the
// next load of each scope verifies its whole chain again).
type verifiedPositions struct {
	mu sync.Mutex
	m  map[[2]string]audit.Position
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

func (v *verifiedPositions) set(t, scope string, p audit.Position) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m) >= maxVerified {
		v.m = map[[2]string]audit.Position{}
	}
	v.m[[2]string{t, scope}] = p
}

func (v *verifiedPositions) forget(t, scope string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.m, [2]string{t, scope})
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
