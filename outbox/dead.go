package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/reaper"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// Record is a stored message, as Get and Dead read it.
type Record struct {
	ID          int64
	Tenant      string
	Topic       string
	Key         string
	Ordered     bool
	Payload     []byte
	Headers     map[string]string
	State       State
	CreatedAt   time.Time
	AvailableAt time.Time // ready: when due; leased: the lease's expiry; delivered or dead: since when
	Attempts    int
	MaxAttempts int
	Fence       int64
	LeasedBy    string
	LastError   string
	// History holds the latest failed attempts, oldest first (Get only).
	History []Attempt
}

// Attempt is one failed tenure of a message.
type Attempt struct {
	Fence   int64
	Attempt int
	Worker  string
	At      time.Time
	Outcome string // "retry", "dead" or "lapsed" (the lease lapsed)
	Error   string
}

// Filter selects dead messages: by id, topic and key, each optional.
// Redrive and Discard need at least one of them, or All.
type Filter struct {
	IDs   []int64
	Topic string
	Key   string
	All   bool // every dead message of the tenant
}

// MaxFilterIDs bounds Filter.IDs.
const MaxFilterIDs = 10000

func (f Filter) check(needSome bool) error {
	if len(f.IDs) > MaxFilterIDs {
		return racefree.Invalid("ids", "at most %d", MaxFilterIDs)
	}
	for _, id := range f.IDs {
		if id < 1 {
			return racefree.Invalid("ids", "must be positive")
		}
	}
	if f.Topic != "" {
		if err := racefree.CheckText("topic", f.Topic, MaxTopicBytes); err != nil {
			return err
		}
	}
	if f.Key != "" {
		if err := racefree.CheckText("key", f.Key, MaxKeyBytes); err != nil {
			return err
		}
	}
	if needSome && !f.All && len(f.IDs) == 0 && f.Topic == "" && f.Key == "" {
		return racefree.Invalid("filter", "name ids, a topic or a key, or all")
	}
	return nil
}

func scanRecord(tenantID string, sc interface{ Scan(...any) error }) (*Record, error) {
	r := &Record{Tenant: tenantID}
	var headers, state string
	var created, avail int64
	if err := sc.Scan(&r.ID, &r.Topic, &r.Key, &r.Ordered, &r.Payload, &headers, &state, &created, &avail, &r.Attempts,
		&r.MaxAttempts, &r.Fence, &r.LeasedBy, &r.LastError); err != nil {
		return nil, err
	}
	r.Headers, r.State = decodeHeaders(headers), State(state)
	r.CreatedAt, r.AvailableAt = racefree.FromMillis(created), racefree.FromMillis(avail)
	return r, nil
}

// Get returns message id of the tenant ctx names, with its history, or an
// error matching [racefree.ErrNotFound].
func (o *Outbox) Get(ctx context.Context, exec racefree.Executor, id int64) (*Record, error) {
	t := tenant.From(ctx)
	var rec *Record
	err := o.inTx(ctx, exec, func(exec racefree.Executor) error {
		var err error
		rec, err = scanRecord(t, exec.QueryRowContext(ctx, o.q.Get("get"), t, id))
		if err != nil {
			return err
		}
		rows, err := exec.QueryContext(ctx, o.q.Get("attempts"), t, id)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var a Attempt
			var at int64
			if err := rows.Scan(&a.Fence, &a.Attempt, &a.Worker, &at, &a.Outcome, &a.Error); err != nil {
				return err
			}
			a.At = racefree.FromMillis(at)
			rec.History = append(rec.History, a)
		}
		return rows.Err()
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("no outbox message %d: %w (never enqueued, delivered and reaped, discarded, or another tenant's)", id, racefree.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("outbox get %d: %w", id, wire.Of(o.db).InterpretError(err))
	}
	return rec, nil
}

// MaxPage bounds a page of Dead.
const MaxPage = 1000

// Dead returns up to limit dead messages of the tenant ctx names that
// match f, with ids above after, by id (page with the last id returned).
func (o *Outbox) Dead(ctx context.Context, exec racefree.Executor, f Filter, after int64, limit int) ([]*Record, error) {
	if err := f.check(false); err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxPage {
		return nil, racefree.Invalid("limit", "must be 1 to %d", MaxPage)
	}
	t := tenant.From(ctx)
	var out []*Record
	err := o.run(ctx, exec, func(exec racefree.Executor) error {
		out = out[:0]
		rows, err := exec.QueryContext(ctx, o.q.Get("dead"), t, o.dialect.idsArg(f.IDs), f.Topic, f.Key, after, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanRecord(t, rows)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("outbox dead: %w", wire.Of(o.db).InterpretError(err))
	}
	return out, nil
}

// Redrive makes the dead messages that match f due at once, each with a
// fresh set of attempts, and returns their ids. Messages that are not
// dead are left alone. Pass the caller's *sql.Tx to redrive with its
// writes.
func (o *Outbox) Redrive(ctx context.Context, exec racefree.Executor, f Filter) ([]int64, error) {
	if err := f.check(true); err != nil {
		return nil, err
	}
	t := tenant.From(ctx)
	var ids []int64
	err := o.run(ctx, exec, func(exec racefree.Executor) error {
		var err error
		ids, err = o.ids(ctx, exec, o.q.Get("redrive"), t, o.dialect.idsArg(f.IDs), f.Topic, f.Key, wire.Of(o.db).ClockArg())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox redrive: %w", wire.Of(o.db).InterpretError(err))
	}
	if len(ids) > 0 {
		if _, inTx := exec.(*sql.Tx); !inTx || o.dialect.wakesBeforeCommit() {
			o.hub.wake(t, f.Topic)
		}
	}
	return ids, nil
}

// Discard deletes the dead messages that match f, with their history, and
// returns their ids. Messages that are not dead are left alone. An
// ordered key blocked by a dead message moves on to the next.
func (o *Outbox) Discard(ctx context.Context, exec racefree.Executor, f Filter) ([]int64, error) {
	if err := f.check(true); err != nil {
		return nil, err
	}
	t := tenant.From(ctx)
	var ids []int64
	err := o.inTx(ctx, exec, func(exec racefree.Executor) error {
		if err := o.dialect.discardHistory(ctx, o, exec, t, f); err != nil {
			return err
		}
		var err error
		ids, err = o.ids(ctx, exec, o.q.Get("discard"), t, o.dialect.idsArg(f.IDs), f.Topic, f.Key)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox discard: %w", wire.Of(o.db).InterpretError(err))
	}
	if len(ids) > 0 {
		o.hub.wake(t, f.Topic)
	}
	return ids, nil
}

// Stats is a tenant's outbox at one instant.
type Stats struct {
	Ready     int64 // waiting, due now or later
	Due       int64 // of which due now
	Leased    int64 // held by a relay (or lapsed, to be claimed again)
	Dead      int64 // the dead-letter depth
	Delivered int64 // delivered and not yet reaped
	// OldestPending is the age of the oldest ready or leased message (0
	// when there is none).
	OldestPending time.Duration
}

// Stats reads the figures of the tenant ctx names.
func (o *Outbox) Stats(ctx context.Context, exec racefree.Executor) (*Stats, error) {
	t := tenant.From(ctx)
	s := &Stats{}
	err := o.run(ctx, exec, func(exec racefree.Executor) error {
		var oldest sql.NullInt64
		var now int64
		err := exec.QueryRowContext(ctx, o.q.Get("stats"), t, wire.Of(o.db).ClockArg()).Scan(&s.Ready, &s.Due, &s.Leased, &oldest, &s.Dead, &s.Delivered, &now)
		if oldest.Valid && now > oldest.Int64 {
			s.OldestPending = time.Duration(now-oldest.Int64) * time.Millisecond
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox stats: %w", wire.Of(o.db).InterpretError(err))
	}
	return s, nil
}

// Reap deletes, in batches and one tenant at a time (every tenant
// racefree has seen), the messages delivered at least Options.Retention
// ago, with their history, and returns how many it deleted. Pending and
// dead messages are never reaped. On PostgreSQL rows other transactions
// hold locked are skipped, not waited for; on SQLite it pauses between
// batches so writers get the lock.
func (o *Outbox) Reap(ctx context.Context) (int64, error) {
	var total int64
	err := tenant.Each(ctx, o.db, func(ctx context.Context) error {
		n, err := o.ReapTenant(ctx)
		total += n
		return err
	})
	return total, err
}

// ReapTenant is Reap for the tenant ctx names only.
func (o *Outbox) ReapTenant(ctx context.Context) (int64, error) {
	t := tenant.From(ctx)
	size := o.opts.ReapBatch
	n, err := reaper.Run(ctx, o.db.Engine(), size, func() (int64, error) {
		var n int64
		err := o.inTx(ctx, o.db, func(exec racefree.Executor) error {
			var err error
			n, err = o.dialect.reap(ctx, o, exec, t, size)
			return err
		})
		return n, err
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return n, fmt.Errorf("outbox reap: %w", wire.Of(o.db).InterpretError(err))
	}
	return n, err
}
