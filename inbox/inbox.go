package inbox

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/reaper"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

//go:embed sql
var queries embed.FS

// Defaults of Options.
const (
	DefaultRetention = 7 * 24 * time.Hour
	DefaultReapBatch = 1000
)

// Limits on input, checked before anything is written.
const (
	MaxSourceLen  = 200  // bytes in a source name
	MaxEventIDLen = 255  // bytes in an event ID
	maxReasonLen  = 1024 // bytes of a permanent failure's reason kept
)

// Options configures an Inbox. A nil *Options means all defaults.
type Options struct {
	// Retention is how long an event ID is kept, and so how long a
	// redelivery of it is recognised as a duplicate. Set it to at least the
	// sender's retry horizon. Defaults to DefaultRetention, 7 days; New
	// takes 1 ms to 10 years (counted in whole milliseconds).
	Retention time.Duration
	// ReapBatch bounds the rows one DELETE of Reap removes. Defaults to
	// DefaultReapBatch, 1000; New takes 1 to 100,000.
	ReapBatch int
}

// Inbox represents the received events of one database. It is safe for
// concurrent use and holds no state besides its configuration, so any
// number of Inboxes, in any number of processes, may share a database.
type Inbox struct {
	db        *racefree.DB
	q         query.Set
	retention time.Duration
	reapBatch int
}

// New returns an Inbox over db. It does no I/O. It rejects options out of
// range with [racefree.ErrInvalidInput].
func New(db *racefree.DB, opts *Options) (*Inbox, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case o.Retention == 0:
		o.Retention = DefaultRetention
	case o.Retention < time.Millisecond || o.Retention > 10*365*24*time.Hour:
		return nil, racefree.Invalid("Retention", "must be between 1ms and 10 years, got %s", o.Retention)
	}
	switch {
	case o.ReapBatch == 0:
		o.ReapBatch = DefaultReapBatch
	case o.ReapBatch < 0 || o.ReapBatch > 100_000:
		return nil, racefree.Invalid("ReapBatch", "must be between 1 and 100000, got %d", o.ReapBatch)
	}
	return &Inbox{db: db, q: query.MustLoad(queries, "sql", db.Engine()), retention: o.Retention, reapBatch: o.ReapBatch}, nil
}

// Result says what Receive did with a delivery. The zero Result is a
// delivery processed for the first time.
type Result struct {
	// Duplicate reports that the event ID was already recorded, processed or
	// permanently failed, by an earlier delivery; fn was not called.
	Duplicate bool
	// Failed reports that fn failed permanently on this delivery and the
	// failure was recorded: redeliveries are duplicates from now on.
	Failed bool
	// Reason is the permanent failure's message, when Failed: at most
	// its first 1024 bytes, cut before a character the limit would split,
	// with NUL bytes dropped and bytes that are not UTF-8 replaced by
	// U+FFFD, as it is stored.
	Reason string
	// Seq is the event's arrival number within its source (the cursor of
	// List), when it was recorded by this delivery.
	Seq int64
}

// Receive records the delivery of event eventID from source, for ctx's
// tenant ([tenant.From]), and, when the event is new, calls fn in the same
// transaction, which on PostgreSQL belongs to that tenant.
//
// The event ID is inserted under a UNIQUE (tenant, source, event ID)
// constraint before fn runs, in fn's transaction, so that:
//
//   - A delivery of an ID already recorded returns Result{Duplicate: true}
//     without calling fn. A concurrent delivery of the same ID waits for the
//     first one's transaction and then counts as a duplicate if it
//     committed. On PostgreSQL with synchronous_standby_names set, the
//     duplicate's transaction locks the recorded event FOR KEY SHARE, so
//     its COMMIT, and the answer, wait until the synchronous standby has
//     the event: the first delivery's commit may be on the primary alone
//     (its wait for the standby cancelled), and "duplicate" then tells
//     the sender to stop sending an event a failover would lose.
//   - When fn returns an error, its writes and the record roll back
//     together, so the next delivery processes the event again.
//
// Failures are classified asymmetrically: an error from fn is transient
// (Receive returns it, and the sender should retry: answer 5xx) unless fn
// marked it with Permanent. A permanent failure is recorded with status
// "failed" and its reason in a transaction of its own, after fn's
// transaction rolled back, and Receive returns Result{Failed: true} and a
// nil error: acknowledge it (2xx) so that the sender stops retrying.
//
// In short, a nil error means "acknowledge", a non-nil one "have it sent
// again". fn must confine its effects to tx: like [racefree.DB.InTx], Receive
// runs it again when the engine aborts the transaction for a transient
// conflict. fn may be nil, to only record the event. payload is stored as
// it is (it may be nil) for List.
//
// With [racefree.Config.Combine] on (the default), a delivery with a nil fn records its
// event in a batch with the concurrent deliveries of the same tenant
// ([wire.DB].Combine): one transaction and one commit for the batch,
// and the outcome the delivery gets alone. A new event gets its source's
// next arrival number, the batch's events of one source numbered in the
// order of their IDs; a recorded one is a duplicate. Of two deliveries of
// one event the later runs after the earlier, as its duplicate: on SQLite
// right after it in the same batch, on PostgreSQL in a later batch. A delivery whose context ends while it
// waits for a batch returns the context's error and recorded nothing;
// once its batch began, it returns the batch's outcome. A batch that
// failed as a whole, known to have committed nothing, runs each delivery
// alone. A batch whose commit got no answer (a connection lost once it was
// sent) may have recorded its events: each of its deliveries returns an
// error matching [racefree.ErrUnavailable], as a delivery alone does then,
// and none runs again by itself; the sender's redelivery settles it (a
// duplicate if it was recorded). A delivery with fn never goes through
// the combiner.
func (in *Inbox) Receive(ctx context.Context, source, eventID string, payload []byte, fn func(tx *sql.Tx) error) (Result, error) {
	if err := validate(source, eventID); err != nil {
		return Result{}, err
	}
	if fn == nil {
		if res, combined, err := in.record(ctx, source, eventID, payload); combined {
			return res, err
		}
	}
	var res Result
	err := in.inTx(ctx, func(tx *sql.Tx) error {
		res = Result{}
		var id int64
		err := tx.QueryRowContext(ctx, in.q.Get("receive"), tenant.From(ctx), source, eventID, payload, wire.Of(in.db).ClockArg(), in.retention.Milliseconds()).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			res.Duplicate = true
			return in.durable(ctx, tx, source, eventID)
		}
		if err != nil {
			return fmt.Errorf("record event: %w", err)
		}
		if fn != nil {
			if err := fn(tx); err != nil {
				return err
			}
		}
		res.Seq, err = in.assignSeq(ctx, tx, source, id)
		return err
	})
	if err == nil {
		return res, nil
	}
	if !IsPermanent(err) {
		return Result{}, fmt.Errorf("inbox: receive %s/%s: %w", source, eventID, err)
	}
	return in.recordFailure(ctx, source, eventID, payload, reasonOf(err))
}

// record records the event of a delivery without a processing function
// in a batch with concurrent deliveries of the same tenant
// ([send.Do]), when [racefree.Config.Combine] is on; it reports false,
// having done nothing, when the delivery is to be received alone.
//
// Its statements record the event and number it with no value passed
// between them in Go. On PostgreSQL receive inserts the event unnumbered
// and number gives it the source's next number from the counter row,
// which stays locked until the batch commits, as assignSeq does; a batch
// of two or more deliveries runs each as one statement over arrays
// (receive_many, number_many), which numbers the batch's events of one
// source together, in the batch's order. On SQLite, whose batch runs the
// statements of its deliveries one after the other in one write
// transaction, record inserts the event with the number after the
// counter and number advances the counter to it. A duplicate inserts
// nothing and numbers nothing: number returns no row. On PostgreSQL a
// third statement, durable (durable_many), locks the recorded event FOR
// KEY SHARE while synchronous_standby_names is set, so that a batch that
// answers "duplicate" commits only once the synchronous standby has the
// event (see Receive).
//
// The key names the event, not only its source: of two deliveries of one
// event the later runs after the earlier and is its duplicate (on
// PostgreSQL in a later batch: a batch holds each key once), while events
// of one source (most users have one) are numbered in one batch.
func (in *Inbox) record(ctx context.Context, source, eventID string, payload []byte) (Result, bool, error) {
	id := tenant.From(ctx)
	var seq int64
	args := []any{id, source, eventID, payload, wire.Of(in.db).ClockArg(), in.retention.Milliseconds()}
	number := &wire.Statement{Query: in.q.Get("number"), Args: []any{id, source, eventID}, Dest: []any{&seq}}
	var stmts []*wire.Statement
	if wire.Of(in.db).CanPipeline() {
		stmts = []*wire.Statement{
			{Query: in.q.Get("receive"), Many: in.q.Get("receive_many"), Args: args},
			number,
			{Query: in.q.Get("durable"), Many: in.q.Get("durable_many"), Args: []any{id, source, eventID}},
		}
		number.Many = in.q.Get("number_many")
	} else {
		stmts = []*wire.Statement{{Query: in.q.Get("record"), Args: args}, number}
	}
	way, err := send.Do(ctx, in.db, in.db, &send.Op{Key: combineKey(source, eventID), Stmts: stmts})
	switch {
	case way == send.NotSent:
		return Result{}, false, nil
	case errors.Is(err, racefree.ErrNotFound):
		return Result{Duplicate: true}, true, nil
	case err != nil:
		return Result{}, true, fmt.Errorf("inbox: receive %s/%s: %w", source, eventID, err)
	}
	return Result{Seq: seq}, true, nil
}

// durable makes a transaction that answers "duplicate" about
// (source, eventID) commit only once a synchronous standby has the event,
// on PostgreSQL while synchronous_standby_names is set (durable.sql: it
// locks the event's row FOR KEY SHARE); elsewhere it does nothing.
func (in *Inbox) durable(ctx context.Context, tx *sql.Tx, source, eventID string) error {
	if in.db.Engine() != racefree.Postgres {
		return nil
	}
	rows, err := tx.QueryContext(ctx, in.q.Get("durable"), tenant.From(ctx), source, eventID)
	if err != nil {
		return fmt.Errorf("lock the recorded event: %w", wire.Of(in.db).InterpretError(err))
	}
	return rows.Close()
}

// combineKey names what a delivery writes to the combiner
// ([send.Op.Key], whose group is the tenant): the event's row. Neither
// a source nor an event ID holds a NUL byte (validate).
func combineKey(source, eventID string) string {
	return "inbox\x00" + source + "\x00" + eventID
}

// inTx runs fn in a transaction of its own (IMMEDIATE on SQLite) that
// belongs to ctx's tenant.
func (in *Inbox) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return in.db.InTx(ctx, func(tx *sql.Tx) error {
		return send.Run(ctx, in.db, tx, func(racefree.Executor) error { return fn(tx) })
	})
}

// recordFailure records a permanent failure in a transaction of its own.
func (in *Inbox) recordFailure(ctx context.Context, source, eventID string, payload []byte, reason string) (Result, error) {
	var res Result
	err := in.inTx(ctx, func(tx *sql.Tx) error {
		res = Result{Failed: true, Reason: reason}
		var id int64
		err := tx.QueryRowContext(ctx, in.q.Get("record_failure"), tenant.From(ctx), source, eventID, payload, wire.Of(in.db).ClockArg(), in.retention.Milliseconds(), reason).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			// Another delivery recorded the event since fn's transaction
			// rolled back: this one is a duplicate of it.
			res = Result{Duplicate: true}
			return in.durable(ctx, tx, source, eventID)
		}
		if err != nil {
			return fmt.Errorf("record failure: %w", err)
		}
		res.Seq, err = in.assignSeq(ctx, tx, source, id)
		return err
	})
	if err != nil {
		return Result{}, fmt.Errorf("inbox: receive %s/%s: %w", source, eventID, err)
	}
	return res, nil
}

// assignSeq numbers the event row id within source of ctx's tenant. It
// runs last in the transaction: on PostgreSQL the source's counter row
// stays locked until commit, so that arrival numbers become visible in
// order.
func (in *Inbox) assignSeq(ctx context.Context, tx *sql.Tx, source string, id int64) (int64, error) {
	var seq int64
	if err := tx.QueryRowContext(ctx, in.q.Get("next_seq"), tenant.From(ctx), source).Scan(&seq); err != nil {
		return 0, fmt.Errorf("next arrival number: %w", err)
	}
	if _, err := tx.ExecContext(ctx, in.q.Get("set_seq"), tenant.From(ctx), id, seq); err != nil {
		return 0, fmt.Errorf("set arrival number: %w", err)
	}
	return seq, nil
}

// Event represents a recorded event.
type Event struct {
	Seq        int64     // arrival number within the source, from 1
	ID         string    // the sender's event ID
	Status     string    // StatusProcessed or StatusFailed
	Reason     string    // why it failed permanently; empty when processed
	Payload    []byte    // as received
	ReceivedAt time.Time // when it was recorded, UTC, millisecond precision
}

// Event statuses.
const (
	StatusProcessed = "processed"
	StatusFailed    = "failed"
)

// MaxListLimit bounds the limit of List.
const MaxListLimit = 1000

// MaxListBytes bounds the payload bytes of one page of List, 4 MiB.
const MaxListBytes = 4 << 20

// List returns up to limit events of source, of ctx's tenant, with an
// arrival number greater than after, in arrival order. Pass 0 to start at the beginning, then the
// Seq of the last event returned. Arrival numbers become visible in order
// (a later number never commits before an earlier one), so paging with
// after never skips an event; reaped events are gone.
//
// A page is bounded by bytes as well as by count: it holds at most
// MaxListBytes of payload, or a single event when that one alone is
// larger, so a page always makes progress. Fewer than limit events
// therefore does not mean the end: keep paging until a page is empty.
func (in *Inbox) List(ctx context.Context, source string, after int64, limit int) ([]Event, error) {
	if err := validate(source, "x"); err != nil {
		return nil, err
	}
	if after < 0 {
		return nil, racefree.Invalid("after", "must not be negative")
	}
	if limit < 1 || limit > MaxListLimit {
		return nil, racefree.Invalid("limit", "must be between 1 and %d, got %d", MaxListLimit, limit)
	}
	var out []Event
	err := send.Read(ctx, in.db, in.db, func(exec racefree.Executor) error {
		out = nil
		rows, err := exec.QueryContext(ctx, in.q.Get("list"), tenant.From(ctx), source, after, limit, MaxListBytes)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				e      Event
				reason sql.NullString
				at     int64
			)
			if err := rows.Scan(&e.Seq, &e.ID, &e.Status, &reason, &e.Payload, &at); err != nil {
				return err
			}
			e.Reason, e.ReceivedAt = reason.String, racefree.FromMillis(at)
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: list %s: %w", source, wire.Of(in.db).InterpretError(err))
	}
	return out, nil
}

// Reap deletes the events whose retention has passed, in batches of at most
// Options.ReapBatch rows each in its own statement, so that it never holds
// locks for long. It returns how many it deleted. A redelivery of a reaped
// event is processed again, which is why Retention must cover the sender's
// retry horizon. Run it periodically (racefree serve does, every minute);
// several processes may run it at once.
//
// Reap runs its statements on exec. Pass the pool (the *racefree.DB) to reap
// every tenant, one at a time ([tenant.Each]), each batch committing on its
// own (on PostgreSQL in a short transaction set to its tenant); or the
// caller's *sql.Tx to reap ctx's tenant only, as part of the caller's
// transaction (its locks are then held until the caller commits; on
// PostgreSQL the transaction must belong to that tenant, see [send.Run]).
// On PostgreSQL a batch skips the rows that another transaction has locked
// rather than wait for them; the next run takes them. On SQLite, which has
// one writer at a time, Reap on the pool pauses after each full batch for
// as long as the batch took, so that writers get the lock in between.
func (in *Inbox) Reap(ctx context.Context, exec racefree.Executor) (int64, error) {
	if _, ok := exec.(*sql.Tx); ok {
		// The caller's transaction keeps its lock between batches: pausing
		// would only hold it longer.
		total, err := in.reapTenant(ctx, "", exec)
		if err != nil {
			return total, fmt.Errorf("inbox: reap: %w", err)
		}
		return total, nil
	}
	var total int64
	err := reaper.EachTenant(ctx, in.db, func(ctx context.Context) error {
		n, err := in.reapTenant(ctx, in.db.Engine(), exec)
		total += n
		return err
	})
	if err != nil {
		return total, fmt.Errorf("inbox: reap: %w", err)
	}
	return total, nil
}

// reapTenant deletes the expired events of ctx's tenant in batches, each
// in [send.Run] on exec; engine is the engine to pause for between
// batches, or "" for none.
func (in *Inbox) reapTenant(ctx context.Context, engine string, exec racefree.Executor) (int64, error) {
	id := tenant.From(ctx)
	return reaper.Run(ctx, engine, in.reapBatch, func() (int64, error) {
		var n int64
		err := send.Run(ctx, in.db, exec, func(exec racefree.Executor) error {
			res, err := exec.ExecContext(ctx, in.q.Get("reap"), id, wire.Of(in.db).ClockArg(), in.reapBatch)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		return n, wire.Of(in.db).InterpretError(err)
	})
}

func validate(source, eventID string) error {
	if err := racefree.CheckText("source", source, MaxSourceLen); err != nil {
		return err
	}
	return racefree.CheckText("event ID", eventID, MaxEventIDLen)
}

// reasonOf returns the message of a permanent failure, as TEXT both engines
// accept, truncated to maxReasonLen bytes.
func reasonOf(err error) string {
	var p *PermanentError
	if errors.As(err, &p) {
		err = p.Err
	}
	s := strings.ReplaceAll(strings.ToValidUTF8(err.Error(), "\uFFFD"), "\x00", "")
	if len(s) > maxReasonLen {
		s = strings.ToValidUTF8(s[:maxReasonLen], "")
	}
	return s
}
