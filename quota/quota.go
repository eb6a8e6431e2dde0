package quota

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

//go:embed sql
var sqlFiles embed.FS

// Kind names a policy's algorithm.
type Kind string

// The policy kinds.
const (
	// GCRA is the generic cell rate algorithm, equivalent to a token bucket
	// of Burst units that refills continuously at Rate units per Per.
	GCRA Kind = "gcra"
	// FixedWindow admits Rate units per window of Per, the windows aligned
	// on the Unix epoch. Burst is ignored: a window's limit is Rate.
	FixedWindow Kind = "window"
	// SlidingWindow is the sliding-window counter: Rate units per window
	// of Per, the windows aligned on the Unix epoch, where a charge counts
	// the current window's units plus the previous window's, weighted by
	// the part of the previous window that the sliding window [now − Per,
	// now] still overlaps. It assumes the previous window's units were
	// spread evenly across it: then the weighted count is the number of
	// units charged within the last Per, and a charge is admitted only if
	// that stays at most Rate. The guarantees hold whatever the spread:
	// never more than Rate within one aligned window, and within any
	// interval of length Per at most Rate + ⌊Rate × (Per − 2ms) / Per⌋
	// units, fewer than 2 × Rate (reached only when the previous window's
	// units all came in its last millisecond). Burst is ignored;
	// Rate × Per in ms must be at most 2^61. Needs
	// SlidingWindowMigration.
	SlidingWindow Kind = "sliding_window"
)

// OnUnavailable says what Consume decides when the database does not
// answer within Policy.Wait or is unavailable.
type OnUnavailable int

const (
	// FailClosed denies: Consume returns a denying Decision with Degraded
	// set and an error matching racefree.ErrUnavailable. The default.
	// A charge that never reached the database charged nothing; one that
	// was sent and whose reply was lost (a timeout while the statement
	// ran, a connection cut after the commit) may have been charged: the
	// outcome is unknown.
	FailClosed OnUnavailable = iota
	// FailOpen admits: Consume returns an admitting Decision with Degraded
	// set and a nil error. As with FailClosed, a charge whose reply was
	// lost may have been charged; one that never reached the database was
	// not.
	FailOpen
)

// Limits on input, checked before anything is written.
const (
	MaxKeyBytes = 255           // bytes in a key or a consumption key
	MaxUnits    = 1_000_000_000 // largest Rate, Burst and n
	MaxPer      = 366 * 24 * time.Hour
	// MaxRefill bounds a GCRA policy's Burst × ⌈Per/Rate⌉ (in ms): the
	// time an empty bucket takes to fill again, 100 × MaxPer (36,600
	// days). The charge statements compute now + Burst × T and
	// max(tat, now) + n × T in 64-bit integers, and Decision.ResetAfter
	// holds up to Burst × T as a time.Duration: under this bound none of
	// them overflows, on either engine.
	MaxRefill = 100 * MaxPer
)

// Defaults.
const (
	DefaultWait       = time.Second
	DefaultReapBatch  = 1000
	DefaultLedgerKeep = 24 * time.Hour
	// NoWait as Policy.Wait bounds a charge by the caller's context alone.
	NoWait time.Duration = -1
)

// Policy represents one limit. The zero Policy is invalid: set Kind, Rate
// and Per (and Burst for GCRA).
type Policy struct {
	Name  string        // names the policy in RateLimit headers; defaults to "default"
	Kind  Kind          // GCRA, FixedWindow or SlidingWindow
	Rate  int64         // units per Per, 1 to MaxUnits
	Per   time.Duration // 1ms to MaxPer, whole milliseconds; GCRA needs Per/Rate >= 1ms
	Burst int64         // GCRA: the bucket's size, 1 to MaxUnits, with Burst × ⌈Per/Rate⌉ at most MaxRefill; the windows: ignored
	// OnUnavailable says what to decide when the database does not answer
	// within Wait. Defaults to FailClosed.
	OnUnavailable OnUnavailable
	// Wait bounds how long Consume waits for the database. Defaults to
	// DefaultWait, one second. NoWait leaves the bound to the caller's
	// context (its deadline, if any, then decides when the database did
	// not answer). A context that can be cancelled, which Wait makes of
	// the caller's, is watched by database/sql with a goroutine per query:
	// on SQLite, in-process, with the statement prepared, that watch costs
	// about as much CPU as the charge itself, and NoWait on a context
	// that cannot be cancelled saves it. When the caller's deadline comes
	// before Wait, no timer of Wait's is set.
	Wait time.Duration
	// Shadow makes Consume decide and count but never deny: a charge that
	// the limit refuses writes nothing and comes back Allowed with
	// ShadowDenied set. For rolling a limit out.
	Shadow bool
}

// policyName is what a policy's name may hold: it appears in RateLimit
// headers as a structured-field string.
var policyName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// interval returns GCRA's emission interval T in ms: Per/Rate, rounded up,
// so that the long-run rate never exceeds Rate per Per.
func (p Policy) interval() int64 {
	per := p.Per.Milliseconds()
	return (per + p.Rate - 1) / p.Rate
}

// limit returns the most units one key holds at once: Burst for GCRA,
// Rate for a window.
func (p Policy) limit() int64 {
	if p.Kind != GCRA {
		return p.Rate
	}
	return p.Burst
}

// Validate returns an *racefree.InputError when p is not usable: a kind
// other than the three, Rate or Burst outside 1 to MaxUnits, Per outside
// 1ms to MaxPer or not whole milliseconds, a GCRA policy with more than
// one unit per millisecond or whose bucket takes more than MaxRefill to
// fill, a sliding window whose Rate × Per in ms is above 2^61. Within
// these bounds no statement overflows a 64-bit integer on either engine.
func (p Policy) Validate() error {
	switch p.Kind {
	case GCRA, FixedWindow, SlidingWindow:
	default:
		return racefree.Invalid("policy.kind", "must be %q, %q or %q, got %q", GCRA, FixedWindow, SlidingWindow, p.Kind)
	}
	if p.Rate < 1 || p.Rate > MaxUnits {
		return racefree.Invalid("policy.rate", "must be between 1 and %d, got %d", MaxUnits, p.Rate)
	}
	if p.Per < time.Millisecond || p.Per > MaxPer || p.Per%time.Millisecond != 0 {
		return racefree.Invalid("policy.per", "must be whole milliseconds between 1ms and %s, got %s", MaxPer, p.Per)
	}
	if p.Kind == GCRA {
		if p.Burst < 1 || p.Burst > MaxUnits {
			return racefree.Invalid("policy.burst", "must be between 1 and %d, got %d", MaxUnits, p.Burst)
		}
		if p.Per.Milliseconds() < p.Rate {
			return racefree.Invalid("policy.rate", "must be at most one unit per millisecond of per, got %d per %s", p.Rate, p.Per)
		}
		if t := p.interval(); p.Burst > MaxRefill.Milliseconds()/t {
			return racefree.Invalid("policy.burst", "burst × per/rate (%d ms, rounded up) must be at most %d ms (%s) for gcra, got burst %d",
				t, MaxRefill.Milliseconds(), MaxRefill, p.Burst)
		}
	}
	if p.Kind == SlidingWindow && p.Rate > maxSlidingProduct/p.Per.Milliseconds() {
		return racefree.Invalid("policy.rate", "rate × per in ms must be at most 2^61 for a sliding window, got %d per %s", p.Rate, p.Per)
	}
	if p.Wait < 0 && p.Wait != NoWait {
		return racefree.Invalid("policy.wait", "must not be negative, or NoWait")
	}
	if p.OnUnavailable != FailClosed && p.OnUnavailable != FailOpen {
		return racefree.Invalid("policy.on_unavailable", "unknown value %d", p.OnUnavailable)
	}
	if p.Name != "" && !policyName.MatchString(p.Name) {
		return racefree.Invalid("policy.name", "must be 1 to 64 of A-Z, a-z, 0-9, '_', '-', '.', got %q", p.Name)
	}
	return nil
}

// Decision represents the outcome of a charge.
type Decision struct {
	Allowed bool // the units were charged (or, in shadow mode, would have been)
	// Remaining is how many units the key could be charged now, after this
	// decision: never below 0, also when the key's counter holds more than
	// this policy's limit (a limit lowered while the key was counted, or
	// another policy of the same kind charged with a larger one).
	Remaining int64
	// ResetAt is when the key is back to its full limit: the bucket full
	// (GCRA), the window over (FixedWindow), nothing counted any more
	// (SlidingWindow: two windows after the last charge's window began).
	ResetAt time.Time
	// ResetAfter is ResetAt less the clock of the decision: how long until
	// the key is back to its full limit.
	ResetAfter time.Duration
	// RetryAfter is, on a denial, exactly how long until the same charge
	// would be allowed if nothing else is charged meanwhile; 0 when
	// allowed.
	RetryAfter time.Duration
	// ShadowDenied reports that a Shadow policy admitted a charge its limit
	// refused. Nothing was charged.
	ShadowDenied bool
	// Degraded reports that the database did not answer: the decision is
	// the policy's OnUnavailable. The units may have been charged (the
	// charge was sent and its reply lost) or not (it never reached the
	// database): the outcome is unknown, and Remaining and ResetAt say
	// nothing.
	Degraded bool
	// Replayed reports that the consumption key was charged before: the
	// figures are the first charge's, nothing was charged again.
	Replayed bool
}

// Options configures a Limiter. A nil *Options means all defaults.
type Options struct {
	// Scope keeps the counters of one Limiter apart from another's: two
	// Limiters of different scopes never share a counter. It follows the
	// tenant in every key. Defaults to "" (the application's scope).
	Scope string
	// ReapBatch bounds the rows one DELETE of Reap removes. Defaults to
	// DefaultReapBatch, 1000.
	ReapBatch int
	// LedgerKeep is how long a consumption key is remembered, and so how
	// long a replay of it charges nothing. Defaults to DefaultLedgerKeep,
	// 24 hours.
	LedgerKeep time.Duration
}

// Limiter represents the quota counters of one scope, in every tenant:
// each call charges the tenant its context names. It is safe for
// concurrent use and holds no state besides its configuration: any number
// of Limiters, in any number of processes, may share a database.
type Limiter struct {
	db         *racefree.DB
	q          query.Set
	scope      string
	reapBatch  int
	ledgerKeep time.Duration
}

// New returns a Limiter over db. It does no I/O. It rejects options out of
// range with [racefree.ErrInvalidInput].
func New(db *racefree.DB, opts *Options) (*Limiter, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Scope != "" {
		if err := racefree.CheckText("Scope", o.Scope, MaxKeyBytes); err != nil {
			return nil, err
		}
	}
	switch {
	case o.ReapBatch == 0:
		o.ReapBatch = DefaultReapBatch
	case o.ReapBatch < 0 || o.ReapBatch > 100_000:
		return nil, racefree.Invalid("ReapBatch", "must be between 1 and 100000, got %d", o.ReapBatch)
	}
	switch {
	case o.LedgerKeep == 0:
		o.LedgerKeep = DefaultLedgerKeep
	case o.LedgerKeep < time.Millisecond || o.LedgerKeep > 10*365*24*time.Hour:
		return nil, racefree.Invalid("LedgerKeep", "must be between 1ms and 10 years, got %s", o.LedgerKeep)
	}
	return &Limiter{db: db, q: query.MustLoad(sqlFiles, "sql", db.Engine()), scope: o.Scope,
		reapBatch: o.ReapBatch, ledgerKeep: o.LedgerKeep}, nil
}

func (l *Limiter) check(key string, n int64, p Policy) error {
	if err := racefree.CheckText("key", key, MaxKeyBytes); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	if n < 1 || n > p.limit() {
		return racefree.Invalid("n", "must be between 1 and the policy's limit %d, got %d", p.limit(), n)
	}
	return nil
}

// Consume charges n units to key under policy p and returns the decision.
//
// The decision and the charge are one statement (INSERT … ON CONFLICT DO
// UPDATE … WHERE <there is room> RETURNING), so concurrent charges of one
// key, from any number of goroutines and processes, never admit more than
// the limit: at a limit of 50, exactly 50 of 200 concurrent charges are
// allowed. A denial writes nothing and returns the exact RetryAfter: on
// PostgreSQL the same statement reads the counter it refused on (one round
// trip), on SQLite a second statement reads it.
//
// n must be between 1 and the policy's limit (Burst for GCRA, Rate for a
// fixed or sliding window): a charge that could never be allowed is an
// *racefree.InputError, like an invalid key or policy, and writes
// nothing. The counters of one key under policies of different kinds are
// separate counters.
//
// exec may be the caller's transaction: the charge then commits or rolls
// back with it, and holds the key's row lock (PostgreSQL) or the write lock
// (SQLite) until then. When the database does not answer within p.Wait, or
// is unavailable, the decision is p.OnUnavailable's, marked Degraded (on
// PostgreSQL a timeout also aborts the caller's transaction).
//
// With [racefree.Config.Combine] on (the default), a GCRA or FixedWindow charge on the
// pool goes in a batch with the concurrent charges of the same tenant
// ([racefree.Config.Combine]): one transaction and one commit for the
// batch, and the same decision as alone. On SQLite the batch runs its
// charges one after the other, charges of one key too, each in the order
// they came and deciding on the counter the one before it left, so that
// a hot key commits many charges at once; a refusal reads the counter it
// was refused on in the batch, right after it, when a later charge of its
// key follows it there, and after the batch otherwise. Charges of one
// size that follow one another there run as one fold
// (consume_gcra_fold.sql, consume_window_fold.sql,
// consume_sliding_fold.sql): one statement admits the first k that fit,
// which is what they decide one after the other, and each caller gets
// its own decision. On PostgreSQL
// a batch holds each key once, and a batch of two or more charges of one
// kind runs as one statement over arrays (consume_gcra_many.sql,
// consume_window_many.sql) that locks the counters in the batch's order
// and hands each caller the row of its own place. Each call returns after
// its batch committed. p.Wait (or, with NoWait, ctx's
// deadline) bounds the call as it does alone: a call whose context ends
// while it waits for a batch charges nothing, and a batch that has not
// committed by the earliest deadline of its charges gives up, commits
// nothing, and each of its charges runs alone, so that a charge past its
// deadline gets p.OnUnavailable's degraded decision. A batch whose commit
// got no answer (a connection lost once it was sent) may have charged:
// each of its charges gets p.OnUnavailable's degraded decision, with
// [racefree.ErrUnavailable] under FailClosed, as a charge alone whose answer
// is lost, and is never charged again by itself. A SlidingWindow
// charge is combined too, as its statement alone in the batch's pipeline
// on PostgreSQL (it has no form over arrays).
func (l *Limiter) Consume(ctx context.Context, exec racefree.Executor, key string, n int64, p Policy) (Decision, error) {
	if err := l.check(key, n, p); err != nil {
		return Decision{}, err
	}
	ctx, cancel := l.bound(ctx, p)
	defer cancel()
	d, combined, err := l.consumeCombined(ctx, exec, key, n, p)
	if !combined {
		err = send.Run(ctx, l.db, exec, func(exec racefree.Executor) (err error) {
			d, err = l.consume(ctx, exec, key, n, p)
			return err
		})
	}
	if err != nil {
		return degraded(p, fmt.Errorf("quota: consume %s: %w", key, err))
	}
	return shadow(p, d), nil
}

// bound returns ctx with the policy's Wait. When ctx's own deadline comes
// first, it already bounds the charge, and bound sets no timer of its own.
func (l *Limiter) bound(ctx context.Context, p Policy) (context.Context, context.CancelFunc) {
	wait := p.Wait
	switch wait {
	case NoWait:
		return ctx, func() {}
	case 0:
		wait = DefaultWait
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= wait {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, wait)
}

// degraded turns a failure into the policy's OnUnavailable decision when
// the database did not answer (a timeout or ErrUnavailable); other errors
// are returned as they are, and so is a caller's cancellation, even one
// that left the charge's outcome unknown (ErrUnavailable as well): a
// caller that gave up gets no decision.
func degraded(p Policy, err error) (Decision, error) {
	if errors.Is(err, context.Canceled) || !errors.Is(err, racefree.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		return Decision{}, err
	}
	if p.OnUnavailable == FailOpen {
		return Decision{Allowed: true, Degraded: true}, nil
	}
	if !errors.Is(err, racefree.ErrUnavailable) {
		err = fmt.Errorf("%w: %w", racefree.ErrUnavailable, err)
	}
	return Decision{Degraded: true, RetryAfter: time.Second}, err
}

func shadow(p Policy, d Decision) Decision {
	if p.Shadow && !d.Allowed {
		d.Allowed, d.ShadowDenied = true, true
	}
	return d
}

// charge returns the name of the charge statement of a GCRA or
// FixedWindow policy, and the argument that is the policy's step: the
// emission interval T, or the window's length, in ms.
func charge(p Policy) (string, int64) {
	if p.Kind == FixedWindow {
		return "consume_window", p.Per.Milliseconds()
	}
	return "consume_gcra", p.interval()
}

// combineKey names key's counter to the combiner ([send.Op.Key]):
// the tenant is its group, so the scope and the key.
func (l *Limiter) combineKey(key string) string { return "quota\x00" + l.scope + "\x00" + key }

// consumeCombined charges as consume does, through the combiner
// ([send.Do]: a batch of the tenant's concurrent charges, one
// transaction and one commit, bounded by ctx's deadline, the policy's
// Wait); a SlidingWindow charge goes through consumeSlidingCombined. On
// PostgreSQL a batch of two or more charges of one kind runs as one
// statement over arrays (consume_gcra_many, consume_window_many). On
// SQLite a GCRA or FixedWindow charge folds with the charges of its key
// of the same policy, units and clock that follow it in its batch
// (foldGCRA, foldWindow). A
// refusal that returns no row (SQLite, or a counter inserted after the
// statement's snapshot) reads the counter it was refused on: on SQLite in
// the batch, right after the charge, when a later charge of the key
// follows it there (refusalRead), and otherwise in a statement of its
// own, after the batch. It reports false, having charged nothing, when
// exec is not the pool, when the combiner is off, and when the batch
// failed as a whole and committed nothing: the caller then charges alone.
func (l *Limiter) consumeCombined(ctx context.Context, exec racefree.Executor, key string, n int64, p Policy) (Decision, bool, error) {
	if !wire.Of(l.db).Combining() {
		return Decision{}, false, nil
	}
	if p.Kind == SlidingWindow {
		return l.consumeSlidingCombined(ctx, exec, key, n, p)
	}
	name, arg := charge(p)
	id := tenant.From(ctx)
	for attempt := 0; ; attempt++ {
		var (
			allowed        bool
			tat, used, now int64
		)
		clock := wire.Of(l.db).ClockArg()
		st := &wire.Statement{Query: l.q.Get(name), Args: []any{id, l.scope, key, n, arg, p.limit(), clock}, Clock: 7,
			Dest: []any{&allowed, &tat, &used, &now}}
		op := &send.Op{Key: l.combineKey(key), Stmts: []*wire.Statement{st}}
		var read refusalRead
		if wire.Of(l.db).CanPipeline() {
			st.Many = l.q.Get(name + "_many")
		} else {
			// At the charge's clock: the counter as the refusal saw it.
			op.Stmts = append(op.Stmts, read.statement(l.q.Get("state"), []any{id, l.scope, key, string(p.Kind), clock}, 3))
			op.Fold, op.FoldAs = l.foldGCRA, fmt.Sprintf("quota %s %d %d %d %v", p.Kind, n, arg, p.limit(), clock)
			if p.Kind == FixedWindow {
				op.Fold = l.foldWindow
			}
		}
		way, err := send.Do(ctx, l.db, exec, op)
		switch {
		case way == send.NotSent:
			return Decision{}, false, nil
		case err == nil && allowed:
			return decide(p, n, now, tat, used, true), true, nil
		case err == nil:
			// Refused; the statement read the counter it refused on.
		case errors.Is(err, racefree.ErrNotFound) && read.found:
			// Refused, and the batch read the counter it refused on
			// before a later charge of the key moved it.
			now, tat, used = read.now, read.tat, read.used
		case errors.Is(err, racefree.ErrNotFound):
			// Refused, and the counter is still to be read.
			var t, u sql.NullInt64
			err = send.QueryRow(ctx, l.db, exec, l.q.Get("state"), []any{id, l.scope, key, string(p.Kind), wire.Of(l.db).ClockArg()}, &now, &t, &u)
			if err != nil {
				return Decision{}, true, err
			}
			tat, used = t.Int64, u.Int64
		default:
			return Decision{}, true, err
		}
		if d := decide(p, n, now, tat, used, false); !d.Allowed {
			return d, true, nil
		}
		if attempt == 2 {
			return Decision{}, true, fmt.Errorf("counter keeps moving: %w", racefree.ErrRetryable)
		}
	}
}

// foldGCRA runs ops, two or more GCRA charges of one key under one
// policy, all of the same units, that follow one another in a SQLite
// batch ([wire.Op].Fold, FoldAs), at once: consume_gcra_fold.sql decides
// and charges them in one statement, as consume_gcra.sql one charge
// after the other would (the first k allowed, the others refused), and
// fold_gcra_read.sql reads the counter before it, from which each
// charge's own decision and counter follow: the i-th (from 1) is allowed
// when i <= k, and its counter is t + min(i, k)*n*T, where t is max(tat,
// now) (settleFold). A counter the statement moved by other than a
// whole number of charges of the fold is an error: the batch commits
// nothing, and its charges run alone.
func (l *Limiter) foldGCRA(ctx context.Context, run wire.Run, ops []*wire.Op) error {
	args, now, err := foldArgs(ops)
	if err != nil {
		return err
	}
	step := args[3].(int64) * args[4].(int64) // n*T
	var before sql.NullInt64
	var tat int64
	found, charged, err := l.foldStatements(ctx, run, "gcra", args, len(ops), []any{&before}, []any{&tat})
	if err != nil {
		return err
	}
	t := now
	if found && before.Int64 > now {
		t = before.Int64
	}
	k, err := foldCount(charged, t, tat, step, len(ops))
	if err != nil {
		return err
	}
	settleFold(ops, k, now, func(j int64) []int64 { return []int64{t + j*step, 0} })
	return nil
}

// foldWindow is foldGCRA for fixed-window charges: consume_window_fold.sql
// admits the first k that fit in the window, fold_window_read.sql reads
// the counter before it, and the i-th charge's counter is the window's
// start with u + min(i, k)*n used, where u is what the window had used
// (0 for a row of an earlier window).
func (l *Limiter) foldWindow(ctx context.Context, run wire.Run, ops []*wire.Op) error {
	args, now, err := foldArgs(ops)
	if err != nil {
		return err
	}
	n, per := args[3].(int64), args[4].(int64)
	start := now - now%per
	var tat0, used0 sql.NullInt64
	var tat, used int64
	found, charged, err := l.foldStatements(ctx, run, "window", args, len(ops), []any{&tat0, &used0}, []any{&tat, &used})
	if err != nil {
		return err
	}
	u := int64(0)
	if found && tat0.Int64 == start {
		u = used0.Int64
	}
	if charged && tat != start {
		return fmt.Errorf("quota: a fold of %d charges wrote the window of %d, at %d", len(ops), tat, now)
	}
	k, err := foldCount(charged, u, used, n, len(ops))
	if err != nil {
		return err
	}
	settleFold(ops, k, now, func(j int64) []int64 { return []int64{start, u + j*n} })
	return nil
}

// foldArgs returns the arguments of the charges ops fold (tenant, scope,
// key, n, the policy's step or window, its limit, the clock:
// consumeCombined's and consumeSlidingCombined's),
// which FoldAs makes the same for all of them, and the clock, which must
// be Unix milliseconds: the batch's, or Config.Clock's.
func foldArgs(ops []*wire.Op) ([]any, int64, error) {
	args := ops[0].Stmts[0].Args
	now, ok := args[6].(int64)
	if !ok {
		return nil, 0, fmt.Errorf("quota: a fold of charges at clock %v, not the batch's", args[6])
	}
	return args, now, nil
}

// foldStatements runs a fold's two statements for the policy kind
// (gcra, window, sliding): fold_<kind>_read.sql, the key's counter before
// the fold, into read (found: it has one), then consume_<kind>_fold.sql,
// the fold's m charges, into wrote (charged: it wrote the counter). Both
// take args (foldArgs'), the charge statement m after them.
func (l *Limiter) foldStatements(ctx context.Context, run wire.Run, kind string, args []any, m int, read, wrote []any) (found, charged bool, err error) {
	if found, err = run(ctx, &wire.Statement{Query: l.q.Get("fold_" + kind + "_read"), Args: args[:3], Dest: read}); err != nil {
		return false, false, err
	}
	charged, err = run(ctx, &wire.Statement{Query: l.q.Get("consume_" + kind + "_fold"), Args: append(slices.Clone(args), int64(m)), Dest: wrote})
	return found, charged, err
}

// foldCount returns k, how many of the m charges of a fold its statement
// charged, from the counter before it (from) and after it (to), each
// charge moving it by step: 0 when the statement wrote nothing
// (charged false). A counter moved by other than one to m whole charges
// is an error.
func foldCount(charged bool, from, to, step int64, m int) (int64, error) {
	if !charged {
		return 0, nil
	}
	k := (to - from) / step
	if k < 1 || k > int64(m) || from+k*step != to {
		return 0, fmt.Errorf("quota: a fold of %d charges of %d moved the counter from %d to %d", m, step, from, to)
	}
	return k, nil
}

// settleFold fills each charge's Dest (consumeCombined's: allowed, tat,
// used, now; consumeSlidingCombined's: allowed, tat, used, prev, now) as
// the charge alone would have found it: the i-th (from 1) is allowed
// when i <= k, and its counter, counter(j) (the columns between allowed
// and now), is the counter after j = min(i, k) charges of the fold:
// after its own when allowed, the one it was refused on otherwise, as
// PostgreSQL's statement returns it.
func settleFold(ops []*wire.Op, k, now int64, counter func(j int64) []int64) {
	for i, op := range ops {
		d := op.Stmts[0].Dest
		*d[0].(*bool) = int64(i) < k
		for c, v := range counter(min(int64(i)+1, k)) {
			*d[1+c].(*int64) = v
		}
		*d[len(d)-1].(*int64) = now
	}
}

// refusalRead is the read of the counter a combined charge was refused
// on, in its batch, right after the charge (SQLite: state, state_sliding),
// when a later charge of the same key follows it there
// ([wire.Statement].IfMissed: only after a refusal, and only then): a read
// after the batch would see that charge too, and tell the refused caller
// to wait longer than it must. found says it ran.
type refusalRead struct {
	found                bool
	now, tat, used, prev int64 // a missing counter reads zero: a full bucket
}

// statement returns the read; cols is how many columns it returns (now,
// tat, used, and for a sliding window prev).
func (r *refusalRead) statement(query string, args []any, cols int) *wire.Statement {
	return &wire.Statement{Query: query, Args: args, Clock: len(args), IfMissed: true, Rows: func(rows wire.Rows) error {
		*r = refusalRead{}
		if !rows.Next() {
			return nil
		}
		var tat, used, prev sql.NullInt64
		if err := rows.Scan([]any{&r.now, &tat, &used, &prev}[:cols]...); err != nil {
			return err
		}
		r.found, r.tat, r.used, r.prev = true, tat.Int64, used.Int64, prev.Int64
		return nil
	}}
}

// consume runs the charge statement. On a denial, the counter it refused
// on says how long to wait: PostgreSQL's statement returns it, SQLite's
// returns no row and the counter is read in a second statement. When that
// read shows room (the counter moved between the two), it charges again.
func (l *Limiter) consume(ctx context.Context, exec racefree.Executor, key string, n int64, p Policy) (Decision, error) {
	if p.Kind == SlidingWindow {
		return l.consumeSliding(ctx, exec, key, n, p)
	}
	name, arg := charge(p)
	for attempt := 0; ; attempt++ {
		var (
			allowed        bool
			tat, used, now int64
		)
		err := send.Statement(ctx, l.db, exec, &wire.Statement{Query: l.q.Get(name), Args: []any{tenant.From(ctx), l.scope, key, n, arg, p.limit(), wire.Of(l.db).ClockArg()},
			Dest: []any{&allowed, &tat, &used, &now}})
		switch {
		case err == nil && allowed:
			return decide(p, n, now, tat, used, true), nil
		case err == nil:
			// Refused; the statement read the counter it refused on.
		case errors.Is(err, sql.ErrNoRows):
			// Refused, and the counter is still to be read.
			if now, tat, used, err = l.state(ctx, exec, key, p, send.ReadStatement); err != nil {
				return Decision{}, err
			}
		default:
			return Decision{}, err
		}
		if d := decide(p, n, now, tat, used, false); !d.Allowed {
			return d, nil
		}
		if attempt == 2 {
			return Decision{}, fmt.Errorf("counter keeps moving: %w", racefree.ErrRetryable)
		}
	}
}

// sender sends one statement of a charge, a refund or a read of their
// counter on the executor [send.Run] handed its fn: [send.Statement] or
// [send.ReadStatement].
type sender func(ctx context.Context, db *racefree.DB, exec racefree.Executor, st *wire.Statement) error

// state reads key's counter and the clock, sending the statement with
// run: [send.ReadStatement] after a refused charge, [send.Statement] after a
// refund that found no counter, whose errors are the refund's. A missing
// row reads as a full bucket.
func (l *Limiter) state(ctx context.Context, exec racefree.Executor, key string, p Policy, run sender) (now, tat, used int64, err error) {
	var t, u sql.NullInt64
	if err := run(ctx, l.db, exec, &wire.Statement{Query: l.q.Get("state"), Args: []any{tenant.From(ctx), l.scope, key, string(p.Kind), wire.Of(l.db).ClockArg()},
		Dest: []any{&now, &t, &u}}); err != nil {
		return 0, 0, 0, err
	}
	return now, t.Int64, u.Int64, nil
}

// decide computes the decision of charging n units at now to a counter at
// (tat, used). charged says the statement charged them, and (tat, used) is
// then the state after the charge; otherwise it is the state before, and
// Allowed says whether there is room for n now.
func decide(p Policy, n, now, tat, used int64, charged bool) Decision {
	if p.Kind == FixedWindow {
		per := p.Per.Milliseconds()
		start := now - now%per
		if tat != start {
			used = 0
		}
		if !charged && used+n <= p.Rate {
			return Decision{Allowed: true}
		}
		d := Decision{Allowed: charged, Remaining: max(p.Rate-used, 0), ResetAt: racefree.FromMillis(start + per),
			ResetAfter: time.Duration(start+per-now) * time.Millisecond}
		if !charged {
			d.RetryAfter = time.Duration(start+per-now) * time.Millisecond
		}
		return d
	}
	t, b := p.interval(), p.Burst
	tat = max(tat, now)
	if charged {
		return Decision{Allowed: true, Remaining: max((now+b*t-tat)/t, 0), ResetAt: racefree.FromMillis(tat),
			ResetAfter: time.Duration(tat-now) * time.Millisecond}
	}
	allowAt := tat + n*t - b*t
	if allowAt <= now {
		return Decision{Allowed: true}
	}
	return Decision{Remaining: max((now+b*t-tat)/t, 0), ResetAt: racefree.FromMillis(tat),
		ResetAfter: time.Duration(tat-now) * time.Millisecond, RetryAfter: time.Duration(allowAt-now) * time.Millisecond}
}

// Refund gives n units back to key under policy p, after a downstream
// failure, and returns the counter's state. A refund never raises a key
// above its limit (the bucket's Burst, or the window's Rate), and only a
// charge of the current window can be refunded. Refunding a key with no
// counter does nothing. exec may be the caller's transaction.
func (l *Limiter) Refund(ctx context.Context, exec racefree.Executor, key string, n int64, p Policy) (Decision, error) {
	if err := l.check(key, n, p); err != nil {
		return Decision{}, err
	}
	if p.Kind == SlidingWindow {
		return l.refundSliding(ctx, exec, key, n, p)
	}
	name, arg := "refund_gcra", p.interval()
	if p.Kind == FixedWindow {
		name, arg = "refund_window", p.Per.Milliseconds()
	}
	var tat, used, now int64
	err := send.Run(ctx, l.db, exec, func(exec racefree.Executor) error {
		err := send.Statement(ctx, l.db, exec, &wire.Statement{Query: l.q.Get(name), Args: []any{tenant.From(ctx), l.scope, key, n, arg, wire.Of(l.db).ClockArg()},
			Dest: []any{&tat, &used, &now}})
		if errors.Is(err, sql.ErrNoRows) {
			now, tat, used, err = l.state(ctx, exec, key, p, send.Statement)
		}
		return err
	})
	if err != nil {
		return Decision{}, fmt.Errorf("quota: refund %s: %w", key, wire.Of(l.db).InterpretError(err))
	}
	d := decide(p, 0, now, tat, used, true)
	return d, nil
}

// ExceededError reports a denied charge with its Decision, for callers
// that turn a denial into an error (racefree's HTTP route). It matches
// [racefree.ErrQuotaExceeded].
type ExceededError struct {
	Decision Decision
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("quota exceeded: retry in %s", e.Decision.RetryAfter)
}

// Is reports [racefree.ErrQuotaExceeded] as matching.
func (e *ExceededError) Is(target error) bool { return target == racefree.ErrQuotaExceeded }
