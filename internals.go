package racefree

import (
	"context"
	"database/sql"

	"github.com/racefree/racefree/internal/wire"
)

// The DB's methods for racefree's own packages (internal/[wire.DB]): they
// stay out of the API applications read.
func init() {
	wire.Register(func(db wire.Public) wire.DB { return (*internals)(db.(*DB)) })
}

// internals is a DB seen through internal/wire.
type internals DB

func (in *internals) db() *DB { return (*DB)(in) }

func (in *internals) Combine(ctx context.Context, op *wire.Op) (bool, error) {
	return in.db().combine(ctx, op)
}
func (in *internals) Combining() bool { return in.db().combining() }
func (in *internals) Pipeline(ctx context.Context, stmts ...*wire.Statement) error {
	return in.db().pipeline(ctx, stmts...)
}
func (in *internals) CanPipeline() bool { return in.db().canPipeline() }
func (in *internals) CanMany() bool     { return in.db().canMany() }
func (in *internals) Prepared(ctx context.Context, query string) *sql.Stmt {
	return in.db().prepared(ctx, query)
}
func (in *internals) PreparedAlready(query string) *sql.Stmt { return in.db().preparedAlready(query) }
func (in *internals) ClockArg() any                          { return in.db().clockArg() }
func (in *internals) InterpretError(err error) error         { return in.db().interpretError(err) }
func (in *internals) InterpretAutocommit(err error) error    { return in.db().interpretAutocommit(err) }
func (in *internals) SchemaAtLeast(ctx context.Context, exec wire.Executor, v int64) (bool, error) {
	return in.db().schemaAtLeast(ctx, exec, v)
}
