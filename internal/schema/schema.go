// Package schema holds the one gate a racefree operation passes before it
// relies on a migration: Need.
package schema

import (
	"context"
	"database/sql"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
)

// Need returns nil when migration want is applied, and otherwise a
// *racefree.SchemaError ([racefree.ErrSchemaOutdated]) with the version the
// database is at; an error reading the version is returned after
// [wire.DB].InterpretError. It answers from memory once it has seen
// want applied ([wire.DB].SchemaAtLeast), and reads through exec
// otherwise: pass the executor the operation was given, so that a caller
// holding the pool's last connection in its transaction never waits for
// itself.
func Need(ctx context.Context, db *racefree.DB, exec racefree.Executor, want int64) error {
	ok, err := wire.Of(db).SchemaAtLeast(ctx, exec, want)
	if err != nil {
		return wire.Of(db).InterpretError(err)
	}
	if ok {
		return nil
	}
	var have sql.NullInt64
	_ = exec.QueryRowContext(ctx, `SELECT MAX(version) FROM racefree_schema_migrations`).Scan(&have)
	return &racefree.SchemaError{Have: have.Int64, Want: want}
}
