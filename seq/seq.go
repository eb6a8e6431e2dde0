package seq

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

//go:embed sql
var sqlFiles embed.FS

// Limits on input; anything outside them is a *racefree.InputError.
const (
	MaxScopeBytes = 128
	MaxNameBytes  = 128
	// MaxN bounds how many numbers one NextN hands out.
	MaxN = 1_000_000
)

// Migration is the schema version every operation needs: the tenant
// columns ([tenant.TenantsVersion]). Against an older schema (opened with
// [racefree.SchemaAllowOutdated]) every call fails with an error matching
// [racefree.ErrSchemaOutdated] and writes nothing. Tenants other than
// [tenant.Default] need [tenant.KeysVersion].
const Migration = tenant.TenantsVersion

// ErrExhausted means the counter would pass the largest BIGINT
// (9223372036854775807). Nothing was consumed.
var ErrExhausted = errors.New("racefree: sequence exhausted")

// Counters represents the gapless counters of one database. It is safe for
// concurrent use. Every call runs for the tenant its context names
// ([tenant.From]): a counter is (tenant, scope, name), and the scope is a
// namespace inside the tenant.
type Counters struct {
	db *racefree.DB
	q  query.Set
}

// New returns the counters of db. It does no I/O.
func New(db *racefree.DB) *Counters {
	return &Counters{db: db, q: query.MustLoad(sqlFiles, "sql", db.Engine())}
}

// Next returns the next number of the tenant's (scope, name) counter,
// counting from 1, in exec. It is NextN with n = 1.
func (c *Counters) Next(ctx context.Context, exec racefree.Executor, scope, name string) (int64, error) {
	return c.NextN(ctx, exec, scope, name, 1)
}

// NextN hands out n consecutive numbers of the tenant's (scope, name)
// counter in exec and returns the first of them; the others are first+1 …
// first+n-1. The tenant is tenant.From(ctx); another tenant's counter of
// the same scope and name is another counter.
//
// Pass the caller's transaction: the numbers are then gapless when it
// commits, and nothing is consumed when it rolls back (the next caller gets
// the same numbers). The counter's row stays locked until that transaction
// ends, so keep it short; other counters never wait for it. Passed the
// *racefree.DB (or a *sql.DB), NextN commits at once: on SQLite it runs
// one statement on its own, on PostgreSQL one statement sent in one
// round trip with the setting of its tenant ([send.QueryRow]). A caller's transaction
// set to another tenant ([tenant.InTx]) is a *tenant.MismatchError.
//
// On the pool of PostgreSQL, an error matching [racefree.ErrUnavailable]
// may come after the commit (its reply was lost, or ctx ended once it
// was sent): the numbers may be committed and then belong to nobody, and
// calling NextN again hands out the next ones. Use NextKeyed where that
// gap matters.
//
// On PostgreSQL at REPEATABLE READ or SERIALIZABLE, an increment of the
// same counter committed after the transaction's snapshot makes NextN fail
// with an error matching [racefree.ErrRetryable] (SQLSTATE 40001): roll the
// transaction back and run all of it again. [racefree.DB.InTx] does so
// itself. On SQLite the transaction must hold the write lock before it
// reads (racefree begins every transaction IMMEDIATE); a deferred
// transaction begun elsewhere gets [racefree.ErrRetryable] too.
//
// It returns an *racefree.InputError for an empty or oversized scope or
// name or an n outside 1..MaxN, and ErrExhausted when the counter would
// pass the largest BIGINT; nothing is consumed then. Before migration
// Migration it fails with [racefree.ErrSchemaOutdated].
func (c *Counters) NextN(ctx context.Context, exec racefree.Executor, scope, name string, n int64) (first int64, err error) {
	if err := validate(scope, name); err != nil {
		return 0, err
	}
	if n < 1 || n > MaxN {
		return 0, racefree.Invalid("n", "must be between 1 and %d, got %d", MaxN, n)
	}
	t := tenant.From(ctx)
	var (
		last      int64
		exhausted bool
	)
	err = send.QueryRow(ctx, c.db, exec, c.q.Get("next"), []any{t, scope, name, n}, &last)
	if errors.Is(err, sql.ErrNoRows) { // the guard refused: nothing changed
		exhausted, err = true, nil
	}
	switch {
	case err != nil:
		return 0, fmt.Errorf("seq next %q/%q: %w", scope, name, wire.Of(c.db).InterpretError(err))
	case exhausted:
		return 0, fmt.Errorf("seq next %q/%q: %w", scope, name, ErrExhausted)
	}
	return last - n + 1, nil
}

// Current returns the last number the tenant's (scope, name) counter
// handed out as exec sees it, or 0 when it handed none out. It takes no
// lock: Current + 1 is not the next number once another caller runs Next;
// use Next.
func (c *Counters) Current(ctx context.Context, exec racefree.Executor, scope, name string) (int64, error) {
	if err := validate(scope, name); err != nil {
		return 0, err
	}
	t := tenant.From(ctx)
	var last int64
	err := send.ReadRow(ctx, c.db, exec, c.q.Get("current"), []any{t, scope, name}, &last)
	if errors.Is(err, sql.ErrNoRows) { // none handed out yet
		err = nil
	}
	if err != nil {
		return 0, fmt.Errorf("seq current %q/%q: %w", scope, name, wire.Of(c.db).InterpretError(err))
	}
	return last, nil
}

func validate(scope, name string) error {
	if err := racefree.CheckText("scope", scope, MaxScopeBytes); err != nil {
		return err
	}
	return racefree.CheckText("name", name, MaxNameBytes)
}
