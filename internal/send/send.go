// Package send is the one way the statements of a racefree operation
// travel to the database: for the tenant its context names, batched with
// concurrent operations (the combiner), pipelined with the tenant's
// setting, as one statement alone (prepared on SQLite's pool), or in a
// transaction, with the errors already interpreted. Primitives describe
// an operation (an Op) and call Do; they never choose the transport
// themselves.
package send

import (
	"context"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
)

// Op is one operation of a primitive: its statements, and the ways they
// may travel.
type Op struct {
	// Key, when not empty, lets the operation share a batch of the
	// combiner (wire.DB.Combine) with concurrent operations of the
	// same tenant, when exec is the pool, racefree.Config.Combine is on
	// and the tenant is registered. It must name everything the operation
	// writes, prefixed by the primitive, so that operations on one row run
	// in the order they came, each on the state the one before it left,
	// and on PostgreSQL never in one batch ([wire.Op].Key).
	Key string
	// Stmts are the statements that travel together, in one transaction,
	// in this order: in a batch, or, when Pipeline is set, pipelined with
	// the tenant's setting (Pipelined). They are all sent before
	// any result comes back: a later one finds what it needs in the
	// transaction, not in an earlier one's result.
	Stmts []*wire.Statement
	// Fold and FoldAs let a run of operations of Key that follow one
	// another in a batch run at once ([wire.Op].Fold).
	Fold   func(ctx context.Context, run wire.Run, ops []*wire.Op) error
	FoldAs string
	// Pipeline lets Stmts travel pipelined, in one round trip, when they
	// were not batched, exec is the pool of an engine that pipelines
	// (PostgreSQL) and the tenant is registered.
	Pipeline bool
	// Alone, when not nil, is the statement that runs when Stmts did not
	// travel together: on the pool pipelined with the tenant's setting
	// (PostgreSQL) or prepared (SQLite), in the caller's transaction
	// otherwise, or in a transaction of its own that sets the tenant
	// (QueryRow, Exec). It may be one of Stmts.
	Alone *wire.Statement
}

// Way says how Do sent an operation.
type Way int

const (
	// NotSent means nothing ran: the caller runs the operation its own
	// way (in a transaction of its own, say).
	NotSent Way = iota
	// Together means Stmts ran in one transaction: a batch of the
	// combiner, or a pipeline.
	Together
	// Alone means Op.Alone ran by itself.
	Alone
)

// Do sends op's statements for the tenant ctx names, trying in order: a
// batch of the combiner (Op.Key), a pipeline (Op.Pipeline), the one
// statement alone (Op.Alone). It returns the way it took, or NotSent when
// none applies. A Dest statement that finds no row makes the error match
// [racefree.ErrNotFound]; each statement's RowsAffected is set. Errors are
// returned after [wire.DB].InterpretError.
//
// A batch whose commit got no answer may have committed: Do then returns
// Together with its error (on PostgreSQL [racefree.ErrUnavailable]), never
// NotSent, so the caller must not run the operation again. A batch that
// failed as a whole and committed nothing ([racefree.ErrNotCommitted]) is
// not a way taken: Do goes on to the next.
func Do(ctx context.Context, db *racefree.DB, exec racefree.Executor, op *Op) (Way, error) {
	if op.Key != "" {
		if ran, err := combined(ctx, db, exec, op); ran {
			return Together, wire.Of(db).InterpretError(err)
		}
	}
	if op.Pipeline && wire.Of(db).CanPipeline() {
		if ok, err := Pipelined(ctx, db, exec, op.Stmts...); ok {
			return Together, wire.Of(db).InterpretError(err)
		}
	}
	if st := op.Alone; st != nil {
		if st.Dest != nil {
			return Alone, wire.Of(db).InterpretError(QueryRow(ctx, db, exec, st.Query, st.Args, st.Dest...))
		}
		n, err := Exec(ctx, db, exec, st.Query, st.Args...)
		st.RowsAffected = n
		return Alone, wire.Of(db).InterpretError(err)
	}
	return NotSent, nil
}

// One runs st alone for the tenant ctx names (Do with Op.Alone).
func One(ctx context.Context, db *racefree.DB, exec racefree.Executor, st *wire.Statement) error {
	_, err := Do(ctx, db, exec, &Op{Alone: st})
	return err
}
