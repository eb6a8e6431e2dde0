package claim

import (
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/reaper"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

//go:embed sql
var sqlFiles embed.FS

// Limits on input. Anything outside them is rejected with a
// *racefree.InputError before the database is touched.
const (
	MaxKeyBytes    = 256
	MaxHolderBytes = 128
	MinTTL         = time.Millisecond
	MaxTTL         = 30 * 24 * time.Hour
)

// Claim represents the state of one key's claim.
type Claim struct {
	Key       string
	Holder    string    // the holder of the current (or last) tenure
	Fence     int64     // grows by one with each new tenure (jumps past a failover on PostgreSQL: see the package doc)
	ClaimedAt time.Time // when the current tenure began
	ExpiresAt time.Time // the claim is live while now < ExpiresAt
	Live      bool      // whether it was live at the moment it was read

	Count     int64     // acquire attempts on this key, winners and losers
	FirstSeen time.Time // the first attempt
	LastSeen  time.Time // the latest attempt
}

// HeldError reports that another holder's claim is live. It matches
// [racefree.ErrHeld], and carries the live claim, including the occurrence
// figures after the caller's own attempt.
type HeldError struct {
	Claim Claim
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("claim %q is held by %q (fence %d) until %s",
		e.Claim.Key, e.Claim.Holder, e.Claim.Fence, e.Claim.ExpiresAt.Format(time.RFC3339Nano))
}

// Is matches [racefree.ErrHeld].
func (e *HeldError) Is(target error) bool { return target == racefree.ErrHeld }

// StaleFenceError reports that the caller's tenure is over and another
// began: the current fence is higher than the caller's. It matches
// [racefree.ErrStaleFence].
type StaleFenceError struct {
	Key     string
	Fence   int64 // the caller's
	Current int64 // the claim's
}

func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("claim %q: fence %d is stale, the current fence is %d", e.Key, e.Fence, e.Current)
}

// Is matches [racefree.ErrStaleFence].
func (e *StaleFenceError) Is(target error) bool { return target == racefree.ErrStaleFence }

// Store represents the claims of one namespace. Namespaces keep the keys of
// racefree's own primitives (dedup, idempotency) apart from application
// keys. A Store is safe for concurrent use.
type Store struct {
	db *racefree.DB
	ns string
	q  query.Set
}

// New returns the Store of application claims. It does no I/O.
func New(db *racefree.DB) *Store { return NewNamespace(db, "") }

// NewNamespace returns the Store of namespace ns. It does no I/O.
func NewNamespace(db *racefree.DB, ns string) *Store {
	return &Store{db: db, ns: ns, q: query.MustLoad(sqlFiles, "sql", db.Engine())}
}

// Acquire takes the claim on key for holder until now + ttl and returns it.
//
// It wins when the key was never claimed, or its claim lapsed or was
// released: the fence then grows by one (or, on PostgreSQL after a
// failover, jumps to the new timeline's floor). It also wins, keeping the fence
// and extending the expiry, when holder already holds the live claim, so a
// retry after a lost reply gets the caller's own claim back. Otherwise it
// returns a *HeldError ([racefree.ErrHeld]) carrying the live claim. Every
// attempt, won or lost, counts in Count and LastSeen.
//
// A key with no row starts one above the namespace's fence floor: fence 1
// until Reap has run in the namespace, and afterwards above every fence
// Reap deleted there, so a fence never goes backwards after a reap. On
// PostgreSQL, inserting a new row takes a second statement that reads the
// floor again with a fresh snapshot, in the same transaction, so that no
// reader sees, and no crash leaves, the fence before its raise: in the
// caller's transaction it runs when the first statement inserted; on the
// pool, where the tenant travels with the statements ([send.Do]),
// both go in one round trip, the second written to find the inserted row
// without its fence. A tenant's first call in a process, which registers
// the tenant, and calls on SQLite run the two one after the other.
//
// With [racefree.Config.Combine] on (the default), Acquire, Renew and Release on the pool
// send their statements in a batch with the concurrent calls of the same
// tenant ([send.Do]): one transaction and one commit for the batch, and
// the same outcome as alone. Calls on one key run in the order they came,
// each on the state the one before it left, one batch each: their
// statements have forms over arrays on both engines, which see the key
// once. On PostgreSQL a batch of
// two or more acquires (or renewals, or releases) runs as one statement
// over arrays of the calls' arguments, plus, for acquires, one more that
// raises new fences above the floor (acquire_many.sql, raise_new_many.sql);
// on SQLite eight or more acquires (renewals, releases) of a batch run as
// one statement over a JSON array of their arguments (acquire_many.sql,
// renew_many.sql, release_many.sql), and fewer one by one.
// Each call returns after its batch committed. A call whose context ends while it waits for a
// batch returns the context's error and never ran; once its batch began,
// it returns the batch's outcome, unless ctx's deadline passes while the
// batch still waits for the database (a lock another transaction holds):
// the batch then commits nothing, and the call returns ctx's error, as
// it would alone. A call whose batch's commit got no
// answer (a connection lost once it was sent) may have taken effect: it
// returns an error matching [racefree.ErrUnavailable], as a call alone does
// then, and never runs again by itself; Get, or a retry by the same
// holder, settles it.
//
// The claim belongs to the tenant ctx names ([tenant.From]): another
// tenant's claim on the same key is another claim. exec may be the
// caller's transaction (READ COMMITTED on PostgreSQL): the claim then
// commits or rolls back with it. Holder names must be unique per worker:
// two workers sharing a name share the claim. Keys (1 to MaxKeyBytes) and
// holders (1 to MaxHolderBytes) must be UTF-8 without a NUL byte; anything
// else is an *racefree.InputError and writes nothing.
func (s *Store) Acquire(ctx context.Context, exec racefree.Executor, key, holder string, ttl time.Duration) (*Claim, error) {
	a, err := s.Acquisition(ctx, key, holder, ttl)
	if err != nil {
		return nil, err
	}
	// On the pool of PostgreSQL, one round trip: acquire and raise_new (the
	// same raise as below, for a fence not yet known) in one transaction.
	// With the combiner on, the same statements in a batch of concurrent
	// calls (SQLite: acquire alone, whose statement sees every commit).
	way, err := send.Do(ctx, s.db, exec, &send.Op{Key: a.Key, Stmts: a.Stmts, Pipeline: true, Alone: a.Stmts[0]})
	if err != nil {
		return nil, fmt.Errorf("claim acquire: %w", err)
	}
	pipelined := way == send.Together
	c := a.claim(pipelined)
	if a.inserted && !pipelined {
		// The statement read the floor in its snapshot, which can predate a
		// reap that committed before the insert; a fresh statement reads it
		// again (PostgreSQL only: SQLite's statement sees every commit).
		err := send.One(ctx, s.db, exec, &wire.Statement{Query: s.q.Get("raise_to_floor"),
			Args: []any{a.id, s.ns, key, holder, c.Fence}, Dest: []any{&c.Fence}})
		if err != nil && !errors.Is(err, racefree.ErrNotFound) {
			return nil, fmt.Errorf("claim acquire: %w", err)
		}
	}
	return a.outcome(c)
}

// Acquisition is an Acquire that a sibling primitive sends with
// statements of its own, in one transaction on the pool (dedup's Observe
// through the combiner, with the event it stores): Stmts are the
// statements Acquire sends on the pool of the engine, Key names the
// claim's row to the combiner, and Result reads what the statements
// returned as Acquire does. Racefree's own packages use it; it is not
// meant for applications.
type Acquisition struct {
	// Key is the claim's key for the combiner (send.Op.Key): the one Acquire, Renew
	// and Release of the same key pass, so that an operation that carries
	// these statements runs in turn with them, in the order they came.
	Key string
	// Stmts are acquire, then, on PostgreSQL, raise_new (each with its
	// Many form), which must run in one transaction, in this order,
	// before Result is called.
	Stmts []*wire.Statement

	id, key, holder string
	r               row
	inserted        bool
	raised          int64
}

// Acquisition returns the statements of an Acquire of key by holder for
// ttl, in the tenant ctx names, without running them. It validates as
// Acquire does: bad input is an *racefree.InputError, and nothing is built.
func (s *Store) Acquisition(ctx context.Context, key, holder string, ttl time.Duration) (*Acquisition, error) {
	if err := validate(key, holder, ttl); err != nil {
		return nil, err
	}
	a := &Acquisition{Key: s.combineKey(key), id: tenant.From(ctx), key: key, holder: holder}
	acquire := &wire.Statement{Query: s.q.Get("acquire"),
		Args: []any{a.id, s.ns, key, holder, ttl.Milliseconds(), wire.Of(s.db).ClockArg()}, Clock: 6, Dest: a.r.dest(&a.inserted)}
	a.Stmts = []*wire.Statement{acquire}
	if wire.Of(s.db).CanMany() {
		acquire.Many = s.q.Get("acquire_many")
	}
	if wire.Of(s.db).CanPipeline() {
		a.Stmts = append(a.Stmts, &wire.Statement{Query: s.q.Get("raise_new"), Many: s.q.Get("raise_new_many"),
			Args: []any{a.id, s.ns, key, holder}, Dest: []any{&a.raised}})
	}
	return a, nil
}

// Result returns what Acquire returns once every statement of a.Stmts ran
// in one transaction that committed: the caller's claim, or a *HeldError
// ([racefree.ErrHeld]) carrying the live claim of another holder, with the
// fence raised_new raised. Before the statements ran, it reads zeroes.
func (a *Acquisition) Result() (*Claim, error) { return a.outcome(a.claim(true)) }

// claim is the row the acquire statement returned, with the fence
// raise_new raised when it ran in the same transaction (together).
func (a *Acquisition) claim(together bool) *Claim {
	c := a.r.claim(a.key)
	if together && a.raised > 0 {
		c.Fence = a.raised
	}
	return c
}

// outcome is the caller's claim, or a *HeldError when c is another
// holder's. A lost attempt still counted: it commits like a won one.
func (a *Acquisition) outcome(c *Claim) (*Claim, error) {
	if c.Holder != a.holder {
		return nil, &HeldError{Claim: *c}
	}
	return c, nil
}

// Renew extends the live claim of (holder, fence) to now + ttl and keeps
// the fence. It returns a *StaleFenceError when another tenure began since,
// an error matching [racefree.ErrNotHeld] when the claim lapsed, was reaped,
// is not the caller's, or fence is ahead of the current fence (never
// issued), and an *racefree.InputError for a fence below 1. A renewal whose
// reply was lost can simply be retried.
func (s *Store) Renew(ctx context.Context, exec racefree.Executor, key, holder string, fence int64, ttl time.Duration) (*Claim, error) {
	if err := validate(key, holder, ttl); err != nil {
		return nil, err
	}
	if err := ValidateFence(fence); err != nil {
		return nil, err
	}
	id := tenant.From(ctx)
	var r row
	renew := &wire.Statement{Query: s.q.Get("renew"),
		Args: []any{id, s.ns, key, holder, fence, ttl.Milliseconds(), wire.Of(s.db).ClockArg()}, Clock: 7, Dest: r.dest()}
	if wire.Of(s.db).CanMany() {
		renew.Many = s.q.Get("renew_many")
	}
	_, err := send.Do(ctx, s.db, exec, &send.Op{Key: s.combineKey(key), Stmts: []*wire.Statement{renew}, Alone: renew})
	if errors.Is(err, racefree.ErrNotFound) {
		return nil, s.whyNot(ctx, exec, id, key, holder, fence)
	}
	if err != nil {
		return nil, fmt.Errorf("claim renew: %w", err)
	}
	return r.claim(key), nil
}

// Release ends the tenure of (holder, fence) now, so the key is free at once.
// Releasing a tenure that lapsed without being taken over succeeds, and so
// does releasing it again, so a release whose reply was lost can be
// retried while no other tenure began. It returns a *StaleFenceError when
// another tenure began since: after a lost reply that includes a takeover
// of the key the lost release freed, so a retry refused with a stale fence
// does not say the first attempt released nothing (the outcome is unknown).
// It returns an error matching [racefree.ErrNotHeld] when the claim is not
// the caller's or fence is ahead of the current fence. A fence below 1 is
// an *racefree.InputError.
func (s *Store) Release(ctx context.Context, exec racefree.Executor, key, holder string, fence int64) error {
	if err := validateHolder(key, holder); err != nil {
		return err
	}
	if err := ValidateFence(fence); err != nil {
		return err
	}
	id := tenant.From(ctx)
	release := &wire.Statement{Query: s.q.Get("release"), Args: []any{id, s.ns, key, holder, fence, wire.Of(s.db).ClockArg()}, Clock: 6}
	if wire.Of(s.db).CanMany() {
		release.Many = s.q.Get("release_many")
	}
	_, err := send.Do(ctx, s.db, exec, &send.Op{Key: s.combineKey(key), Stmts: []*wire.Statement{release}, Alone: release})
	if err != nil {
		return fmt.Errorf("claim release: %w", err)
	}
	if release.RowsAffected == 0 {
		return s.whyNot(ctx, exec, id, key, holder, fence)
	}
	return nil
}

// Guard fails unless (holder, fence) holds the live claim on key, and keeps
// it so until tx ends: on PostgreSQL it locks the claim row FOR SHARE, so a
// takeover waits for tx to commit; on SQLite tx's write lock excludes every
// other writer. Writes made in tx after a successful Guard are therefore
// exclusive to the holder. It returns the same errors as Renew. On
// PostgreSQL it sets tx's tenant when tx has none ([send.Run]).
func (s *Store) Guard(ctx context.Context, tx *sql.Tx, key, holder string, fence int64) error {
	if err := validateHolder(key, holder); err != nil {
		return err
	}
	if err := ValidateFence(fence); err != nil {
		return err
	}
	var refused error
	err := send.Run(ctx, s.db, tx, func(exec racefree.Executor) error {
		id := tenant.From(ctx)
		var one int
		err := wire.Of(s.db).InterpretError(exec.QueryRowContext(ctx, s.q.Get("guard"), id, s.ns, key, holder, fence, wire.Of(s.db).ClockArg()).Scan(&one))
		if errors.Is(err, racefree.ErrNotFound) {
			refused = s.whyNot(ctx, exec, id, key, holder, fence)
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("claim guard: %w", err)
	}
	return refused
}

// Get returns the current state of key's claim, or an error matching
// [racefree.ErrNotFound].
func (s *Store) Get(ctx context.Context, exec racefree.Executor, key string) (*Claim, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	c, err := s.get(ctx, exec, tenant.From(ctx), key)
	if err != nil {
		return nil, fmt.Errorf("claim get: %w", err)
	}
	return c, nil
}

// combineKey names key's row to the combiner ([send.Do]): the
// tenant is its group, so the namespace and the key. SQLite's Many forms
// (sql/sqlite/*_many.sql) name a row's call by the same text, 'claim',
// NUL, ns, NUL, key: change them together.
func (s *Store) combineKey(key string) string { return "claim\x00" + s.ns + "\x00" + key }

// get reads key's claim for tenant id ([send.ReadRow]: it writes nothing).
func (s *Store) get(ctx context.Context, exec racefree.Executor, id, key string) (*Claim, error) {
	var r row
	err := send.ReadRow(ctx, s.db, exec, s.q.Get("get"), []any{id, s.ns, key, wire.Of(s.db).ClockArg()}, r.dest()...)
	if err != nil {
		return nil, err
	}
	return r.claim(key), nil
}

// Reap deletes the namespace's claims that lapsed at least grace ago, in
// every tenant, batch rows per statement (0: 1000), until none is left or
// ctx ends, and returns how many it deleted. It reaps one tenant at a time
// ([tenant.Each]), each batch in a transaction of that tenant, so on
// PostgreSQL row-level security lets it see that tenant's rows only.
// Claims with a NULL expiry (written before migration 002, never claimed
// since) and live claims are kept: on PostgreSQL a claim that a caller's
// open transaction is re-acquiring is skipped (locked rows are not waited
// for), and the expiry test is re-checked on the row's latest version.
//
// Reaping never makes a fence go backwards: in the transaction that
// deletes a batch, Reap raises the fence floor of the tenant's namespace
// to the highest fence it deleted, and Acquire starts a key that has no
// row one above the floor. A holder that outlived its reaped row gets
// ErrNotHeld from Renew, Release and Guard, and its fence is lower than
// any fence issued for the key afterwards. Grace is therefore only about
// how long a lapsed claim stays readable (Get, Count, FirstSeen); for
// idempotency leases it is the retention period.
//
// Each batch's cutoff (now - grace) is computed once, from the engine's
// clock, so the (tenant, ns, expires_at) index is used at every batch
// size. On SQLite, where a batch holds the database's only write lock,
// Reap waits after each full batch as long as the batch took, so that
// writers get the lock in between.
//
// Before migration 011 (tenants) it deletes nothing and returns an error
// matching [racefree.ErrSchemaOutdated].
func (s *Store) Reap(ctx context.Context, grace time.Duration, batch int) (int64, error) {
	if grace < 0 {
		return 0, racefree.Invalid("grace", "must not be negative")
	}
	if batch <= 0 {
		batch = 1000
	}
	var total int64
	err := reaper.EachTenant(ctx, s.db, func(ctx context.Context) error {
		n, err := reaper.Run(ctx, s.db.Engine(), batch, func() (int64, error) {
			var n int
			err := tenant.InTx(ctx, s.db, tenant.From(ctx), func(ctx context.Context, tx *sql.Tx) error {
				keys, err := s.ReapBatch(ctx, tx, grace, batch)
				n = len(keys)
				return err
			})
			return int64(n), err
		})
		total += n
		return err
	})
	if err != nil {
		return total, fmt.Errorf("claim reap: %w", err)
	}
	return total, nil
}

// ReapBatch deletes up to batch of the claims of the namespace, in the
// tenant ctx names, that lapsed at least grace ago, raises the fence floor
// of the tenant's namespace over them, and returns their keys, all in tx.
// It is one batch of Reap, for primitives that keep rows beside their
// claims and delete them in the same transaction (dedup deletes the events
// of the fingerprints it reaps). The claims a concurrent transaction holds
// locked are skipped. tx must be READ COMMITTED (the default); on
// PostgreSQL its tenant is set when it has none ([send.Run]).
func (s *Store) ReapBatch(ctx context.Context, tx *sql.Tx, grace time.Duration, batch int) ([]string, error) {
	if grace < 0 {
		return nil, racefree.Invalid("grace", "must not be negative")
	}
	if batch <= 0 {
		return nil, racefree.Invalid("batch", "must be positive")
	}
	var keys []string
	err := send.Run(ctx, s.db, tx, func(exec racefree.Executor) error {
		id := tenant.From(ctx)
		now, err := s.now(ctx, exec)
		if err != nil {
			return wire.Of(s.db).InterpretError(err)
		}
		cutoff := now - grace.Milliseconds()
		if s.db.Engine() == racefree.SQLite {
			// No data-modifying CTE in SQLite: raise the floor over the same
			// selection first; the write lock keeps the two statements together.
			if _, err := exec.ExecContext(ctx, s.q.Get("reap_floor"), id, s.ns, cutoff, batch); err != nil {
				return wire.Of(s.db).InterpretError(err)
			}
		}
		rows, err := exec.QueryContext(ctx, s.q.Get("reap"), id, s.ns, cutoff, batch)
		if err != nil {
			return wire.Of(s.db).InterpretError(err)
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return wire.Of(s.db).InterpretError(err)
			}
			keys = append(keys, k)
		}
		return wire.Of(s.db).InterpretError(rows.Err())
	})
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// now reads the clock a query would: the injected Clock, or the engine's.
func (s *Store) now(ctx context.Context, exec racefree.Executor) (int64, error) {
	if c := wire.Of(s.db).ClockArg(); c != nil {
		return c.(int64), nil
	}
	var now int64
	err := exec.QueryRowContext(ctx, s.q.Get("now")).Scan(&now)
	return now, err
}

// whyNot settles which error a Renew, Release or Guard that matched no row
// returns. The statement has already decided the outcome; this read only
// tells the caller why.
func (s *Store) whyNot(ctx context.Context, exec racefree.Executor, id, key, holder string, fence int64) error {
	c, err := s.get(ctx, exec, id, key)
	switch {
	case errors.Is(err, racefree.ErrNotFound):
		return fmt.Errorf("claim %q: %w: no such claim", key, racefree.ErrNotHeld)
	case err != nil:
		return err
	case c.Fence > fence:
		return &StaleFenceError{Key: key, Fence: fence, Current: c.Fence}
	case c.Fence < fence:
		return fmt.Errorf("claim %q: %w: fence %d is ahead of the current fence %d and was never issued", key, racefree.ErrNotHeld, fence, c.Fence)
	case c.Holder != holder || c.Fence != fence:
		return fmt.Errorf("claim %q: %w: held by %q at fence %d", key, racefree.ErrNotHeld, c.Holder, c.Fence)
	}
	return fmt.Errorf("claim %q: %w: lapsed at %s", key, racefree.ErrNotHeld, c.ExpiresAt.Format(time.RFC3339Nano))
}

// row receives the columns every lease query returns.
type row struct {
	holder                  string
	fence, claimed, expires sql.NullInt64
	count, first, last, now int64
}

// dest returns the scan targets of the columns, then extra.
func (r *row) dest(extra ...any) []any {
	return append([]any{&r.holder, &r.fence, &r.claimed, &r.expires, &r.count, &r.first, &r.last, &r.now}, extra...)
}

func (r *row) claim(key string) *Claim {
	c := Claim{
		Key: key, Holder: r.holder, Fence: r.fence.Int64, Count: r.count,
		FirstSeen: racefree.FromMillis(r.first), LastSeen: racefree.FromMillis(r.last),
	}
	if r.claimed.Valid {
		c.ClaimedAt = racefree.FromMillis(r.claimed.Int64)
	}
	if r.expires.Valid {
		c.ExpiresAt = racefree.FromMillis(r.expires.Int64)
		c.Live = r.now < r.expires.Int64
	}
	return &c
}

// NewHolder returns a random holder name (24 hex digits), unique to the
// caller, for callers that have no stable worker name of their own.
func NewHolder() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func validate(key, holder string, ttl time.Duration) error {
	if err := validateHolder(key, holder); err != nil {
		return err
	}
	if ttl < MinTTL || ttl > MaxTTL {
		return racefree.Invalid("ttl", "must be between %v and %v, got %v", MinTTL, MaxTTL, ttl)
	}
	return nil
}

func validateHolder(key, holder string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	return racefree.CheckText("holder", holder, MaxHolderBytes)
}

func validateKey(key string) error {
	return racefree.CheckText("key", key, MaxKeyBytes)
}

// ValidateFence returns an *racefree.InputError unless fence is positive:
// Acquire never issues a fence below 1.
func ValidateFence(fence int64) error {
	if fence <= 0 {
		return racefree.Invalid("fence", "must be positive, got %d", fence)
	}
	return nil
}
