package outbox

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/schema"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

//go:embed sql
var sqlFiles embed.FS

var queries = map[string]query.Set{
	racefree.SQLite:   query.MustLoad(sqlFiles, "sql", racefree.SQLite),
	racefree.Postgres: query.MustLoad(sqlFiles, "sql", racefree.Postgres),
}

// SchemaVersion is the migration that creates the outbox's tables. Every
// operation before it is ErrSchemaOutdated.
const SchemaVersion = 13

// Limits on input. Anything outside them is an *racefree.InputError that
// writes nothing.
const (
	MaxTopicBytes      = 256
	MaxKeyBytes        = 512
	MaxPayloadBytes    = 1 << 20
	MaxHeaders         = 64
	MaxHeaderBytes     = 16 << 10 // names and values together
	MaxAttemptsLimit   = 1000
	DefaultMaxAttempts = 25
	MaxDelay           = 366 * 24 * time.Hour
	MaxErrorBytes      = 2048 // an attempt's error is kept up to this size
	DefaultHistory     = 20
	DefaultRetention   = 24 * time.Hour
	DefaultReapBatch   = 1000
	MaxReapBatch       = 100_000
	// DefaultNotifyInterval spaces the NOTIFYs of one tenant from one
	// process (Options.NotifyInterval).
	DefaultNotifyInterval = 20 * time.Millisecond
)

// State is a message's state.
type State string

// The states of a message.
const (
	Ready     State = "ready"     // waiting for its time, then for a relay
	Leased    State = "leased"    // a relay holds it (until its lease lapses)
	Delivered State = "delivered" // the handler succeeded; kept for Options.Retention
	Dead      State = "dead"      // a permanent failure, or no attempt left
)

// Message is what Enqueue stores.
type Message struct {
	// Topic names the kind of message; relays can serve a subset of
	// topics. Required, 1 to MaxTopicBytes of UTF-8 without NUL.
	Topic string
	// Key groups messages, e.g. an aggregate's id: with Ordered, the
	// messages of one (topic, key) are delivered one at a time, in order.
	// Optional (up to MaxKeyBytes).
	Key string
	// Payload is handed to the handler as it is (up to MaxPayloadBytes).
	Payload []byte
	// Headers are handed to the handler (the HTTP handler sends them as
	// request headers): names are HTTP tokens, none starting with
	// ReservedHeaderPrefix ("Racefree-", in any case: racefree's own,
	// such as Racefree-Outbox-Tenant), values have no CR, LF or NUL, at
	// most MaxHeaders and MaxHeaderBytes in all.
	Headers map[string]string
	// NotBefore delays the first attempt. It is turned into a delay from
	// the caller's clock (or the configured racefree.Clock) and added to
	// the database clock, so clock skew between instances moves it by the
	// skew, never more. Zero: due at once.
	NotBefore time.Time
	// MaxAttempts bounds the attempts (0: Options.MaxAttempts).
	MaxAttempts int
	// Ordered delivers this message only once every older message of its
	// (topic, key) is delivered or discarded (Options.OrderedTopics sets it
	// for whole topics). Requires a Key.
	Ordered bool
}

// Options configures an Outbox. The zero value is usable.
type Options struct {
	// MaxAttempts is the default attempt budget of a message
	// (DefaultMaxAttempts when 0).
	MaxAttempts int
	// OrderedTopics makes every message of these topics Ordered.
	OrderedTopics []string
	// Classify tells permanent failures from transient ones (Classify, the
	// package function, when nil): when in doubt, retry.
	Classify func(error) Verdict
	// Backoff is the delay before attempt n+1 after the n-th failed
	// (Backoff, the package function, when nil). A RetryAfter verdict
	// overrides it.
	Backoff func(attempt int) time.Duration
	// OnExhausted runs when a message dies, in the transaction that marks
	// it dead (on PostgreSQL it belongs to the message's tenant, and ctx
	// names it): release the application's locks, write a compensation.
	// When it fails, nothing of that transaction is kept, and the message
	// dies again (running OnExhausted again) after a backoff.
	OnExhausted func(ctx context.Context, tx *sql.Tx, d *Delivery, cause error) error
	// NoNotify turns off PostgreSQL's NOTIFY at Enqueue (relays that LISTEN
	// then wait for their poll).
	NoNotify bool
	// NotifyInterval spaces this process's NOTIFYs of one tenant
	// (DefaultNotifyInterval when 0; negative: every Enqueue notifies).
	// PostgreSQL serialises the commits of the transactions that NOTIFY,
	// so one NOTIFY per enqueue halves the throughput of many small
	// transactions. A relay woken by a NOTIFY claims again after
	// RelayOptions.FollowUp, for the messages whose transactions skipped
	// theirs; a message whose transaction commits later than that waits
	// for the relay's poll.
	NotifyInterval time.Duration
	// Retention is how long delivered messages are kept before Reap
	// deletes them (DefaultRetention when 0; at least 1ms).
	Retention time.Duration
	// History is how many failed attempts are kept per message
	// (DefaultHistory when 0).
	History int
	// ReapBatch is how many rows one reap statement deletes
	// (DefaultReapBatch, 1000, when 0; 1 to MaxReapBatch).
	ReapBatch int
	// AncillaryLease is the lease of Ancillary's immediate attempt (30s
	// when 0): if the process dies during it, a relay retries the message
	// once it lapses.
	AncillaryLease time.Duration
}

// Outbox represents the outbox of one database. It is safe for concurrent
// use.
type Outbox struct {
	db      *racefree.DB
	dialect dialect
	q       query.Set
	opts    Options
	ordered map[string]bool
	hub     *hub
}

// New returns the outbox of db. It does no I/O.
func New(db *racefree.DB, opts *Options) (*Outbox, error) {
	o := &Outbox{db: db, dialect: dialects[db.Engine()], q: queries[db.Engine()], ordered: map[string]bool{}, hub: hubOf(db)}
	if opts != nil {
		o.opts = *opts
	}
	p := &o.opts
	switch {
	case p.MaxAttempts == 0:
		p.MaxAttempts = DefaultMaxAttempts
	case p.MaxAttempts < 1 || p.MaxAttempts > MaxAttemptsLimit:
		return nil, racefree.Invalid("MaxAttempts", "must be 1 to %d", MaxAttemptsLimit)
	}
	for _, t := range p.OrderedTopics {
		if err := racefree.CheckText("OrderedTopics", t, MaxTopicBytes); err != nil {
			return nil, err
		}
		o.ordered[t] = true
	}
	if p.Classify == nil {
		p.Classify = Classify
	}
	if p.Backoff == nil {
		p.Backoff = Backoff
	}
	switch {
	case p.Retention == 0:
		p.Retention = DefaultRetention
	case p.Retention < time.Millisecond:
		return nil, racefree.Invalid("Retention", "must be at least 1ms")
	}
	switch {
	case p.History == 0:
		p.History = DefaultHistory
	case p.History < 1 || p.History > MaxAttemptsLimit:
		return nil, racefree.Invalid("History", "must be 1 to %d", MaxAttemptsLimit)
	}
	if p.NotifyInterval == 0 {
		p.NotifyInterval = DefaultNotifyInterval
	}
	switch {
	case p.ReapBatch == 0:
		p.ReapBatch = DefaultReapBatch
	case p.ReapBatch < 1 || p.ReapBatch > MaxReapBatch:
		return nil, racefree.Invalid("ReapBatch", "must be 1 to %d, got %d", MaxReapBatch, p.ReapBatch)
	}
	switch {
	case p.AncillaryLease == 0:
		p.AncillaryLease = 30 * time.Second
	case p.AncillaryLease < MinLease || p.AncillaryLease > MaxLease:
		return nil, racefree.Invalid("AncillaryLease", "must be %s to %s", MinLease, MaxLease)
	}
	return o, nil
}

// DB returns the database the outbox lives in.
func (o *Outbox) DB() *racefree.DB { return o.db }

// Enqueue stores m in exec and returns its id, which is also the
// idempotency key every delivery of it carries. Pass the caller's
// *sql.Tx: the message then exists exactly when the caller's writes
// commit, and a rollback leaves nothing to deliver. The message belongs
// to the tenant ctx names.
//
// Relays learn of it when it commits: on PostgreSQL by NOTIFY (sent with
// the commit, at most one per tenant every Options.NotifyInterval from
// this process, unless Options.NoNotify), and from an in-process signal to
// one relay of the same *racefree.DB that serves the message's tenant and
// topic (on SQLite a relay's claim waits for the write lock the enqueuing
// transaction holds, so it sees the message the moment it commits).
// Otherwise they find it at their next poll.
//
// An ordered message (Message.Ordered or Options.OrderedTopics) first
// waits, on PostgreSQL, for other open transactions enqueueing for the
// same (tenant, topic, key) (a transaction-scoped advisory lock), so that
// its id, and its place in the key's order, follows theirs.
func (o *Outbox) Enqueue(ctx context.Context, exec racefree.Executor, m Message) (int64, error) {
	in, err := o.prepare(m)
	if err != nil {
		return 0, err
	}
	id := tenant.From(ctx)
	// Whether to NOTIFY is chosen once: an attempt that the engine
	// aborts (and InTx runs again) sent no NOTIFY, so it must not count
	// as the tenant's NOTIFY of the interval.
	name := "enqueue"
	if o.dialect.notifies() && !o.opts.NoNotify && o.hub.notifyDue(id, o.opts.NotifyInterval) {
		name = "enqueue_notify"
	}
	var msgID int64
	err = o.run(ctx, exec, func(exec racefree.Executor) error {
		if in.ordered {
			if err := o.dialect.lockKey(ctx, o, exec, id, m.Topic, m.Key); err != nil {
				return err
			}
		}
		return exec.QueryRowContext(ctx, o.q.Get(name), id, m.Topic, m.Key, in.ordered, in.payload, in.headers,
			in.delay.Milliseconds(), in.maxAttempts, wire.Of(o.db).ClockArg()).Scan(&msgID)
	})
	if err != nil {
		return 0, fmt.Errorf("outbox enqueue: %w", wire.Of(o.db).InterpretError(err))
	}
	if _, inTx := exec.(*sql.Tx); !inTx || o.dialect.wakesBeforeCommit() {
		o.hub.wake(id, m.Topic)
	}
	return msgID, nil
}

// prepared is a validated Message, ready to bind.
type prepared struct {
	payload     []byte
	headers     string
	delay       time.Duration
	maxAttempts int
	ordered     bool
}

func (o *Outbox) prepare(m Message) (*prepared, error) {
	if err := racefree.CheckText("topic", m.Topic, MaxTopicBytes); err != nil {
		return nil, err
	}
	if m.Key != "" {
		if err := racefree.CheckText("key", m.Key, MaxKeyBytes); err != nil {
			return nil, err
		}
	}
	if len(m.Payload) > MaxPayloadBytes {
		return nil, racefree.Invalid("payload", "must be at most %d bytes, got %d", MaxPayloadBytes, len(m.Payload))
	}
	headers, err := encodeHeaders(m.Headers)
	if err != nil {
		return nil, err
	}
	p := &prepared{payload: m.Payload, headers: headers, maxAttempts: m.MaxAttempts, ordered: m.Ordered || o.ordered[m.Topic]}
	if p.payload == nil {
		p.payload = []byte{}
	}
	switch {
	case p.maxAttempts == 0:
		p.maxAttempts = o.opts.MaxAttempts
	case p.maxAttempts < 1 || p.maxAttempts > MaxAttemptsLimit:
		return nil, racefree.Invalid("max_attempts", "must be 1 to %d", MaxAttemptsLimit)
	}
	if p.ordered && m.Key == "" {
		return nil, racefree.Invalid("key", "an ordered message needs a key")
	}
	if !m.NotBefore.IsZero() {
		p.delay = m.NotBefore.Sub(o.now())
		if p.delay < 0 {
			p.delay = 0
		}
		if p.delay > MaxDelay {
			return nil, racefree.Invalid("not_before", "must be at most %s ahead", MaxDelay)
		}
	}
	return p, nil
}

func (o *Outbox) now() time.Time {
	if c := o.db.Clock(); c != nil {
		return c.Now()
	}
	return time.Now()
}

// encodeHeaders checks headers and encodes them as a JSON object with
// sorted names.
func encodeHeaders(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	if len(h) > MaxHeaders {
		return "", racefree.Invalid("headers", "at most %d, got %d", MaxHeaders, len(h))
	}
	total := 0
	for k, v := range h {
		if !validHeaderName(k) {
			return "", racefree.Invalid("headers", "%q is not a header name (an HTTP token)", k)
		}
		if reserved(k) {
			return "", racefree.Invalid("headers", "%q: names starting with %q are racefree's own (HTTPHandler sets them)", k, ReservedHeaderPrefix)
		}
		if !utf8.ValidString(v) || strings.ContainsAny(v, "\r\n\x00") {
			return "", racefree.Invalid("headers", "the value of %q must be UTF-8 without CR, LF or NUL", k)
		}
		total += len(k) + len(v)
	}
	if total > MaxHeaderBytes {
		return "", racefree.Invalid("headers", "at most %d bytes in all, got %d", MaxHeaderBytes, total)
	}
	b, err := json.Marshal(h) // maps are encoded with sorted keys
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func validHeaderName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func decodeHeaders(s string) map[string]string {
	h := map[string]string{}
	_ = json.Unmarshal([]byte(s), &h)
	return h
}

// run runs fn, one operation's database work, for the tenant ctx names,
// once the outbox's migration is in place.
func (o *Outbox) run(ctx context.Context, exec racefree.Executor, fn func(racefree.Executor) error) error {
	if err := o.needSchema(ctx, exec); err != nil {
		return err
	}
	return send.Run(ctx, o.db, exec, fn)
}

// needSchema returns a *racefree.SchemaError until the outbox's migration
// is in place.
func (o *Outbox) needSchema(ctx context.Context, exec racefree.Executor) error {
	return schema.Need(ctx, o.db, exec, SchemaVersion)
}

// inTx runs fn in one transaction for the tenant ctx names: exec when it
// is one, or a transaction of its own.
func (o *Outbox) inTx(ctx context.Context, exec racefree.Executor, fn func(racefree.Executor) error) error {
	if tx, ok := exec.(*sql.Tx); ok {
		return o.run(ctx, tx, fn)
	}
	return o.db.InTx(ctx, func(tx *sql.Tx) error { return o.run(ctx, tx, fn) })
}

// forTenant returns ctx naming tenant id (a delivery's own).
func forTenant(ctx context.Context, id string) (context.Context, error) {
	if tenant.From(ctx) == id {
		return ctx, nil
	}
	return tenant.With(ctx, id)
}

// sqliteNow is "now" for the SQLite statements that share one instant:
// the configured clock, or the process clock.
func (o *Outbox) sqliteNow() int64 { return racefree.Millis(o.now()) }

// cleanError makes an error's text storable on both engines: valid UTF-8,
// no NUL byte, at most MaxErrorBytes.
func cleanError(err error) string {
	if err == nil {
		return ""
	}
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) > MaxErrorBytes {
		cut := MaxErrorBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

func sortByID(ds []*Delivery) {
	sort.Slice(ds, func(i, j int) bool { return ds[i].ID < ds[j].ID })
}

var errNoRow = errors.New("no row")
