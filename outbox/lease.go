package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// Bounds of a lease.
const (
	MinLease = 20 * time.Millisecond
	MaxLease = 24 * time.Hour
	// MaxClaim bounds the messages one claim leases.
	MaxClaim = 1000
	// MaxWorkerBytes bounds a worker's name.
	MaxWorkerBytes = 128
)

// Delivery is one leased attempt at a message: what a Handler gets.
type Delivery struct {
	ID        int64
	Tenant    string
	Topic     string
	Key       string
	Ordered   bool
	Payload   []byte
	Headers   map[string]string
	CreatedAt time.Time
	// Attempt counts the tenures of the message since it was enqueued or
	// redriven, this one included (1 for the first); a lease that lapsed
	// counts.
	Attempt     int
	MaxAttempts int
	// Fence names this tenure: it grows by one with every claim (on
	// PostgreSQL it jumps past a failover: the package doc), so the holder
	// of an older tenure can change nothing. Compare fences, never do
	// arithmetic with them.
	Fence int64
	// Worker holds the lease until LeaseExpiresAt, which Heartbeat moves
	// on in the Delivery it is given. A Relay's handler reads the expiry
	// of its claim: the relay heartbeats a copy of its own, so the
	// Delivery a handler holds is never written while it runs (the
	// handler's context ends with ErrLeaseLost if the lease lapses).
	Worker         string
	LeaseExpiresAt time.Time
}

// IdempotencyKey returns the key every delivery of the message carries:
// its id, in decimal. A receiver that records it (an inbox, an
// Idempotency-Key store) applies a message once however often it is
// delivered.
func (d *Delivery) IdempotencyKey() string { return strconv.FormatInt(d.ID, 10) }

// StaleFenceError means a tenure ended: its lease lapsed and another
// claim took the message over (the fence grew). It matches
// [racefree.ErrStaleFence]; nothing was changed.
type StaleFenceError struct {
	ID      int64
	Fence   int64 // the caller's
	Current int64 // the message's
}

func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("outbox message %d: fence %d is stale, the current fence is %d", e.ID, e.Fence, e.Current)
}

// Is matches [racefree.ErrStaleFence].
func (e *StaleFenceError) Is(target error) bool { return target == racefree.ErrStaleFence }

// ErrDelivered means the message is delivered at the caller's own fence:
// the caller's tenure completed it already. A completion retried after
// its reply was lost (it committed, the caller never heard) meets it: the
// delivery happened, and nothing was changed. An error that matches it
// matches [racefree.ErrNotHeld] too (the message is not leased), never
// [racefree.ErrStaleFence]: no other tenure took the message over.
var ErrDelivered = errors.New("racefree: outbox message already delivered by this tenure")

// ErrLeaseLost is the cause (context.Cause) of a handler's context when a
// heartbeat found the lease lapsed or taken over.
var ErrLeaseLost = errors.New("racefree: outbox lease lost")

// Claim leases up to n due messages of the tenant ctx names to worker for
// lease, oldest due first, and returns them (by id). Due: ready and
// available, or leased and lapsed; an ordered message only once every
// older message of its key is delivered or discarded. Each claim grows
// the message's fence and attempt count. topics restricts the claim
// (none: every topic).
//
// Relays call it; use it directly to drive deliveries yourself, and end
// each with Complete or Fail (and Heartbeat while it runs). A delivery
// whose Attempt exceeds MaxAttempts (its last lease lapsed) must not be
// handled: Fail it, and it dies.
//
// On PostgreSQL rows other claimers hold locked are skipped, never waited
// for, and the claim is one statement, which also records the lapses it
// takes over: once the tenant is registered in the process, one round
// trip with its tenant. On SQLite the claim is one IMMEDIATE transaction.
func (o *Outbox) Claim(ctx context.Context, worker string, n int, lease time.Duration, topics ...string) ([]*Delivery, error) {
	if err := racefree.CheckText("worker", worker, MaxWorkerBytes); err != nil {
		return nil, err
	}
	if n < 1 || n > MaxClaim {
		return nil, racefree.Invalid("n", "must be 1 to %d", MaxClaim)
	}
	if err := checkLease(lease); err != nil {
		return nil, err
	}
	for _, t := range topics {
		if err := racefree.CheckText("topics", t, MaxTopicBytes); err != nil {
			return nil, err
		}
	}
	out, _, err := o.claimCompleting(ctx, worker, n, lease, topics, nil, false)
	return out, err
}

// claimCompleting completes done (tenures of the tenant ctx names), if
// any, and claims, in one transaction: a relay's completions ride on its
// next claim, one commit for both. On the pool of PostgreSQL, once the
// tenant is registered, that transaction is one round trip: the tenant,
// the completion and the claim sent together (send.Do); the
// claim records the lapses it finds itself, so nothing in it waits for an
// earlier statement's rows.
func (o *Outbox) claimCompleting(ctx context.Context, worker string, n int, lease time.Duration, topics []string, done []*Delivery, locked bool) ([]*Delivery, []tenure, error) {
	id := tenant.From(ctx)
	if len(done) == 0 && !locked {
		due, err := o.dialect.mayBeDue(ctx, o, id, topics)
		if err != nil || !due {
			return nil, nil, err
		}
	}
	out, completed, together, err := o.dialect.claimTogether(ctx, o, id, worker, n, lease, topics, done)
	if err != nil {
		return nil, nil, err
	}
	if together {
		sortByID(out)
		return out, completed, nil
	}
	err = o.inTx(ctx, o.db, func(exec racefree.Executor) error {
		out, completed = out[:0], completed[:0]
		var lapsed []lapse
		var err error
		if len(done) > 0 {
			if completed, err = o.complete(ctx, exec, id, done); err != nil {
				return err
			}
		}
		if out, lapsed, err = o.dialect.claim(ctx, o, exec, id, worker, n, lease, topics); err != nil {
			return err
		}
		for _, l := range lapsed {
			if err := o.record(ctx, exec, id, l.id, l.fence, l.attempt, l.worker, l.at, "lapsed", "the lease lapsed"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("outbox claim: %w", wire.Of(o.db).InterpretError(err))
	}
	sortByID(out)
	return out, completed, nil
}

// lapse is a lease that lapsed, found by a claim: the attempt it ended.
type lapse struct {
	id, fence int64
	attempt   int
	worker    string
	at        int64
}

// queryRows runs st, a statement with Rows, on exec.
func queryRows(ctx context.Context, exec racefree.Executor, st *wire.Statement) error {
	rows, err := exec.QueryContext(ctx, st.Query, st.Args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if err := st.Rows(rows); err != nil {
		return err
	}
	return rows.Err()
}

// record adds a failed tenure to a message's history and drops the
// entries beyond Options.History.
func (o *Outbox) record(ctx context.Context, exec racefree.Executor, id string, msg, fence int64, attempt int, worker string, at int64, outcome, errText string) error {
	if _, err := exec.ExecContext(ctx, o.q.Get("record_attempt"), id, msg, fence, attempt, worker, at, outcome, errText); err != nil {
		return err
	}
	_, err := exec.ExecContext(ctx, o.q.Get("prune_attempts"), id, msg, fence, o.opts.History)
	return err
}

func checkLease(lease time.Duration) error {
	if lease < MinLease || lease > MaxLease {
		return racefree.Invalid("lease", "must be %s to %s", MinLease, MaxLease)
	}
	if lease%time.Millisecond != 0 {
		return racefree.Invalid("lease", "must be whole milliseconds")
	}
	return nil
}

// Complete marks d delivered, if d's tenure is still the message's current
// one; pass the caller's *sql.Tx to complete it together with the
// caller's own writes (a handler whose effect is in the same database then
// applies it exactly once). It returns a *StaleFenceError when the lease
// lapsed and another claim took the message over, and an error matching
// [racefree.ErrNotHeld] when the message is not leased (delivered, dead,
// ready again, discarded). When d's own tenure delivered it already (a
// Complete retried after its reply was lost, the first one having
// committed) that error matches [ErrDelivered] too: the delivery
// happened. A tenure whose lease lapsed but that nobody took over yet
// still completes.
func (o *Outbox) Complete(ctx context.Context, exec racefree.Executor, d *Delivery) error {
	ctx, err := forTenant(ctx, d.Tenant)
	if err != nil {
		return err
	}
	var done []tenure
	err = o.run(ctx, exec, func(exec racefree.Executor) error {
		var err error
		done, err = o.complete(ctx, exec, d.Tenant, []*Delivery{d})
		return err
	})
	if err != nil {
		return fmt.Errorf("outbox complete: %w", wire.Of(o.db).InterpretError(err))
	}
	if len(done) == 0 {
		return o.whyNot(ctx, exec, d)
	}
	return nil
}

// complete marks the current tenures among ds delivered and returns
// them.
func (o *Outbox) complete(ctx context.Context, exec racefree.Executor, id string, ds []*Delivery) ([]tenure, error) {
	var out []tenure
	err := queryRows(ctx, exec, o.completeStatement(id, ds, &out))
	return out, err
}

// completeStatement marks the current tenures among ds delivered and
// reads them into *into.
func (o *Outbox) completeStatement(id string, ds []*Delivery, into *[]tenure) *wire.Statement {
	args := append([]any{id}, o.dialect.tenuresArgs(ds)...)
	args = append(args, wire.Of(o.db).ClockArg())
	return &wire.Statement{
		Query: o.q.Get("complete"),
		Args:  args,
		Rows: func(rows wire.Rows) error {
			*into = (*into)[:0]
			for rows.Next() {
				var t tenure
				if err := rows.Scan(&t.id, &t.fence); err != nil {
					return err
				}
				*into = append(*into, t)
			}
			return nil
		},
	}
}

// tenure names one lease of a message: a message claimed again has a
// tenure per claim, and only the latest is current.
type tenure struct{ id, fence int64 }

func tenureOf(d *Delivery) tenure { return tenure{d.ID, d.Fence} }

func (o *Outbox) ids(ctx context.Context, exec racefree.Executor, query string, args ...any) ([]int64, error) {
	rows, err := exec.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// Heartbeat extends the leases of ds, every one a tenure of the tenant
// ctx names, to now + lease, and returns those it could not extend: their
// lease lapsed (even if nobody took it over yet) or another claim took
// the message over. Stop working on those.
func (o *Outbox) Heartbeat(ctx context.Context, ds []*Delivery, lease time.Duration) ([]*Delivery, error) {
	if err := checkLease(lease); err != nil {
		return nil, err
	}
	if len(ds) == 0 {
		return nil, nil
	}
	id := tenant.From(ctx)
	for _, d := range ds {
		if d.Tenant != id {
			return nil, racefree.Invalid("deliveries", "message %d belongs to tenant %q, the call to %q", d.ID, d.Tenant, id)
		}
	}
	var renewed map[tenure]int64
	err := o.run(ctx, o.db, func(exec racefree.Executor) error {
		args := append([]any{id}, o.dialect.tenuresArgs(ds)...)
		args = append(args, lease.Milliseconds(), wire.Of(o.db).ClockArg())
		rows, err := exec.QueryContext(ctx, o.q.Get("renew"), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		renewed = map[tenure]int64{}
		for rows.Next() {
			var t tenure
			var until int64
			if err := rows.Scan(&t.id, &t.fence, &until); err != nil {
				return err
			}
			renewed[t] = until
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("outbox heartbeat: %w", wire.Of(o.db).InterpretError(err))
	}
	var lost []*Delivery
	for _, d := range ds {
		if until, ok := renewed[tenureOf(d)]; ok {
			d.LeaseExpiresAt = racefree.FromMillis(until)
		} else {
			lost = append(lost, d)
		}
	}
	return lost, nil
}

// Outcome is what Fail did with a message.
type Outcome struct {
	Dead      bool      // the message died (OnExhausted ran)
	Permanent bool      // the failure was classified permanent
	RetryAt   time.Time // when it is due again, unless Dead
}

// ExhaustedError means a message had no attempt left: its last lease
// lapsed, so Fail ended it without a handler's error.
var ErrAttemptsExhausted = errors.New("racefree: outbox message has no attempt left")

// Fail ends d's tenure with cause, classified by Options.Classify: a
// permanent failure, or a transient one on the last attempt, makes the
// message dead at once, its lease released, and runs Options.OnExhausted
// in the same transaction; otherwise the message is due again after
// Options.Backoff (or the RetryAfter the classifier found). The failure
// is added to the message's history. It returns a *StaleFenceError or an
// error matching [racefree.ErrNotHeld], changing nothing, when d's tenure
// is over. A Fail retried by the same tenure after its reply was lost (an
// error matching [racefree.ErrUnavailable]: it may have landed) returns
// the outcome the first one recorded, while the message is still where
// that failure left it (ready again, or dead, at d's fence), and records
// nothing twice: Fail is safe to retry. When OnExhausted fails, the transaction rolls back, the
// message is released to die again after a backoff, and Fail returns the
// hook's error.
func (o *Outbox) Fail(ctx context.Context, d *Delivery, cause error) (*Outcome, error) {
	if cause == nil {
		return nil, racefree.Invalid("cause", "must not be nil: Complete a delivery that succeeded")
	}
	ctx, err := forTenant(ctx, d.Tenant)
	if err != nil {
		return nil, err
	}
	v := o.opts.Classify(cause)
	if d.Attempt > d.MaxAttempts && !errors.Is(cause, ErrAttemptsExhausted) {
		cause = fmt.Errorf("%w: %w", ErrAttemptsExhausted, cause)
	}
	delay := v.RetryAfter
	if delay <= 0 {
		delay = o.opts.Backoff(d.Attempt)
	}
	delay = clampDelay(delay)
	text := cleanError(cause)
	out := &Outcome{Permanent: v.Permanent}
	var hookErr error
	err = o.tenantTx(ctx, d.Tenant, func(ctx context.Context, tx *sql.Tx) error {
		var state string
		var at, now int64
		err := tx.QueryRowContext(ctx, o.q.Get("fail"), d.Tenant, d.ID, d.Fence, v.Permanent, delay.Milliseconds(), text, wire.Of(o.db).ClockArg()).Scan(&state, &at, &now)
		if errors.Is(err, sql.ErrNoRows) {
			return errNoRow
		}
		if err != nil {
			return err
		}
		out.Dead = state == string(Dead)
		out.RetryAt = racefree.FromMillis(at)
		outcome := "retry"
		if out.Dead {
			outcome = "dead"
		}
		if err := o.record(ctx, tx, d.Tenant, d.ID, d.Fence, d.Attempt, d.Worker, now, outcome, text); err != nil {
			return err
		}
		if out.Dead && o.opts.OnExhausted != nil {
			if err := o.opts.OnExhausted(ctx, tx, d, cause); err != nil {
				hookErr = err
				return err
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errNoRow):
		if out, err := o.failed(ctx, d, v.Permanent); out != nil || err != nil {
			return out, err
		}
		return nil, o.whyNot(ctx, o.db, d)
	case hookErr != nil:
		retry := clampDelay(o.opts.Backoff(d.Attempt))
		if rerr := o.release(ctx, d, retry, "OnExhausted: "+cleanError(hookErr)); rerr != nil {
			return nil, fmt.Errorf("outbox fail: OnExhausted: %w (and releasing the message: %v)", hookErr, rerr)
		}
		return nil, fmt.Errorf("outbox fail: OnExhausted: %w", hookErr)
	case err != nil:
		return nil, fmt.Errorf("outbox fail: %w", wire.Of(o.db).InterpretError(err))
	}
	return out, nil
}

// failed returns the outcome of the failure that d's own tenure recorded,
// when the message is still where that failure left it (a Fail retried
// after its reply was lost finds here that the first one landed), and nil
// when there is none.
func (o *Outbox) failed(ctx context.Context, d *Delivery, permanent bool) (*Outcome, error) {
	var outcome string
	var at int64
	err := o.run(ctx, o.db, func(exec racefree.Executor) error {
		return exec.QueryRowContext(ctx, o.q.Get("failed"), d.Tenant, d.ID, d.Fence).Scan(&outcome, &at)
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("outbox fail: %w", wire.Of(o.db).InterpretError(err))
	}
	return &Outcome{Dead: outcome == "dead", Permanent: permanent, RetryAt: racefree.FromMillis(at)}, nil
}

// tenantTx runs fn in a transaction of tenant id, with a context naming
// it and bound to the transaction, so that racefree calls fn makes with
// tx run for that tenant.
func (o *Outbox) tenantTx(ctx context.Context, id string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := o.needSchema(ctx, o.db); err != nil {
		return err
	}
	return tenant.InTx(ctx, o.db, id, fn)
}

// release ends d's tenure without a verdict: the message is ready again
// in delay, its attempt count unchanged.
func (o *Outbox) release(ctx context.Context, d *Delivery, delay time.Duration, why string) error {
	return o.run(ctx, o.db, func(exec racefree.Executor) error {
		_, err := exec.ExecContext(ctx, o.q.Get("release"), d.Tenant, d.ID, d.Fence, delay.Milliseconds(), why, wire.Of(o.db).ClockArg())
		return err
	})
}

func clampDelay(d time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d > MaxDelay:
		return MaxDelay
	}
	return d.Round(time.Millisecond)
}

// whyNot explains why d's tenure changed nothing: another tenure began
// (*StaleFenceError), d's own tenure delivered it already (ErrDelivered
// and ErrNotHeld), or the message is not leased (ErrNotHeld).
func (o *Outbox) whyNot(ctx context.Context, exec racefree.Executor, d *Delivery) error {
	var state string
	var fence int64
	err := o.run(ctx, exec, func(exec racefree.Executor) error {
		return exec.QueryRowContext(ctx, o.q.Get("tenure"), d.Tenant, d.ID).Scan(&state, &fence)
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("outbox message %d: %w (it no longer exists)", d.ID, racefree.ErrNotHeld)
	case err != nil:
		return fmt.Errorf("outbox: %w", wire.Of(o.db).InterpretError(err))
	case fence > d.Fence:
		return &StaleFenceError{ID: d.ID, Fence: d.Fence, Current: fence}
	case state == string(Delivered) && fence == d.Fence:
		return fmt.Errorf("outbox message %d is delivered at fence %d, this tenure's: %w: %w", d.ID, d.Fence, ErrDelivered, racefree.ErrNotHeld)
	}
	return fmt.Errorf("outbox message %d is %s: %w", d.ID, state, racefree.ErrNotHeld)
}
