package quota

import (
	"context"
	"database/sql"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
)

// queryRow runs the query called name with args on exec. Through the pool
// on SQLite it runs the statement prepared once per connection
// (wire.DB.Prepared), which saves parsing and planning it on every
// charge; in a transaction, or on PostgreSQL, it runs the text.
// interpret is wire.DB.InterpretError for the error of a charge or a
// refund that ran on exec. On the pool, where the statement commits by
// itself, a caller that gave up once it was sent gets
// racefree.ErrUnavailable with the context's error where the server may
// commit it all the same (wire.DB.InterpretAutocommit).
func (l *Limiter) interpret(exec racefree.Executor, err error) error {
	if exec == racefree.Executor(l.db) || exec == racefree.Executor(l.db.SQL()) {
		return wire.Of(l.db).InterpretAutocommit(err)
	}
	return wire.Of(l.db).InterpretError(err)
}

func (l *Limiter) queryRow(ctx context.Context, exec racefree.Executor, name string, args ...any) *sql.Row {
	if exec == racefree.Executor(l.db) {
		if st := wire.Of(l.db).Prepared(ctx, l.q.Get(name)); st != nil {
			return st.QueryRowContext(ctx, args...)
		}
	}
	return exec.QueryRowContext(ctx, l.q.Get(name), args...)
}
