package quota

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/schema"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// SlidingWindowMigration is the migration that adds the sliding-window
// counter. Before it, a SlidingWindow policy is a *racefree.SchemaError
// ([racefree.ErrSchemaOutdated]), and nothing is written.
const SlidingWindowMigration = 16

// maxSlidingProduct bounds Rate × Per (in ms) of a SlidingWindow policy:
// the statement compares the weighted counts multiplied out by Per, and
// three such products must fit in a signed 64-bit integer.
const maxSlidingProduct = 1 << 61

// needSliding returns a *racefree.SchemaError before SlidingWindowMigration.
func (l *Limiter) needSliding(ctx context.Context, exec racefree.Executor) error {
	return schema.Need(ctx, l.db, exec, SlidingWindowMigration)
}

// consumeSliding runs the sliding-window charge statement, as consume does
// the others: on a denial, the counter it refused on says how long to
// wait, read by the same statement (PostgreSQL) or a second one (SQLite);
// when that read shows room, it charges again.
func (l *Limiter) consumeSliding(ctx context.Context, exec racefree.Executor, key string, n int64, p Policy) (Decision, error) {
	if err := l.needSliding(ctx, exec); err != nil {
		return Decision{}, err
	}
	for attempt := 0; ; attempt++ {
		var (
			allowed              bool
			tat, used, prev, now int64
		)
		err := send.Statement(ctx, l.db, exec, &wire.Statement{Query: l.q.Get("consume_sliding"), Args: []any{tenant.From(ctx), l.scope, key, n, p.Per.Milliseconds(), p.Rate, wire.Of(l.db).ClockArg()},
			Dest: []any{&allowed, &tat, &used, &prev, &now}})
		switch {
		case err == nil && allowed:
			return decideSliding(p, n, now, tat, used, prev, true), nil
		case err == nil:
			// Refused; the statement read the counter it refused on.
		case errors.Is(err, sql.ErrNoRows):
			// Refused, and the counter is still to be read.
			if now, tat, used, prev, err = l.stateSliding(ctx, exec, key, send.ReadStatement); err != nil {
				return Decision{}, err
			}
		default:
			return Decision{}, err
		}
		if d := decideSliding(p, n, now, tat, used, prev, false); !d.Allowed {
			return d, nil
		}
		if attempt == 2 {
			return Decision{}, fmt.Errorf("counter keeps moving: %w", racefree.ErrRetryable)
		}
	}
}

// consumeSlidingCombined charges as consumeSliding does, through the
// combiner (consumeCombined): on SQLite in the batch's transaction, on
// PostgreSQL as its own statement in the batch's pipeline, which shares
// the batch's round trip and commit. On SQLite it folds with the charges
// of its key of the same policy, units and clock that follow it in its
// batch (foldSliding). A refusal that returns no row reads
// the counter it was refused on as consumeCombined's does: in the batch
// when a later charge of the key follows it there (SQLite), else after
// the batch, in a statement of its own for ctx's tenant.
func (l *Limiter) consumeSlidingCombined(ctx context.Context, exec racefree.Executor, key string, n int64, p Policy) (Decision, bool, error) {
	if err := l.needSliding(ctx, exec); err != nil {
		return Decision{}, true, err
	}
	id := tenant.From(ctx)
	for attempt := 0; ; attempt++ {
		var (
			allowed              bool
			tat, used, prev, now int64
		)
		clock := wire.Of(l.db).ClockArg()
		st := &wire.Statement{Query: l.q.Get("consume_sliding"), Args: []any{id, l.scope, key, n, p.Per.Milliseconds(), p.Rate, clock}, Clock: 7,
			Dest: []any{&allowed, &tat, &used, &prev, &now}}
		op := &send.Op{Key: l.combineKey(key), Stmts: []*wire.Statement{st}}
		var read refusalRead
		if !wire.Of(l.db).CanPipeline() {
			// At the charge's clock: the counter as the refusal saw it.
			op.Stmts = append(op.Stmts, read.statement(l.q.Get("state_sliding"), []any{id, l.scope, key, clock}, 4))
			op.Fold, op.FoldAs = l.foldSliding, fmt.Sprintf("quota %s %d %d %d %v", p.Kind, n, p.Per.Milliseconds(), p.Rate, clock)
		}
		way, err := send.Do(ctx, l.db, exec, op)
		switch {
		case way == send.NotSent:
			return Decision{}, false, nil
		case err == nil && allowed:
			return decideSliding(p, n, now, tat, used, prev, true), true, nil
		case err == nil:
			// Refused; the statement read the counter it refused on.
		case errors.Is(err, racefree.ErrNotFound) && read.found:
			// Refused, and the batch read the counter it refused on
			// before a later charge of the key moved it.
			now, tat, used, prev = read.now, read.tat, read.used, read.prev
		case errors.Is(err, racefree.ErrNotFound):
			// Refused, and the counter is still to be read.
			var t, u, pr sql.NullInt64
			err = send.QueryRow(ctx, l.db, exec, l.q.Get("state_sliding"), []any{id, l.scope, key, wire.Of(l.db).ClockArg()}, &now, &t, &u, &pr)
			if err != nil {
				return Decision{}, true, err
			}
			tat, used, prev = t.Int64, u.Int64, pr.Int64
		default:
			return Decision{}, true, err
		}
		if d := decideSliding(p, n, now, tat, used, prev, false); !d.Allowed {
			return d, true, nil
		}
		if attempt == 2 {
			return Decision{}, true, fmt.Errorf("counter keeps moving: %w", racefree.ErrRetryable)
		}
	}
}

// foldSliding is foldGCRA for sliding-window charges:
// consume_sliding_fold.sql admits the first k that fit, and
// fold_sliding_read.sql reads the counter before it, which counts (cur,
// last) seen from now (slidingCounts); the i-th charge's counter is the
// current window's start with cur + min(i, k)*n used and last as its
// prev.
func (l *Limiter) foldSliding(ctx context.Context, run wire.Run, ops []*wire.Op) error {
	args, now, err := foldArgs(ops)
	if err != nil {
		return err
	}
	n, w := args[3].(int64), args[4].(int64)
	var tat0, used0, prev0 sql.NullInt64
	var tat, used, prev int64
	found, charged, err := l.foldStatements(ctx, run, "sliding", args, len(ops), []any{&tat0, &used0, &prev0}, []any{&tat, &used, &prev})
	if err != nil {
		return err
	}
	start, cur, last := now-now%w, int64(0), int64(0)
	if found {
		start, cur, last = slidingCounts(w, now, tat0.Int64, used0.Int64, prev0.Int64)
	}
	if charged && (tat != start || prev != last) {
		return fmt.Errorf("quota: a fold of %d charges wrote the window of %d with %d before it, at %d", len(ops), tat, prev, now)
	}
	k, err := foldCount(charged, cur, used, n, len(ops))
	if err != nil {
		return err
	}
	settleFold(ops, k, now, func(j int64) []int64 { return []int64{start, cur + j*n, last} })
	return nil
}

// stateSliding reads key's sliding-window counter and the clock, sending
// the statement with run, as state does. A missing row reads as nothing
// counted.
func (l *Limiter) stateSliding(ctx context.Context, exec racefree.Executor, key string, run sender) (now, tat, used, prev int64, err error) {
	var t, u, pr sql.NullInt64
	if err := run(ctx, l.db, exec, &wire.Statement{Query: l.q.Get("state_sliding"), Args: []any{tenant.From(ctx), l.scope, key, wire.Of(l.db).ClockArg()},
		Dest: []any{&now, &t, &u, &pr}}); err != nil {
		return 0, 0, 0, 0, err
	}
	return now, t.Int64, u.Int64, pr.Int64, nil
}

// refundSliding gives n units back to the current window's count.
func (l *Limiter) refundSliding(ctx context.Context, exec racefree.Executor, key string, n int64, p Policy) (Decision, error) {
	var tat, used, prev, now int64
	err := send.Run(ctx, l.db, exec, func(exec racefree.Executor) error {
		if err := l.needSliding(ctx, exec); err != nil {
			return err
		}
		var pr sql.NullInt64
		err := send.Statement(ctx, l.db, exec, &wire.Statement{Query: l.q.Get("refund_sliding"), Args: []any{tenant.From(ctx), l.scope, key, n, p.Per.Milliseconds(), wire.Of(l.db).ClockArg()},
			Dest: []any{&tat, &used, &pr, &now}})
		prev = pr.Int64
		if errors.Is(err, sql.ErrNoRows) {
			now, tat, used, prev, err = l.stateSliding(ctx, exec, key, send.Statement)
		}
		return err
	})
	if err != nil {
		return Decision{}, fmt.Errorf("quota: refund %s: %w", key, wire.Of(l.db).InterpretError(err))
	}
	return decideSliding(p, 0, now, tat, used, prev, true), nil
}

// slidingCounts returns what a sliding-window row (tat, used, prev) counts
// at now: the current window's units and the previous window's. A row of
// the window before the current one has become the previous window; an
// older row counts nothing.
func slidingCounts(w, now, tat, used, prev int64) (start, cur, last int64) {
	start = now - now%w
	switch tat {
	case start:
		return start, used, prev
	case start - w:
		return start, 0, used
	}
	return start, 0, 0
}

// slidingFits reports whether n more units fit at elapsed ms into the
// window: last × (w − elapsed) / w + cur + n <= limit, compared exactly.
func slidingFits(w, limit, elapsed, cur, last, n int64) bool {
	return last*(w-elapsed)+(cur+n)*w <= limit*w
}

// decideSliding computes the decision of charging n units at now to a
// sliding-window counter at (tat, used, prev), as decide does for the
// other kinds.
func decideSliding(p Policy, n, now, tat, used, prev int64, charged bool) Decision {
	w, limit := p.Per.Milliseconds(), p.Rate
	start, cur, last := slidingCounts(w, now, tat, used, prev)
	if !charged && slidingFits(w, limit, now-start, cur, last, n) {
		return Decision{Allowed: true}
	}
	// Full again once nothing is counted: two windows after a charge of
	// the current one, one window after the last charge of the previous.
	reset := now
	switch {
	case cur > 0:
		reset = start + 2*w
	case last > 0:
		reset = start + w
	}
	weighted := (last*(w-(now-start)) + w - 1) / w // rounded up
	d := Decision{Allowed: charged, Remaining: max(limit-cur-weighted, 0), ResetAt: racefree.FromMillis(reset),
		ResetAfter: time.Duration(reset-now) * time.Millisecond}
	if !charged {
		d.RetryAfter = time.Duration(slidingRetryAt(w, limit, n, now, start, cur, last)-now) * time.Millisecond
	}
	return d
}

// slidingRetryAt returns the first instant from now at which n units fit,
// if nothing else is charged: later in the current window, as the
// previous window's weight falls; else in the next one, where the current
// count becomes the previous; else two windows on, where nothing counts.
func slidingRetryAt(w, limit, n, now, start, cur, last int64) int64 {
	if t, ok := firstFit(w, limit, n, now, start, cur, last); ok {
		return t
	}
	if t, ok := firstFit(w, limit, n, start+w, start+w, 0, cur); ok {
		return t
	}
	return start + 2*w
}

// firstFit returns the first instant, not before from, of the window that
// starts at start, at which n units fit against counts (cur, last), and
// whether there is one: last × (w − e) <= (limit − cur − n) × w holds from
// elapsed e = w − ⌊(limit − cur − n) × w / last⌋ on.
func firstFit(w, limit, n, from, start, cur, last int64) (int64, bool) {
	room := (limit - cur - n) * w
	if room < 0 {
		return 0, false
	}
	e := int64(0)
	if last > 0 {
		e = w - min(room/last, w)
	}
	if e >= w {
		return 0, false
	}
	return max(from, start+e), true
}
