package audit

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

//go:embed sql
var queries embed.FS

// Limits on input, checked before anything is written.
const (
	MaxScopeLen   = 200      // bytes in a scope
	MaxActorLen   = 200      // bytes in Entry.Actor
	MaxActionLen  = 200      // bytes in Entry.Action
	MaxSubjectLen = 1024     // bytes in Entry.Subject
	MaxDataLen    = 64 << 10 // bytes in Entry.Data
	MaxListLimit  = 1000     // entries in one page of List
)

// ActionKeyRotated is the action of the entry Append writes when it moves a
// scope to the keyring's current mac key: its actor is "racefree", its
// subject the new key id and its data {"from": old id, "to": new id}. It is
// the last entry under the old key; the verifier accepts only the new key
// after it. Callers cannot append entries with this action.
const ActionKeyRotated = "racefree.audit.key_rotated"

// Entry is what a caller appends: who did what to what, and any data.
type Entry struct {
	Actor   string // who, 1 to MaxActorLen bytes
	Action  string // what, 1 to MaxActionLen bytes
	Subject string // to what; may be empty; at most MaxSubjectLen bytes
	Data    []byte // anything, often JSON; at most MaxDataLen bytes
}

// Record represents an entry as stored: numbered, timed and chained.
type Record struct {
	Entry
	Tenant  string // the tenant whose chain it is in
	Scope   string
	Seq     int64     // from 1, gapless within the scope
	At      time.Time // the engine's clock when it was appended, UTC, ms
	KeyID   string    // the mac key of the entry's epoch
	PrevMAC []byte    // the MAC of entry Seq-1; empty for entry 1
	MAC     []byte    // HMAC-SHA256 of the entry under the scope's key
}

// Log represents the audit log of one database. It is safe for concurrent
// use and holds no state besides its configuration, so any number of Logs,
// in any number of processes, may share a database. Every call runs for
// the tenant its context names ([tenant.From]): a chain is (tenant, scope),
// and the scope is a namespace inside the tenant.
type Log struct {
	db   *racefree.DB
	q    query.Set
	ring *Keyring
}

// New returns a Log over db that MACs and verifies with ring. It does no
// I/O.
func New(db *racefree.DB, ring *Keyring) (*Log, error) {
	if ring == nil {
		return nil, racefree.Invalid("keyring", "must not be nil")
	}
	return &Log{db: db, q: query.MustLoad(queries, "sql", db.Engine()), ring: ring}, nil
}

func checkScope(scope string) error { return racefree.CheckText("scope", scope, MaxScopeLen) }

func (e *Entry) validate() error {
	if err := racefree.CheckText("actor", e.Actor, MaxActorLen); err != nil {
		return err
	}
	if err := racefree.CheckText("action", e.Action, MaxActionLen); err != nil {
		return err
	}
	if e.Action == ActionKeyRotated || e.Action == ActionPruned || e.Action == ActionTimelineChanged {
		return racefree.Invalid("action", "%s is written by racefree only", e.Action)
	}
	if e.Subject != "" {
		if err := racefree.CheckText("subject", e.Subject, MaxSubjectLen); err != nil {
			return err
		}
	}
	if len(e.Data) > MaxDataLen {
		return racefree.Invalid("data", "must be at most %d bytes, got %d", MaxDataLen, len(e.Data))
	}
	return nil
}

// Append appends e to the scope's chain of the context's tenant
// ([tenant.From]) and returns the stored record.
//
// The entry gets the scope's next number, gapless from 1: Append reads
// the scope's head row (last number, previous entry's MAC, key epoch)
// under its lock (SELECT … FOR UPDATE; on SQLite the IMMEDIATE
// transaction's write lock), which the transaction holds until it ends,
// computes the entry's MAC and inserts the entry, whose trigger moves the
// head to it in the same statement: one lock orders numbering and
// chaining, and the head row is written once per entry. Concurrent appends to
// one scope queue on that row; appends to different scopes, or to the same
// scope of different tenants, never wait for each other. The entry's time
// is the engine's clock.
//
// When exec is a *sql.Tx, the entry commits or rolls back with the
// caller's own writes: a rolled-back transaction leaves no entry and
// consumes no number. On PostgreSQL the transaction's tenant is set first
// ([send.Run]); one set to another tenant ([tenant.InTx]) is a
// *tenant.MismatchError. Any other executor (*racefree.DB, *sql.DB) makes
// Append run its own transaction. On PostgreSQL a caller's transaction at
// REPEATABLE READ or SERIALIZABLE gets [racefree.ErrRetryable] when another
// append to the scope committed since it began: roll back and run it
// again.
//
// An error matching [racefree.ErrUnavailable] from Append's own
// transaction may come after its commit ([racefree.DB.InTx]: on
// PostgreSQL the reply was lost, or ctx ended while the COMMIT was in
// flight; on SQLite an I/O error at the commit): the entry may be
// committed, and calling Append again appends it a second time. Use
// AppendKeyed where that matters.
//
// On PostgreSQL from migration 018, when the scope's last entry was
// appended on another timeline than the server's (a failover since),
// Append first appends an ActionTimelineChanged entry that records the
// move, in the same transaction and under the same lock. When the scope's
// key epoch is not the keyring's current mac key, Append then appends an
// ActionKeyRotated entry under the old key, then e under the new one. It fails with ErrUnknownKey when the keyring lacks the
// scope's key, with an *racefree.InputError, writing nothing, on bad
// input, and with [racefree.ErrSchemaOutdated] before migration 011 (012
// for a tenant other than [tenant.Default]).
func (l *Log) Append(ctx context.Context, exec racefree.Executor, scope string, e Entry) (Record, error) {
	if err := checkScope(scope); err != nil {
		return Record{}, err
	}
	if err := e.validate(); err != nil {
		return Record{}, err
	}
	e.Data = notNil(e.Data)
	t := tenant.From(ctx)
	var rec Record
	err := l.inTx(ctx, exec, func(tx *sql.Tx) error {
		var err error
		rec, err = l.append(ctx, tx, t, scope, e)
		return err
	})
	if err != nil {
		return Record{}, fmt.Errorf("audit: append to %s: %w", scope, wire.Of(l.db).InterpretError(err))
	}
	return rec, nil
}

// inTx runs fn for the context's tenant ([send.Run]) in a transaction:
// exec itself when it is a *sql.Tx, and otherwise one of its own
// ([racefree.DB.InTx]: IMMEDIATE on SQLite, retried on transient conflicts),
// in which [send.Run] sets the tenant where row-level security needs it.
func (l *Log) inTx(ctx context.Context, exec racefree.Executor, fn func(tx *sql.Tx) error) error {
	if _, ok := exec.(*sql.Tx); !ok {
		return l.db.InTx(ctx, func(tx *sql.Tx) error { return l.inTx(ctx, tx, fn) })
	}
	return send.Run(ctx, l.db, exec, func(exec racefree.Executor) error {
		tx, ok := exec.(*sql.Tx)
		if !ok {
			return fmt.Errorf("audit: expected a transaction, got %T", exec)
		}
		return fn(tx)
	})
}

// read runs fn, which only reads, for the context's tenant ([send.Read]
// on the pool: on PostgreSQL a short READ ONLY transaction that sets the
// tenant), and writes nothing, so that List, Verify and the checkpoint
// reads work on a standby.
func (l *Log) read(ctx context.Context, fn func(exec racefree.Executor) error) error {
	return send.Read(ctx, l.db, l.db, fn)
}

// OneWriteVersion is the migration from which Append writes the head row
// once per entry (lock_head, then the insert whose trigger moves the
// head). On an older schema, during a rollout, it takes the number with
// the previous release's upsert (next) and lets the trigger set the MAC.
const OneWriteVersion = 15

// appendShape is how Append reads and moves a scope's head, by the schema
// it runs on.
type appendShape int

const (
	// shapeUpsert: before migration 015, the previous release's upsert
	// (next) takes the number and the trigger sets the MAC.
	shapeUpsert appendShape = iota
	// shapeOneWrite: from 015, lock_head reads the head under its lock
	// and the insert's trigger moves it.
	shapeOneWrite
	// shapeTimeline: from 018 (TimelineVersion), shapeOneWrite that also
	// reads the head's timeline and the server's (lock_head_timeline) and
	// records a change in the chain.
	shapeTimeline
)

func (l *Log) append(ctx context.Context, tx *sql.Tx, t, scope string, e Entry) (Record, error) {
	shape := shapeUpsert
	for _, s := range []struct {
		v     int64
		shape appendShape
	}{{OneWriteVersion, shapeOneWrite}, {TimelineVersion, shapeTimeline}} {
		ok, err := wire.Of(l.db).SchemaAtLeast(ctx, tx, s.v)
		if err != nil {
			return Record{}, err
		}
		if ok {
			shape = s.shape
		}
	}
	return l.appendShaped(ctx, tx, t, scope, e, shape)
}

// appendShaped appends e, reading and moving the head as shape says.
//
// Before e it may append, in this order and under the same lock, an
// ActionTimelineChanged entry (the head's timeline is not the server's)
// and an ActionKeyRotated entry (the head's key epoch is not the
// keyring's current key); it returns e's record.
func (l *Log) appendShaped(ctx context.Context, tx *sql.Tx, t, scope string, e Entry, shape appendShape) (Record, error) {
	var rotated, moved bool
	for {
		var (
			r   = Record{Tenant: t, Scope: scope, Entry: e}
			at  int64
			tl  timelines
			err error
		)
		if shape >= shapeOneWrite {
			r.Seq, r.PrevMAC, r.KeyID, at, tl, err = l.lockHead(ctx, tx, t, scope, shape == shapeTimeline)
		} else {
			err = tx.QueryRowContext(ctx, l.q.Get("next"), t, scope, l.ring.current, wire.Of(l.db).ClockArg()).Scan(&r.Seq, &r.PrevMAC, &r.KeyID, &at)
		}
		if err != nil {
			return Record{}, fmt.Errorf("next number: %w", err)
		}
		move := tl.changed()
		if move && moved {
			return Record{}, fmt.Errorf("the head of %s stayed on timeline %d after the timeline entry %d", scope, tl.head.Int64, r.Seq-1)
		}
		if !move && tl.unset() {
			// A head written before migration 018: the timeline before is
			// unknown, so this entry starts recording it.
			if err := l.setTimeline(ctx, tx, t, scope, tl.server.Int64); err != nil {
				return Record{}, err
			}
		}
		rotate := !move && r.KeyID != l.ring.current
		if rotate && rotated {
			return Record{}, fmt.Errorf("the head of %s stayed in key epoch %q after the rotation entry %d", scope, r.KeyID, r.Seq-1)
		}
		switch {
		case move:
			r.Entry = timelineEntry(tl.head.Int64, tl.server.Int64, r.Seq-1)
		case rotate:
			data, _ := json.Marshal(map[string]string{"from": r.KeyID, "to": l.ring.current})
			r.Entry = Entry{Actor: "racefree", Action: ActionKeyRotated, Subject: l.ring.current, Data: data}
		}
		key, ok := l.ring.scopeKey(r.KeyID, scope)
		if !ok {
			return Record{}, fmt.Errorf("%w: %q", ErrUnknownKey, r.KeyID)
		}
		r.At = racefree.FromMillis(at)
		r.PrevMAC = notNil(r.PrevMAC)
		r.MAC = newMacer(key).sum(&entryInput{t, scope, r.Seq, r.PrevMAC, at, r.Actor, r.Action, r.Subject, r.Data})
		// The insert's trigger moves the head to this entry, in the same
		// statement: its number, its MAC and, after a rotation entry, its
		// key epoch; it refuses a number that does not follow the head's.
		if _, err := tx.ExecContext(ctx, l.q.Get("insert"), t, scope, r.Seq, at, r.Actor, r.Action, r.Subject, r.Data, r.KeyID, r.PrevMAC, r.MAC); err != nil {
			return Record{}, fmt.Errorf("insert entry %d: %w", r.Seq, err)
		}
		switch {
		case move:
			if err := l.setTimeline(ctx, tx, t, scope, tl.server.Int64); err != nil {
				return Record{}, err
			}
			moved = true
		case rotate:
			rotated = true
		default:
			return r, nil
		}
	}
}

// lockHead reads the tenant's scope's head under its lock, creating it at
// 0 for the scope's first entry, and returns the next entry's number, the
// previous MAC, the key epoch and the clock and, when withTimeline, the
// head's timeline and the server's (lock_head_timeline), read in the same
// statement.
func (l *Log) lockHead(ctx context.Context, tx *sql.Tx, t, scope string, withTimeline bool) (seq int64, prev []byte, keyID string, at int64, tl timelines, err error) {
	var last int64
	lock, create := "lock_head", "new_head"
	if withTimeline {
		lock, create = "lock_head_timeline", "new_head_timeline"
	}
	read := func() error {
		row := tx.QueryRowContext(ctx, l.q.Get(lock), t, scope, wire.Of(l.db).ClockArg())
		if withTimeline {
			return row.Scan(&last, &prev, &keyID, &at, &tl.head, &tl.server)
		}
		return row.Scan(&last, &prev, &keyID, &at)
	}
	err = read()
	if errors.Is(err, sql.ErrNoRows) {
		if _, err := tx.ExecContext(ctx, l.q.Get(create), t, scope, l.ring.current); err != nil {
			return 0, nil, "", 0, tl, err
		}
		err = read()
	}
	return last + 1, prev, keyID, at, tl, err
}

// List returns up to limit entries of the tenant's scope numbered after
// after, in number order, with their MACs. Pass 0 to start at the
// beginning, then the Seq of the last record returned. Numbers commit in
// order (the head row's lock is held until commit), so paging never skips
// an entry.
func (l *Log) List(ctx context.Context, scope string, after int64, limit int) ([]Record, error) {
	if err := checkScope(scope); err != nil {
		return nil, err
	}
	if after < 0 {
		return nil, racefree.Invalid("after", "must not be negative")
	}
	if limit < 1 || limit > MaxListLimit {
		return nil, racefree.Invalid("limit", "must be between 1 and %d, got %d", MaxListLimit, limit)
	}
	t := tenant.From(ctx)
	var out []Record
	err := l.read(ctx, func(exec racefree.Executor) error {
		out = nil
		rows, err := exec.QueryContext(ctx, l.q.Get("entries"), t, scope, after, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				r  = Record{Tenant: t, Scope: scope}
				at int64
			)
			if err := rows.Scan(&r.Seq, &at, &r.Actor, &r.Action, &r.Subject, &r.Data, &r.KeyID, &r.PrevMAC, &r.MAC); err != nil {
				return err
			}
			r.PrevMAC = notNil(r.PrevMAC) // entry 1's, as Append made it
			r.At = racefree.FromMillis(at)
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("audit: list %s: %w", scope, wire.Of(l.db).InterpretError(err))
	}
	return out, nil
}

// Scopes returns, in order, every scope of the tenant that has a head
// row, an entry or a stored checkpoint: a scope whose head row was deleted
// is still listed by its entries or checkpoints, so that VerifyAll and
// `racefree audit verify` judge it (Verify finds it broken) rather than
// leave it out. It reads one row per scope, however many entries.
func (l *Log) Scopes(ctx context.Context) ([]string, error) {
	return l.scopes(ctx, "scopes", tenant.From(ctx))
}

// ScopesPage returns, in order, at most limit of the tenant's scopes that
// have a head row (unlike Scopes, a scope whose head row was deleted is
// not listed: ScopesPage is for browsing, not for verifying), begin with prefix ("" for any) and come after after (""
// for the first page): pass the last scope of a page as after to read the
// next. Each page reads only its own rows, however many scopes the tenant
// has. A limit below 1 is an *racefree.InputError.
func (l *Log) ScopesPage(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	if limit < 1 {
		return nil, racefree.Invalid("limit", "must be at least 1, got %d", limit)
	}
	return l.scopes(ctx, "scopes_page", tenant.From(ctx), prefix, after, limit)
}

// scopes reads the scopes that the query called name returns.
func (l *Log) scopes(ctx context.Context, name string, args ...any) ([]string, error) {
	var out []string
	err := l.read(ctx, func(exec racefree.Executor) error {
		out = nil
		rows, err := exec.QueryContext(ctx, l.q.Get(name), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				return err
			}
			out = append(out, s)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("audit: scopes: %w", wire.Of(l.db).InterpretError(err))
	}
	return out, nil
}

// ErrUnknownKey means the keyring has no key with the id a scope or an
// entry names.
var ErrUnknownKey = errors.New("audit: key id not in the keyring")

// Length returns the number of entries the tenant's scope's head row
// counts above its retention floor (0 for a scope without entries): what
// Verify will check, for a progress report.
func (l *Log) Length(ctx context.Context, scope string) (int64, error) {
	if err := checkScope(scope); err != nil {
		return 0, err
	}
	h, err := l.head(ctx, tenant.From(ctx), scope)
	if err != nil {
		return 0, fmt.Errorf("audit: length of %s: %w", scope, err)
	}
	return h.seq - h.floor.Seq, nil
}

// headRow is a scope's committed head as Verify reads it.
type headRow struct {
	seq         int64    // the last number; 0 for a scope without entries
	checkpoints int64    // the number of checkpoints
	floor       Position // the last entry pruned (Seq 0: none)
	found       bool     // the scope has a head row
}

// head reads the tenant's scope's head, all zero (and not found) for a
// scope without a head row.
func (l *Log) head(ctx context.Context, t, scope string) (headRow, error) {
	var h headRow
	err := l.read(ctx, func(exec racefree.Executor) error {
		h = headRow{}
		q := "head"
		if ok, err := wire.Of(l.db).SchemaAtLeast(ctx, exec, RetentionVersion); err != nil {
			return err
		} else if !ok {
			q = "head_unpruned"
		}
		err := exec.QueryRowContext(ctx, l.q.Get(q), t, scope).Scan(&h.seq, &h.checkpoints, &h.floor.Seq, &h.floor.MAC, &h.floor.KeyID)
		if errors.Is(err, sql.ErrNoRows) {
			h = headRow{}
			return nil
		}
		h.found = err == nil
		return err
	})
	return h, wire.Of(l.db).InterpretError(err)
}

// notNil returns b, or an empty slice for nil. SQLite scans an empty BLOB
// as nil; an entry's or a checkpoint's empty field (entry 1's PrevMAC,
// the first checkpoint's Prev, data never given) is []byte{} on both
// engines, stored as such and written as "" in JSON, never null.
func notNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
