package idempotency

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

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

// Namespace is the claim namespace of the in-progress leases.
const Namespace = "idempotency"

// Limits on input; anything outside them is a *racefree.InputError.
const (
	MaxScopeBytes       = 512
	MaxKeyBytes         = 255
	MaxFingerprintBytes = 256
	MaxStepBytes        = 128
)

// Options configures a Store. The zero value means the defaults.
type Options struct {
	// Lease is how long an in-progress request holds its key without a
	// heartbeat; the heartbeat renews it every Lease/3 while fn runs, so a
	// live worker keeps it and a dead one loses it after Lease. Defaults
	// to 30 seconds.
	Lease time.Duration
	// Retention is how long a record is kept after its last write.
	// Defaults to 24 hours.
	Retention time.Duration
	// CompleteTimeout bounds the work that records fn's outcome once fn
	// has returned: storing the response and releasing the lease. That
	// work runs on a context the caller cannot cancel (a client that hangs
	// up after fn ran must not make the store forget that it ran), so this
	// is its only bound. Defaults to 10 seconds.
	CompleteTimeout time.Duration
}

// InProgressError reports that the key's first request is still running.
// It matches [racefree.ErrInProgress].
type InProgressError struct {
	RetryAfter time.Duration // the lease (at least 1 s): the current one lapses within it
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("a request with this idempotency key is in progress; retry after %v", e.RetryAfter)
}

// Is matches [racefree.ErrInProgress].
func (e *InProgressError) Is(target error) bool { return target == racefree.ErrInProgress }

// Result represents the outcome of Do.
type Result struct {
	Response []byte // what fn returned, now or the first time
	Replayed bool   // true when fn did not run: the response is the stored one
}

// Call represents one run of fn: the lease it runs under, and its recovery
// points.
type Call struct {
	s            *Store
	tenant       string // the tenant of the request: its context's when Do began
	scope, key   string
	holder       string
	fence        int64
	tx           *sql.Tx // set by DoTx
	ResumedSteps int     // how many Step calls were answered from saved values
}

// Fence returns the fencing token of this run's lease (a claim's fence:
// it grows with every run and, on PostgreSQL, jumps past a failover that
// lost commits, so compare it, never do arithmetic with it; package claim).
func (c *Call) Fence() int64 { return c.fence }

// StepKey returns a stable key for step, the same in every retry of this
// request: pass it to the external system as its own idempotency key. It
// differs between tenants, scopes, keys and steps, so two tenants that use
// the same key never share an external side effect; the default tenant's
// step keys are those of releases before tenancy.
func (c *Call) StepKey(step string) string {
	in := c.scope + "\x00" + c.key + "\x00" + step
	if c.tenant != tenant.Default {
		// None of scope, key and step holds a NUL byte, so the extra field
		// keeps every other tenant's inputs apart from the default's.
		in = c.tenant + "\x00" + in
	}
	h := sha256.Sum256([]byte(in))
	return hex.EncodeToString(h[:16])
}

// context returns ctx naming the call's tenant: a Step runs for the tenant
// of its request, whatever context it is given.
func (c *Call) context(ctx context.Context) context.Context {
	if tenant.From(ctx) == c.tenant {
		return ctx
	}
	ctx, _ = tenant.With(ctx, c.tenant) // c.tenant came from a context: valid
	return ctx
}

// Step runs do once per request. When a previous run of this request saved
// step, Step returns the saved value and does not call do. Otherwise it
// calls do and saves its value as a recovery point, conditioned on this
// run's lease: a stale run gets [racefree.ErrStaleFence] and saves nothing.
// A first value saved is never replaced.
func (c *Call) Step(ctx context.Context, step string, do func(ctx context.Context) (string, error)) (string, error) {
	if err := racefree.CheckText("step", step, MaxStepBytes); err != nil {
		return "", err
	}
	ctx = c.context(ctx)
	var exec racefree.Executor = c.s.db
	if c.tx != nil {
		exec = c.tx
	}
	var (
		saved string
		found bool
	)
	err := send.Run(ctx, c.s.db, exec, func(exec racefree.Executor) error {
		err := exec.QueryRowContext(ctx, c.s.q.Get("step_get"), c.tenant, c.scope, c.key, step, wire.Of(c.s.db).ClockArg()).Scan(&saved)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	switch {
	case err != nil:
		return "", fmt.Errorf("idempotency step %q: %w", step, wire.Of(c.s.db).InterpretError(err))
	case found:
		c.ResumedSteps++
		return saved, nil
	}
	value, err := do(ctx)
	if err != nil {
		return "", err
	}
	if !utf8.ValidString(value) || strings.IndexByte(value, 0) >= 0 {
		// Both engines refuse it alike (PostgreSQL text cannot hold it).
		return "", racefree.Invalid("step value", "must be UTF-8 without NUL bytes")
	}
	save := func(tx *sql.Tx) error {
		if err := c.s.claims.Guard(ctx, tx, c.claimKey(), c.holder, c.fence); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, c.s.q.Get("step_save"), c.tenant, c.scope, c.key, step, value, c.fence, c.s.opts.Retention.Milliseconds(), wire.Of(c.s.db).ClockArg())
		return err
	}
	if c.tx != nil {
		err = send.Run(ctx, c.s.db, c.tx, func(racefree.Executor) error { return save(c.tx) })
	} else {
		err = c.s.inTx(ctx, save)
	}
	if err != nil {
		return "", fmt.Errorf("idempotency step %q: %w", step, err)
	}
	return value, nil
}

func (c *Call) claimKey() string { return claimKey(c.scope, c.key) }

// Store represents the idempotency records of one database. It is safe for
// concurrent use.
type Store struct {
	db     *racefree.DB
	claims *claim.Store
	q      query.Set
	opts   Options
}

// New returns the Store of db. It does no I/O.
func New(db *racefree.DB, opts *Options) *Store {
	s := &Store{db: db, claims: claim.NewNamespace(db, Namespace), q: query.MustLoad(sqlFiles, "sql", db.Engine())}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Lease <= 0 {
		s.opts.Lease = 30 * time.Second
	}
	if s.opts.Retention <= 0 {
		s.opts.Retention = 24 * time.Hour
	}
	if s.opts.CompleteTimeout <= 0 {
		s.opts.CompleteTimeout = 10 * time.Second
	}
	return s
}

// inTx runs fn in a transaction of its own (IMMEDIATE on SQLite) that
// belongs to ctx's tenant.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.db.InTx(ctx, func(tx *sql.Tx) error {
		return send.Run(ctx, s.db, tx, func(racefree.Executor) error { return fn(tx) })
	})
}

// Do runs fn once for (scope, key) of ctx's tenant ([tenant.From]) and
// returns its response, or replays the stored response of an earlier
// completed run.
//
// fingerprint identifies the request (a hash of what it asks for); the
// same key with another fingerprint returns [racefree.ErrMismatch]. A
// duplicate while the first run is in progress returns an
// *InProgressError. When fn returns an error nothing is stored, the lease
// is released, and the next retry runs fn again; any recovery points fn
// saved remain. When the lease is lost while fn runs (the heartbeat
// failed), fn's context is cancelled and Do returns the lease error.
//
// No transaction is open while fn runs: reading the record, taking the
// lease, and storing the response each run in a short transaction of their
// own (on PostgreSQL each sets the tenant), so a slow fn holds no
// connection and no lock.
func (s *Store) Do(ctx context.Context, scope, key, fingerprint string, fn func(ctx context.Context, call *Call) ([]byte, error)) (*Result, error) {
	if err := validate(scope, key, fingerprint); err != nil {
		return nil, err
	}
	call := &Call{s: s, tenant: tenant.From(ctx), scope: scope, key: key, holder: claim.NewHolder()}
	var replay *Result
	err := send.Run(ctx, s.db, s.db, func(exec racefree.Executor) error {
		var err error
		replay, err = s.replayIfDone(ctx, exec, call, fingerprint)
		return err
	})
	if err != nil || replay != nil {
		return replay, err
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		replay, err = s.begin(ctx, tx, call, fingerprint)
		return err
	})
	if err != nil || replay != nil {
		return replay, err
	}

	runCtx, stop := context.WithCancel(ctx)
	var leaseErr error
	heartbeat := make(chan struct{})
	go func() {
		defer close(heartbeat)
		leaseErr = s.heartbeat(runCtx, call)
		if leaseErr != nil {
			stop()
		}
	}()
	response, fnErr := fn(runCtx, call)
	// fn has run: from here on nothing the caller does may cancel the
	// recording of its outcome (invariant 9), only CompleteTimeout.
	after, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.CompleteTimeout)
	defer cancel()
	stop()
	<-heartbeat
	if leaseErr != nil {
		return nil, fmt.Errorf("idempotency: lease lost while running: %w", leaseErr)
	}
	if fnErr != nil {
		// Free the key for the retry at once; failing that, it lapses.
		_ = s.release(after, s.db, call)
		return nil, fnErr
	}
	err = s.inTx(after, func(tx *sql.Tx) error { return s.complete(after, tx, call, response) })
	if err != nil {
		return nil, err
	}
	return &Result{Response: response}, nil
}

// DoTx is Do inside the caller's transaction tx: fn gets tx, and the claim,
// fn's writes and the stored response commit or roll back together. No
// in-progress state is visible outside tx. A duplicate running at the same
// time waits for tx (PostgreSQL row lock, SQLite write lock) and then
// replays the committed response.
//
// When fn fails, DoTx releases the key's lease in tx and returns fn's
// error, nothing stored: a caller that commits tx all the same (its own
// writes, say) leaves the key as a failed Do does, free for a retry with
// the same fingerprint, which runs fn again at once (another fingerprint
// is ErrMismatch, as after Do), never one that waits out the lease as
// a request in progress.
//
// The key belongs to ctx's tenant, and so must tx: on PostgreSQL DoTx sets
// tx's tenant when it has none ([send.Run]), and fails with a
// *tenant.MismatchError when tx belongs to another tenant.
func (s *Store) DoTx(ctx context.Context, tx *sql.Tx, scope, key, fingerprint string, fn func(ctx context.Context, tx *sql.Tx, call *Call) ([]byte, error)) (*Result, error) {
	if err := validate(scope, key, fingerprint); err != nil {
		return nil, err
	}
	call := &Call{s: s, tenant: tenant.From(ctx), scope: scope, key: key, holder: claim.NewHolder(), tx: tx}
	var replay *Result
	err := send.Run(ctx, s.db, tx, func(racefree.Executor) error {
		var err error
		if replay, err = s.replayIfDone(ctx, tx, call, fingerprint); err != nil || replay != nil {
			return err
		}
		replay, err = s.begin(ctx, tx, call, fingerprint)
		return err
	})
	if err != nil || replay != nil {
		return replay, err
	}
	response, err := fn(ctx, tx, call)
	after, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.CompleteTimeout)
	defer cancel()
	if err != nil {
		// Free the key in tx, as Do frees it on the pool: a caller that
		// commits tx all the same leaves no lease for the retry to wait
		// out. Where tx can run no more (a statement of fn failed on
		// PostgreSQL), it cannot commit either, and nothing was begun.
		_ = send.Run(after, s.db, tx, func(racefree.Executor) error { return s.release(after, tx, call) })
		return nil, err
	}
	err = send.Run(after, s.db, tx, func(racefree.Executor) error { return s.complete(after, tx, call, response) })
	if err != nil {
		return nil, err
	}
	return &Result{Response: response}, nil
}

// replayIfDone is the fast path: a completed record is immutable until it
// expires, so a replay (or a mismatch) needs no lease, only a read in exec,
// which belongs to call's tenant (Do: a statement on SQLite, a short
// transaction that sets the tenant on PostgreSQL). On a PostgreSQL primary
// with a synchronous standby the read (get.sql) locks the record FOR KEY
// SHARE, so that the statement's or transaction's COMMIT, which comes
// before the replay is answered, waits for the standby past the record's
// commit: a record visible on the primary alone (its own wait for the
// standby cancelled) is never acknowledged until the standby has it, and
// the replay fails when ctx ends first. It returns nil, nil when the
// request must go on to begin.
func (s *Store) replayIfDone(ctx context.Context, exec racefree.Executor, call *Call, fingerprint string) (*Result, error) {
	rec, err := s.get(ctx, exec, call)
	switch {
	case errors.Is(err, racefree.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("idempotency: %w", err)
	case rec.fingerprint != fingerprint:
		return nil, mismatch(call.key)
	case rec.status == "completed":
		return &Result{Response: rec.response, Replayed: true}, nil
	}
	return nil, nil
}

// begin takes the key's lease and creates or reads its record, in exec,
// which belongs to call's tenant. It returns a replay for a completed
// record, an error for a duplicate in progress or a mismatch, and nil, nil
// when call now holds the lease and fn must run.
func (s *Store) begin(ctx context.Context, exec racefree.Executor, call *Call, fingerprint string) (*Result, error) {
	c, err := s.claims.Acquire(ctx, exec, call.claimKey(), call.holder, s.opts.Lease)
	var held *claim.HeldError
	switch {
	case errors.As(err, &held):
		// Someone holds the lease: running, or finished and not yet
		// lapsed. The record says which.
		rec, err := s.get(ctx, exec, call)
		switch {
		case err == nil && rec.fingerprint != fingerprint:
			return nil, mismatch(call.key)
		case err == nil && rec.status == "completed":
			return &Result{Response: rec.response, Replayed: true}, nil
		case err != nil && !errors.Is(err, racefree.ErrNotFound):
			return nil, err
		}
		return nil, &InProgressError{RetryAfter: max(held.Claim.ExpiresAt.Sub(held.Claim.LastSeen), time.Second)}
	case err != nil:
		return nil, fmt.Errorf("idempotency: %w", err)
	}
	call.fence = c.Fence
	if _, err := exec.ExecContext(ctx, s.q.Get("begin"), call.tenant, call.scope, call.key, fingerprint, s.opts.Retention.Milliseconds(), wire.Of(s.db).ClockArg()); err != nil {
		return nil, fmt.Errorf("idempotency begin: %w", wire.Of(s.db).InterpretError(err))
	}
	rec, err := s.get(ctx, exec, call)
	if err != nil {
		return nil, fmt.Errorf("idempotency begin: %w", err)
	}
	if rec.fingerprint != fingerprint {
		return nil, errors.Join(mismatch(call.key), s.release(ctx, exec, call))
	}
	if rec.status == "completed" {
		return &Result{Response: rec.response, Replayed: true}, s.release(ctx, exec, call)
	}
	return nil, nil
}

// complete stores response, conditioned on call's lease, and releases it,
// in tx, which belongs to call's tenant.
func (s *Store) complete(ctx context.Context, tx *sql.Tx, call *Call, response []byte) error {
	if err := s.claims.Guard(ctx, tx, call.claimKey(), call.holder, call.fence); err != nil {
		return fmt.Errorf("idempotency complete: %w", err)
	}
	res, err := tx.ExecContext(ctx, s.q.Get("complete"), call.tenant, call.scope, call.key, response, s.opts.Retention.Milliseconds(), wire.Of(s.db).ClockArg())
	if err != nil {
		return fmt.Errorf("idempotency complete: %w", wire.Of(s.db).InterpretError(err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("idempotency complete: record of %q is no longer in progress (%d rows, %v)", call.key, n, err)
	}
	return s.release(ctx, tx, call)
}

func (s *Store) release(ctx context.Context, exec racefree.Executor, call *Call) error {
	return s.claims.Release(ctx, exec, call.claimKey(), call.holder, call.fence)
}

// heartbeat renews call's lease every Lease/3 until ctx ends. It returns
// the error when a renewal finds the lease lost; transient failures are
// retried at the next tick.
func (s *Store) heartbeat(ctx context.Context, call *Call) error {
	t := time.NewTicker(s.opts.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			_, err := s.claims.Renew(ctx, s.db, call.claimKey(), call.holder, call.fence, s.opts.Lease)
			if errors.Is(err, racefree.ErrStaleFence) || errors.Is(err, racefree.ErrNotHeld) {
				return err
			}
		}
	}
}

type record struct {
	fingerprint, status string
	response            []byte
}

// get reads call's live record in exec, which belongs to call's tenant.
func (s *Store) get(ctx context.Context, exec racefree.Executor, call *Call) (*record, error) {
	var r record
	err := exec.QueryRowContext(ctx, s.q.Get("get"), call.tenant, call.scope, call.key, wire.Of(s.db).ClockArg()).Scan(&r.fingerprint, &r.status, &r.response)
	if err != nil {
		return nil, wire.Of(s.db).InterpretError(err)
	}
	return &r, nil
}

// Reap deletes expired records, recovery points and the leases of keys
// idle for the retention period, of every tenant ([tenant.Each], one tenant
// at a time), batch rows per statement (0: 1000), until none is left or
// ctx ends, and returns how many records and recovery points it deleted.
// Each batch deletes rows of one tenant expired at its start, found
// through the (tenant, expiry) index, and skips, on PostgreSQL, rows that
// a transaction holds: a record restarted while Reap runs is never
// deleted. On SQLite, which has one writer at a time, Reap pauses between
// batches for as long as the batch took, so that it holds the write lock
// at most half the time. Reap runs on the pool, never in the caller's
// transaction: each batch commits on its own (on PostgreSQL in a short
// transaction set to its tenant), so that no lock is held for a whole run.
func (s *Store) Reap(ctx context.Context, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	err := reaper.EachTenant(ctx, s.db, func(ctx context.Context) error {
		n, err := s.reapTenant(ctx, batch)
		total += n
		return err
	})
	if err != nil {
		return total, fmt.Errorf("idempotency reap: %w", err)
	}
	if _, err := s.claims.Reap(ctx, s.opts.Retention, batch); err != nil {
		return total, fmt.Errorf("idempotency reap: %w", err)
	}
	return total, nil
}

// reapTenant deletes the expired records and recovery points of ctx's
// tenant, in batches.
func (s *Store) reapTenant(ctx context.Context, batch int) (int64, error) {
	id := tenant.From(ctx)
	var total int64
	for _, q := range []string{"reap", "reap_steps"} {
		n, err := reaper.Run(ctx, s.db.Engine(), batch, func() (int64, error) {
			var n int64
			err := send.Run(ctx, s.db, s.db, func(exec racefree.Executor) error {
				var cutoff int64
				if err := exec.QueryRowContext(ctx, s.q.Get("now"), wire.Of(s.db).ClockArg()).Scan(&cutoff); err != nil {
					return err
				}
				res, err := exec.ExecContext(ctx, s.q.Get(q), id, batch, cutoff)
				if err != nil {
					return err
				}
				n, err = res.RowsAffected()
				return err
			})
			return n, wire.Of(s.db).InterpretError(err)
		})
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func validate(scope, key, fingerprint string) error {
	if scope != "" { // the empty scope is one scope like any other
		if err := racefree.CheckText("scope", scope, MaxScopeBytes); err != nil {
			return err
		}
	}
	if err := racefree.CheckText("idempotency key", key, MaxKeyBytes); err != nil {
		return err
	}
	return racefree.CheckText("fingerprint", fingerprint, MaxFingerprintBytes)
}

func mismatch(key string) error {
	return fmt.Errorf("idempotency key %q: %w", key, racefree.ErrMismatch)
}

// claimKey names the lease of (scope, key) within the claim key limit.
func claimKey(scope, key string) string {
	h := sha256.Sum256([]byte(scope + "\x00" + key))
	return hex.EncodeToString(h[:])
}
