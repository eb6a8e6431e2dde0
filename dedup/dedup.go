package dedup

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/reaper"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

//go:embed sql
var sqlFiles embed.FS

// Namespace is the claim namespace dedup elects in.
const Namespace = "dedup"

// DefaultWindow is the window Observe uses when given 0.
const DefaultWindow = 5 * time.Minute

// Limits on input; anything outside them is a *racefree.InputError.
const (
	MaxSourceBytes  = 128
	MaxLevelBytes   = 32
	MaxMessageBytes = 8192
	MaxResultBytes  = 1024
)

// Event represents one occurrence of something to de-duplicate.
type Event struct {
	Source      string // where it came from, e.g. "billing-worker"
	Level       string // e.g. "error"
	Message     string // the text; numbers and IDs are normalised away for the fingerprint
	Fingerprint string // optional; derived from the other fields when empty
}

// Observation represents what Observe decided for one occurrence.
type Observation struct {
	Fingerprint string
	Process     bool  // this observer won the window and must do the downstream work
	Fence       int64 // the current window's fencing token; pass it to Record
	Count       int64 // occurrences so far, this one included
	FirstSeen   time.Time
	LastSeen    time.Time
}

// Result represents the downstream outcome the winner records.
type Result struct {
	Classification string
	ExternalID     string // e.g. the ticket opened for it
}

// Record represents an event as stored.
type Record struct {
	Fingerprint, Source, Level, Message string
	Result
	ResultFence int64 // the fence the result was recorded at; 0 when none
}

// Log represents the de-duplicated events of one database. It is safe for
// concurrent use.
type Log struct {
	db     *racefree.DB
	claims *claim.Store
	q      query.Set
}

// New returns the Log of db. It does no I/O.
func New(db *racefree.DB) *Log {
	return &Log{db: db, claims: claim.NewNamespace(db, Namespace), q: query.MustLoad(sqlFiles, "sql", db.Engine())}
}

// Observe records one occurrence of ev and tells whether this observer won
// the window (0: DefaultWindow). Counting, election and the event row are
// written together: in exec when exec is the caller's transaction (they
// then commit or roll back with it), in a transaction of their own when
// exec is the *racefree.DB (a bare *sql.DB would run the two statements
// apart on SQLite). Every occurrence counts, won or not. The event belongs
// to the tenant ctx names ([tenant.From]): another tenant's occurrences of
// the same fingerprint are counted and elected apart. In a transaction of
// its own, an error matching the context's error and not
// [racefree.ErrUnavailable] means nothing was counted (the ctx ended
// before the commit was sent); a ctx that ends while the commit is in
// flight, and a commit whose reply was lost, return an error matching
// [racefree.ErrUnavailable] ([racefree.DB.InTx]), and the occurrence may
// have been counted (once).
//
// With [racefree.Config.Combine] on (the default) and exec the pool, Observe sends its
// statements (the claim's acquire, on PostgreSQL its raise_new, then the
// event's insert) as one operation in a batch with the concurrent pool
// calls of the same tenant ([racefree.Config.Combine]; on PostgreSQL,
// other observes): one transaction and one commit for the batch, and the
// outcome Observe has alone. On PostgreSQL a batch of two or more observes
// runs as one statement per form over arrays (acquire_many,
// raise_new_many, insert_event_many). The operation's key is the claim's,
// so an Observe, the claim calls on its fingerprint and its other
// Observes run in the order they came, each on the state the one before
// it left: on SQLite one after the other, in one batch or several, on
// PostgreSQL never in one batch. Observe returns after its
// batch committed; a call whose context ends while it waits for a batch
// returns the context's error and never ran, and one whose batch failed as
// a whole, known to have committed nothing, runs alone, as with the
// combiner off. One whose batch's commit got no answer (a connection lost
// once it was sent) may have been counted: it returns an error matching
// [racefree.ErrUnavailable], as an Observe alone does then, and never runs
// again by itself.
func (l *Log) Observe(ctx context.Context, exec racefree.Executor, ev Event, window time.Duration) (*Observation, error) {
	if window == 0 {
		window = DefaultWindow
	}
	if window < claim.MinTTL || window > claim.MaxTTL {
		return nil, racefree.Invalid("window", "must be between %v and %v, got %v", claim.MinTTL, claim.MaxTTL, window)
	}
	if err := ev.validate(); err != nil {
		return nil, err
	}
	if ev.Fingerprint == "" {
		ev.Fingerprint = Fingerprint(ev.Source, ev.Level, ev.Message)
	}
	observer := claim.NewHolder()
	if obs, ran, err := l.observeCombined(ctx, exec, ev, observer, window); ran {
		if err != nil {
			return nil, fmt.Errorf("dedup observe: %w", err)
		}
		return obs, nil
	}
	var obs *Observation
	err := l.inTx(ctx, exec, func(ctx context.Context, tx racefree.Executor) error {
		c, err := l.claims.Acquire(ctx, tx, ev.Fingerprint, observer, window)
		var held *claim.HeldError
		switch {
		case errors.As(err, &held):
			c = &held.Claim
		case err != nil:
			return err
		}
		if _, err := tx.ExecContext(ctx, l.q.Get("insert_event"), tenant.From(ctx), ev.Fingerprint, ev.Source, ev.Level, ev.Message); err != nil {
			return wire.Of(l.db).InterpretError(err)
		}
		obs = observation(ev.Fingerprint, observer, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dedup observe: %w", err)
	}
	return obs, nil
}

// observeCombined runs Observe's statements as one operation of the
// combiner ([send.Do]): the claim's Acquisition, then insert_event,
// under the claim's key. It reports false, having run nothing, when the
// combiner is off, exec is not the pool, the tenant is not yet registered,
// or the batch failed as a whole and committed nothing: Observe then runs
// as it does alone.
func (l *Log) observeCombined(ctx context.Context, exec racefree.Executor, ev Event, observer string, window time.Duration) (*Observation, bool, error) {
	if !wire.Of(l.db).Combining() {
		return nil, false, nil
	}
	a, err := l.claims.Acquisition(ctx, ev.Fingerprint, observer, window)
	if err != nil {
		return nil, true, err
	}
	insert := &wire.Statement{Query: l.q.Get("insert_event"),
		Args: []any{tenant.From(ctx), ev.Fingerprint, ev.Source, ev.Level, ev.Message}}
	if wire.Of(l.db).CanPipeline() {
		insert.Many = l.q.Get("insert_event_many")
	}
	way, err := send.Do(ctx, l.db, exec, &send.Op{Key: a.Key, Stmts: append(a.Stmts, insert)})
	if way == send.NotSent || err != nil {
		return nil, way != send.NotSent, err
	}
	c, err := a.Result()
	var held *claim.HeldError
	if errors.As(err, &held) {
		c = &held.Claim
	}
	return observation(ev.Fingerprint, observer, c), true, nil
}

// observation is what Observe tells observer, from the claim its acquire
// returned: it processes when the claim is its own.
func observation(fingerprint, observer string, c *claim.Claim) *Observation {
	return &Observation{Fingerprint: fingerprint, Process: c.Holder == observer, Fence: c.Fence,
		Count: c.Count, FirstSeen: c.FirstSeen, LastSeen: c.LastSeen}
}

// inTx runs fn in exec when exec is the caller's transaction or
// connection, and in a transaction of its own when exec is the DB; either
// way for the tenant ctx names (on PostgreSQL the transaction's tenant is
// set).
func (l *Log) inTx(ctx context.Context, exec racefree.Executor, fn func(ctx context.Context, tx racefree.Executor) error) error {
	if _, ok := exec.(*racefree.DB); ok {
		return tenant.InTx(ctx, l.db, tenant.From(ctx), func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx) })
	}
	return send.Run(ctx, l.db, exec, func(exec racefree.Executor) error { return fn(ctx, exec) })
}

// Record writes the downstream result of fingerprint, only while fence is
// its current fence, in exec (the caller's transaction may carry it). It
// returns an error that errors.As finds a *claim.StaleFenceError in
// (matching [racefree.ErrStaleFence]) when a later
// window was won since, an error matching [racefree.ErrNotHeld] when fence is
// ahead of the current fence (it was never issued), an error matching
// [racefree.ErrNotFound] for an unknown (or reaped) fingerprint, and an
// *racefree.InputError for a fence below 1. Recording again at the same
// fence overwrites the result. Only the event of the tenant ctx names is
// written. Given the pool, Record is one statement that commits by
// itself: on PostgreSQL a ctx that ends once it was sent, or a commit
// whose reply is lost, returns an error matching [racefree.ErrUnavailable],
// and the result may have been recorded; recording again at the same
// fence settles it.
func (l *Log) Record(ctx context.Context, exec racefree.Executor, fingerprint string, fence int64, r Result) error {
	if err := racefree.CheckText("fingerprint", fingerprint, claim.MaxKeyBytes); err != nil {
		return err
	}
	if err := claim.ValidateFence(fence); err != nil {
		return err
	}
	if err := checkResult(r); err != nil {
		return err
	}
	n, err := send.Exec(ctx, l.db, exec, l.q.Get("record"), tenant.From(ctx), fingerprint, fence, r.Classification, r.ExternalID, Namespace, wire.Of(l.db).ClockArg())
	if err != nil {
		return fmt.Errorf("dedup record: %w", err)
	}
	if n == 1 {
		return nil
	}
	// The statement decided; this read only tells the caller why.
	c, err := l.claims.Get(ctx, exec, fingerprint)
	switch {
	case errors.Is(err, racefree.ErrNotFound):
		return fmt.Errorf("dedup record %q: %w", fingerprint, err)
	case err != nil:
		return fmt.Errorf("dedup record: %w", err)
	case c.Fence > fence:
		return &staleFenceError{&claim.StaleFenceError{Key: fingerprint, Fence: fence, Current: c.Fence}}
	case c.Fence < fence:
		return fmt.Errorf("dedup record %q: %w: fence %d is ahead of the current fence %d and was never issued", fingerprint, racefree.ErrNotHeld, fence, c.Fence)
	}
	return fmt.Errorf("dedup record %q: %w: no event row", fingerprint, racefree.ErrNotFound)
}

// staleFenceError is Record's refusal of a fence a later window replaced:
// its message names the event, not a claim, and it unwraps to the claim's
// *claim.StaleFenceError (which errors.As finds, and which matches
// [racefree.ErrStaleFence]).
type staleFenceError struct{ stale *claim.StaleFenceError }

func (e *staleFenceError) Error() string {
	return fmt.Sprintf("dedup record %q: fence %d is stale: a later window was won, its fence is %d", e.stale.Key, e.stale.Fence, e.stale.Current)
}

func (e *staleFenceError) Unwrap() error { return e.stale }

// Get returns the stored event of the tenant ctx names, read through exec,
// or an error matching [racefree.ErrNotFound].
func (l *Log) Get(ctx context.Context, exec racefree.Executor, fingerprint string) (*Record, error) {
	if err := racefree.CheckText("fingerprint", fingerprint, claim.MaxKeyBytes); err != nil {
		return nil, err
	}
	r := Record{Fingerprint: fingerprint}
	var class, ext sql.NullString
	var fence sql.NullInt64
	err := send.ReadRow(ctx, l.db, exec, l.q.Get("get"), []any{tenant.From(ctx), fingerprint},
		&r.Source, &r.Level, &r.Message, &class, &ext, &fence)
	if err != nil {
		return nil, fmt.Errorf("dedup get %q: %w", fingerprint, err)
	}
	r.Classification, r.ExternalID, r.ResultFence = class.String, ext.String, fence.Int64
	return &r, nil
}

// Reap forgets the fingerprints whose window lapsed at least grace ago, in
// every tenant: their claims and their event rows (with the recorded
// result) go in the same transaction, batch fingerprints at a time (0:
// 1000), one tenant at a time ([tenant.Each]), until none is left or ctx
// ends. It returns how many fingerprints it forgot. A fingerprint observed
// again after Reap starts a new event row, with a fence above every fence
// the namespace had in its tenant (see [claim.Store.Reap]). A fingerprint
// whose claim a concurrent Observe holds locked is kept. On SQLite Reap
// waits after each full batch as long as the batch took, so that writers
// get the write lock in between. Before migration 011 it deletes nothing
// and returns an error matching [racefree.ErrSchemaOutdated].
func (l *Log) Reap(ctx context.Context, grace time.Duration, batch int) (int64, error) {
	if grace < 0 {
		return 0, racefree.Invalid("grace", "must not be negative")
	}
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	err := reaper.EachTenant(ctx, l.db, func(ctx context.Context) error {
		n, err := reaper.Run(ctx, l.db.Engine(), batch, func() (int64, error) {
			var n int
			err := tenant.InTx(ctx, l.db, tenant.From(ctx), func(ctx context.Context, tx *sql.Tx) error {
				n = 0
				keys, err := l.claims.ReapBatch(ctx, tx, grace, batch)
				if err != nil || len(keys) == 0 {
					return err
				}
				list, err := json.Marshal(keys)
				if err != nil {
					return err
				}
				if _, err = tx.ExecContext(ctx, l.q.Get("reap_events"), tenant.From(ctx), string(list)); err != nil {
					return wire.Of(l.db).InterpretError(err)
				}
				n = len(keys)
				return nil
			})
			return int64(n), err
		})
		total += n
		return err
	})
	if err != nil {
		return total, fmt.Errorf("dedup reap: %w", err)
	}
	return total, nil
}

var (
	uuids   = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	hexes   = regexp.MustCompile(`(?i)\b(0x)?[0-9a-f]*[0-9][0-9a-f]*\b`)
	numbers = regexp.MustCompile(`\d+`)
)

// Normalise returns message with what varies between occurrences of one
// event — UUIDs, hexadecimal IDs, numbers, runs of white space, letter
// case — folded, so that "timeout after 3012ms on 10.0.0.5" and "Timeout
// after 15ms on 10.0.0.7" share a fingerprint.
func Normalise(message string) string {
	s := uuids.ReplaceAllString(message, "<id>")
	s = hexes.ReplaceAllStringFunc(s, func(m string) string {
		if len(m) >= 8 {
			return "<id>"
		}
		return m
	})
	s = numbers.ReplaceAllString(s, "<n>")
	return strings.ToLower(strings.Join(strings.Fields(s), " "))
}

// Fingerprint derives an event's fingerprint from its source, its level and
// its normalised message: the hex SHA-256 of the three, 32 characters.
func Fingerprint(source, level, message string) string {
	h := sha256.Sum256([]byte(source + "\x00" + level + "\x00" + Normalise(message)))
	return hex.EncodeToString(h[:16])
}

func (ev Event) validate() error {
	if err := racefree.CheckText("source", ev.Source, MaxSourceBytes); err != nil {
		return err
	}
	if err := racefree.CheckText("level", ev.Level, MaxLevelBytes); err != nil {
		return err
	}
	if err := racefree.CheckText("message", ev.Message, MaxMessageBytes); err != nil {
		return err
	}
	if ev.Fingerprint != "" {
		return racefree.CheckText("fingerprint", ev.Fingerprint, claim.MaxKeyBytes)
	}
	return nil
}

// checkResult accepts empty fields; text given must be UTF-8 without a NUL
// byte, at most MaxResultBytes each.
func checkResult(r Result) error {
	for _, f := range []struct{ name, v string }{{"classification", r.Classification}, {"external_id", r.ExternalID}} {
		if f.v == "" {
			continue
		}
		if err := racefree.CheckText(f.name, f.v, MaxResultBytes); err != nil {
			return err
		}
	}
	return nil
}
