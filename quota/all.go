package quota

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/reaper"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// Request represents one charge of ConsumeAll.
type Request struct {
	Key    string
	N      int64
	Policy Policy
	// ConsumptionKey, when set, makes the charge idempotent (a request id,
	// an order number): a call whose consumption key was charged before
	// (within Options.LedgerKeep) charges nothing under it and returns the
	// first charge's figures, Replayed. The key is bound to the requests
	// that first carried it, each one's Key, Policy (kind, Rate, Per,
	// Burst) and N: the requests of one call that carry one key (a
	// per-hour and a per-day limit for one request id) are each charged
	// once, and each replayed once; a later call that sends the key with
	// other requests is refused with a *ConsumptionKeyReusedError and
	// charges nothing (from migration 017, LedgerFingerprintMigration).
	ConsumptionKey string
}

// ConsumeAll charges every request, all or nothing: it returns an
// admitting Decision only when every request is allowed, and otherwise
// charges none of them. The combined Decision has the smallest Remaining,
// the latest ResetAt and, on a denial, the longest RetryAfter among the
// requests that were refused. A per-second, a daily and a per-tenant
// policy thus either all count a request or none does.
//
// The charges run in one transaction, for the tenant ctx names: on a
// *racefree.DB, a *sql.DB or a *sql.Conn ConsumeAll begins it (on
// PostgreSQL the transaction of [send.Run], which sets the tenant, on the
// *racefree.DB's pool; on SQLite on the executor given, a *racefree.DB
// through InTx, retried on transient conflicts, except for a tenant's
// first call in the process, which runs in [send.Run]'s transaction to
// register the tenant); on the caller's *sql.Tx
// it runs them under a savepoint that it rolls back on a denial, so the
// caller's transaction carries on with its own writes and commits the
// charges with them. Other executors must be inside a transaction for the
// savepoint to work. The consumption keys are the tenant's: the same key
// sent for two tenants charges each once.
//
// A request with a ConsumptionKey records it under a UNIQUE key in the same
// transaction before charging, once per call, bound to the fingerprint of
// the call's requests under that key: a replay charges once, however often
// and concurrently it is sent, and a denial records nothing, so a retry
// after a denial is charged again. The same key sent with other requests
// (another quota key, policy or n, or another set of requests) is a
// *ConsumptionKeyReusedError ([racefree.ErrMismatch]), never a replay: the
// call charges nothing, and under the caller's *sql.Tx the savepoint is
// rolled back. A ledger row written before migration 017, without a
// fingerprint, is replayed whatever the request, as the release that wrote
// it would; before migration 017 (compatible mode) every reuse is
// replayed. Shadow policies never deny; the whole call is
// decided with Policy.Wait of the first request as its bound, and a
// failure to answer follows that policy's OnUnavailable.
func (l *Limiter) ConsumeAll(ctx context.Context, exec racefree.Executor, reqs []Request) (Decision, error) {
	if len(reqs) == 0 || len(reqs) > 64 {
		return Decision{}, racefree.Invalid("requests", "must be 1 to 64, got %d", len(reqs))
	}
	for _, r := range reqs {
		if err := l.check(r.Key, r.N, r.Policy); err != nil {
			return Decision{}, err
		}
		if r.ConsumptionKey != "" {
			if err := racefree.CheckText("consumption key", r.ConsumptionKey, MaxKeyBytes); err != nil {
				return Decision{}, err
			}
		}
	}
	ctx, cancel := l.bound(ctx, reqs[0].Policy)
	defer cancel()
	var d Decision
	run := func(tx racefree.Executor) (err error) {
		d, err = l.all(ctx, tx, reqs)
		return err
	}
	_, callerTx := exec.(*sql.Tx)
	err := send.Run(ctx, l.db, exec, func(ex racefree.Executor) error {
		if _, own := ex.(*sql.Tx); own && !callerTx {
			// send.Run began this transaction for the tenant: a denial
			// (errDenied) rolls it back.
			return run(ex)
		}
		switch e := ex.(type) {
		case *racefree.DB:
			return e.InTx(ctx, func(tx *sql.Tx) error { return run(tx) })
		case *sql.DB:
			return inTx(ctx, func(o *sql.TxOptions) (*sql.Tx, error) { return e.BeginTx(ctx, o) }, run)
		case *sql.Conn:
			return inTx(ctx, func(o *sql.TxOptions) (*sql.Tx, error) { return e.BeginTx(ctx, o) }, run)
		}
		return l.savepoint(ctx, ex, run)
	})
	if errors.Is(err, errDenied) {
		err = nil
	}
	if err != nil {
		return degraded(reqs[0].Policy, fmt.Errorf("quota: consume all: %w", wire.Of(l.db).InterpretError(err)))
	}
	return d, nil
}

// errDenied rolls back the charges of a denied ConsumeAll.
var errDenied = errors.New("quota: denied")

func inTx(ctx context.Context, begin func(*sql.TxOptions) (*sql.Tx, error), run func(racefree.Executor) error) error {
	tx, err := begin(nil)
	if err != nil {
		return err
	}
	if err := run(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// savepoint runs fn under a savepoint of exec's transaction, rolled back
// when fn fails (a denial included, which then returns nil).
func (l *Limiter) savepoint(ctx context.Context, exec racefree.Executor, fn func(racefree.Executor) error) error {
	if _, err := exec.ExecContext(ctx, "SAVEPOINT racefree_quota"); err != nil {
		return err
	}
	if err := fn(exec); err != nil {
		if _, rerr := exec.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT racefree_quota"); rerr != nil {
			return errors.Join(err, rerr)
		}
		_, _ = exec.ExecContext(context.WithoutCancel(ctx), "RELEASE SAVEPOINT racefree_quota")
		if errors.Is(err, errDenied) {
			return nil
		}
		return err
	}
	_, err := exec.ExecContext(ctx, "RELEASE SAVEPOINT racefree_quota")
	return err
}

// LedgerFingerprintMigration is the migration that binds a consumption
// key to the request that first used it (the ledger's fingerprint
// column). Before it, in compatible mode, a consumption key sent with
// another request is replayed, as the previous release did; one call's
// requests under one key are charged once each either way.
const LedgerFingerprintMigration = 17

// ErrConsumptionKeyReused matches every *ConsumptionKeyReusedError.
var ErrConsumptionKeyReused = errors.New("quota: consumption key reused with a different request")

// ConsumptionKeyReusedError reports a ConsumeAll whose consumption key was
// charged before for another request: other quota keys, policies or n
// under the key. Nothing of the call was charged. It matches
// ErrConsumptionKeyReused and [racefree.ErrMismatch], the error of an
// idempotency key sent with another payload (422 over HTTP).
type ConsumptionKeyReusedError struct {
	ConsumptionKey string
}

func (e *ConsumptionKeyReusedError) Error() string {
	return fmt.Sprintf("consumption key %q was charged for a different request", e.ConsumptionKey)
}

// Is reports ErrConsumptionKeyReused and [racefree.ErrMismatch] as matching.
func (e *ConsumptionKeyReusedError) Is(target error) bool {
	return target == ErrConsumptionKeyReused || target == racefree.ErrMismatch
}

// ledgerEntry is one consumption key of a call: the requests that carry
// it (their places in the call) and their fingerprint.
type ledgerEntry struct {
	key         string
	reqs        []int
	fingerprint string
}

// ledgerEntries groups the requests by consumption key, in the order the
// keys first appear.
func ledgerEntries(reqs []Request) []ledgerEntry {
	var out []ledgerEntry
	at := map[string]int{}
	for i, r := range reqs {
		if r.ConsumptionKey == "" {
			continue
		}
		j, ok := at[r.ConsumptionKey]
		if !ok {
			j = len(out)
			at[r.ConsumptionKey] = j
			out = append(out, ledgerEntry{key: r.ConsumptionKey})
		}
		out[j].reqs = append(out[j].reqs, i)
	}
	for j := range out {
		out[j].fingerprint = fingerprint(reqs, out[j].reqs)
	}
	return out
}

// fingerprint returns the SHA-256, in hex, of the charges at places idx of
// reqs, in no particular order: each one's quota key, policy kind, Rate,
// Per in ms, Burst (GCRA's; the windows ignore it) and n. The policy's
// name, Wait, OnUnavailable and Shadow decide how a charge is answered,
// not what it charges, and are left out.
func fingerprint(reqs []Request, idx []int) string {
	lines := make([]string, 0, len(idx))
	for _, i := range idx {
		r, p := reqs[i], reqs[i].Policy
		burst := int64(0)
		if p.Kind == GCRA {
			burst = p.Burst
		}
		lines = append(lines, fmt.Sprintf("%q %q %d %d %d %d", r.Key, p.Kind, p.Rate, p.Per.Milliseconds(), burst, r.N))
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:])
}

// record writes entry's consumption key to the ledger on tx, bound to the
// entry's fingerprint when bound (migration 017). It reports whether the
// key was charged before, with the figures of that first charge: a replay.
// A key charged before for another request is a
// *ConsumptionKeyReusedError; a row without a fingerprint (written before
// migration 017) is a replay, as the release that wrote it would have it.
func (l *Limiter) record(ctx context.Context, tx racefree.Executor, t string, e ledgerEntry, bound bool) (Decision, bool, error) {
	insert, get, args := "ledger_insert_unbound", "ledger_get_unbound", []any{t, l.scope, e.key, l.ledgerKeep.Milliseconds(), wire.Of(l.db).ClockArg()}
	if bound {
		insert, get, args = "ledger_insert", "ledger_get", append(args, e.fingerprint)
	}
	var first int
	err := tx.QueryRowContext(ctx, l.q.Get(insert), args...).Scan(&first)
	if err == nil {
		return Decision{}, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Decision{}, false, fmt.Errorf("record consumption key: %w", wire.Of(l.db).InterpretError(err))
	}
	var (
		remaining, resetAt int64
		fp                 sql.NullString
		dest               = []any{&remaining, &resetAt}
	)
	if bound {
		dest = append(dest, &fp)
	}
	if err := tx.QueryRowContext(ctx, l.q.Get(get), t, l.scope, e.key).Scan(dest...); err != nil {
		return Decision{}, false, fmt.Errorf("read consumption key: %w", wire.Of(l.db).InterpretError(err))
	}
	if fp.Valid && fp.String != e.fingerprint {
		return Decision{}, false, &ConsumptionKeyReusedError{ConsumptionKey: e.key}
	}
	return Decision{Allowed: true, Remaining: remaining, ResetAt: racefree.FromMillis(resetAt), Replayed: true}, true, nil
}

// all charges every request on tx, and returns errDenied (after setting
// the combined decision) when one was refused, so that the caller rolls
// the charges back. In a transaction it begins itself, errDenied rolls it
// back and is not an error.
//
// It first writes each consumption key of the call to the ledger, once,
// bound to the call's requests under it: a key charged before (a replay)
// skips its requests and brings back the first charge's figures; a key
// charged before for other requests fails the call. Then it charges the
// other requests, and stores with each new key the figures of its
// requests combined, for a replay to return.
func (l *Limiter) all(ctx context.Context, tx racefree.Executor, reqs []Request) (Decision, error) {
	out := Decision{Allowed: true, Remaining: -1}
	t := tenant.From(ctx)
	entries := ledgerEntries(reqs)
	replayed := map[string]bool{}
	if len(entries) > 0 {
		bound, err := wire.Of(l.db).SchemaAtLeast(ctx, tx, LedgerFingerprintMigration)
		if err != nil {
			return Decision{}, wire.Of(l.db).InterpretError(err)
		}
		for _, e := range entries {
			d, replay, err := l.record(ctx, tx, t, e, bound)
			if err != nil {
				return Decision{}, err
			}
			if replay {
				replayed[e.key] = true
				out = combine(out, d)
			}
		}
	}
	denied := false
	figures := map[string]Decision{}
	for _, r := range reqs {
		if replayed[r.ConsumptionKey] {
			continue
		}
		d, err := l.consume(ctx, tx, r.Key, r.N, r.Policy)
		if err != nil {
			return Decision{}, err
		}
		d = shadow(r.Policy, d)
		if !d.Allowed {
			denied = true
		}
		out = combine(out, d)
		if r.ConsumptionKey != "" {
			f, ok := figures[r.ConsumptionKey]
			if !ok {
				f = Decision{Allowed: true, Remaining: -1}
			}
			figures[r.ConsumptionKey] = combine(f, d)
		}
	}
	if denied {
		out.Allowed = false
		return out, errDenied
	}
	for _, e := range entries {
		if replayed[e.key] {
			continue
		}
		f := figures[e.key]
		if _, err := tx.ExecContext(ctx, l.q.Get("ledger_set"), t, l.scope, e.key, f.Remaining, racefree.Millis(f.ResetAt)); err != nil {
			return Decision{}, fmt.Errorf("record consumption key: %w", wire.Of(l.db).InterpretError(err))
		}
	}
	return out, nil
}

// combine folds d into the combined decision c.
func combine(c, d Decision) Decision {
	c.Allowed = c.Allowed && d.Allowed
	if c.Remaining < 0 || d.Remaining < c.Remaining {
		c.Remaining = d.Remaining
	}
	if d.ResetAt.After(c.ResetAt) {
		c.ResetAt = d.ResetAt
	}
	c.RetryAfter = max(c.RetryAfter, d.RetryAfter)
	c.ShadowDenied = c.ShadowDenied || d.ShadowDenied
	c.Replayed = c.Replayed || d.Replayed
	return c
}

// Reap deletes the counters and consumption keys of the Limiter's scope
// that expired (a counter whose bucket is full again or whose window is
// over means the same as no counter), of every tenant racefree has seen,
// one tenant at a time, in batches of at most Options.ReapBatch rows, and
// returns how many it deleted. The number of keys is thus bounded by the
// reaper, not by memory. Each batch is one statement for one tenant
// ([send.Run]: on PostgreSQL in a short transaction that sets the tenant,
// so row-level security admits the batch's rows only), and its cutoff is
// read once from the clock; on PostgreSQL a batch skips rows a charge
// holds locked, and on SQLite Reap waits after each full batch as long as
// the batch took, so that writers get the lock in between. Several
// processes may reap at once.
//
// exec is normally the pool (the *racefree.DB). Given the caller's
// *sql.Tx, Reap deletes the rows of the tenant ctx names only, in that
// transaction: a transaction belongs to one tenant.
func (l *Limiter) Reap(ctx context.Context, exec racefree.Executor) (int64, error) {
	var total int64
	reap := func(ctx context.Context) error {
		for _, name := range []string{"reap", "reap_ledger"} {
			n, err := reaper.Run(ctx, l.db.Engine(), l.reapBatch, func() (int64, error) { return l.reapOnce(ctx, exec, name) })
			total += n
			if err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if _, ok := exec.(*sql.Tx); ok {
		err = reap(ctx)
	} else {
		err = reaper.EachTenant(ctx, l.db, reap)
	}
	if err != nil {
		return total, fmt.Errorf("quota: reap: %w", err)
	}
	return total, nil
}

// reapOnce deletes one batch of the query name's expired rows, of the
// tenant ctx names.
func (l *Limiter) reapOnce(ctx context.Context, exec racefree.Executor, name string) (int64, error) {
	var n int64
	err := send.Run(ctx, l.db, exec, func(exec racefree.Executor) error {
		cutoff, err := l.now(ctx, exec)
		if err != nil {
			return err
		}
		res, err := exec.ExecContext(ctx, l.q.Get(name), tenant.From(ctx), l.scope, cutoff, l.reapBatch)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, wire.Of(l.db).InterpretError(err)
}

// now reads the clock a statement would: the injected Clock, or the
// engine's.
func (l *Limiter) now(ctx context.Context, exec racefree.Executor) (int64, error) {
	if c := wire.Of(l.db).ClockArg(); c != nil {
		return c.(int64), nil
	}
	var now int64
	err := exec.QueryRowContext(ctx, l.q.Get("now")).Scan(&now)
	return now, err
}
