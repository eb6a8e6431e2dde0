package seq

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
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

// Migration is the schema version that created the counter table.
const Migration = 7

// ErrExhausted means the counter would pass the largest BIGINT
// (9223372036854775807). Nothing was consumed.
var ErrExhausted = errors.New("racefree: sequence exhausted")

// Counters represents the gapless counters of one database. It is safe for
// concurrent use.
type Counters struct {
	db *racefree.DB
	q  query.Set
}

// New returns the counters of db. It does no I/O.
func New(db *racefree.DB) *Counters {
	return &Counters{db: db, q: query.MustLoad(sqlFiles, "sql", db.Engine())}
}

// Next returns the next number of the (scope, name) counter, counting from
// 1, in exec. It is NextN with n = 1.
func (c *Counters) Next(ctx context.Context, exec racefree.Executor, scope, name string) (int64, error) {
	return c.NextN(ctx, exec, scope, name, 1)
}

// NextN hands out n consecutive numbers of the (scope, name) counter in
// exec and returns the first of them; the others are first+1 … first+n-1.
//
// Pass the caller's transaction: the numbers are then gapless when it
// commits, and nothing is consumed when it rolls back (the next caller gets
// the same numbers). The counter's row stays locked until that transaction
// ends, so keep it short; other counters never wait for it. Passed the
// *racefree.DB (or a *sql.DB), NextN runs one statement on its own, which
// commits at once.
//
// On PostgreSQL at REPEATABLE READ or SERIALIZABLE, an increment of the
// same counter committed after the transaction's snapshot makes NextN fail
// with an error matching racefree.ErrRetryable (SQLSTATE 40001): roll the
// transaction back and run all of it again. racefree.DB.InTx does so
// itself. On SQLite the transaction must hold the write lock before it
// reads (racefree begins every transaction IMMEDIATE); a deferred
// transaction begun elsewhere gets racefree.ErrRetryable too.
//
// It returns an *racefree.InputError for an empty or oversized scope or
// name or an n outside 1..MaxN, and ErrExhausted when the counter would
// pass the largest BIGINT; nothing is consumed then.
func (c *Counters) NextN(ctx context.Context, exec racefree.Executor, scope, name string, n int64) (first int64, err error) {
	if err := validate(scope, name); err != nil {
		return 0, err
	}
	if n < 1 || n > MaxN {
		return 0, racefree.Invalid("n", "must be between 1 and %d, got %d", MaxN, n)
	}
	if err := c.needSchema(ctx, exec); err != nil {
		return 0, err
	}
	var last int64
	err = exec.QueryRowContext(ctx, c.q.Get("next"), scope, name, n).Scan(&last)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, fmt.Errorf("seq next %q/%q: %w", scope, name, ErrExhausted)
	case err != nil:
		return 0, fmt.Errorf("seq next %q/%q: %w", scope, name, c.db.InterpretError(err))
	}
	return last - n + 1, nil
}

// Current returns the last number the (scope, name) counter handed out as
// exec sees it, or 0 when it handed none out. It takes no lock: Current + 1
// is not the next number once another caller runs Next; use Next.
func (c *Counters) Current(ctx context.Context, exec racefree.Executor, scope, name string) (int64, error) {
	if err := validate(scope, name); err != nil {
		return 0, err
	}
	if err := c.needSchema(ctx, exec); err != nil {
		return 0, err
	}
	var last int64
	err := exec.QueryRowContext(ctx, c.q.Get("current"), scope, name).Scan(&last)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("seq current %q/%q: %w", scope, name, c.db.InterpretError(err))
	}
	return last, nil
}

// needSchema refuses to run against a schema without the counter table
// (SchemaAllowOutdated before migration 7) with an error matching
// racefree.ErrSchemaOutdated.
func (c *Counters) needSchema(ctx context.Context, exec racefree.Executor) error {
	ok, err := c.db.SchemaAtLeast(ctx, exec, Migration)
	if err != nil {
		return fmt.Errorf("seq: %w", c.db.InterpretError(err))
	}
	if !ok {
		return fmt.Errorf("seq needs migration %03d: %w", Migration, racefree.ErrSchemaOutdated)
	}
	return nil
}

func validate(scope, name string) error {
	if err := racefree.CheckText("scope", scope, MaxScopeBytes); err != nil {
		return err
	}
	return racefree.CheckText("name", name, MaxNameBytes)
}
