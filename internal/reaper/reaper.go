// Package reaper runs the batches of racefree's reapers with one shared
// discipline: batches until one comes back short, and on SQLite, where
// there is one writer at a time, a pause after each full batch as long as
// the batch took, so that a reaper holds the write lock at most about half
// the time and the writers it shares the database with get their turn.
package reaper

import (
	"context"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/schema"
	"github.com/racefree/racefree/tenant"
)

// EachTenant is every reaper's prelude: it runs fn once for every tenant
// racefree has seen ([tenant.Each]), with a context naming that tenant, so
// that on PostgreSQL a reaper sees one tenant's rows at a time. Before
// migration 011 ([tenant.TenantsVersion]), which adds the tenant registry it
// walks, it runs nothing and returns a *racefree.SchemaError
// ([racefree.ErrSchemaOutdated]).
func EachTenant(ctx context.Context, db *racefree.DB, fn func(ctx context.Context) error) error {
	if err := schema.Need(ctx, db, db, tenant.TenantsVersion); err != nil {
		return err
	}
	return tenant.Each(ctx, db, fn)
}

// Run calls batch until it deletes fewer than size rows, an error occurs or
// ctx ends, and returns the rows deleted in all. engine is the engine's
// name ([racefree.SQLite] or [racefree.Postgres]): only SQLite pauses between
// batches.
func Run(ctx context.Context, engine string, size int, batch func() (int64, error)) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		start := time.Now()
		n, err := batch()
		total += n
		if err != nil || n < int64(size) {
			return total, err
		}
		if engine == racefree.SQLite {
			if err := Pause(ctx, time.Since(start)); err != nil {
				return total, err
			}
		}
	}
}

// Pause waits d, or until ctx ends.
func Pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
