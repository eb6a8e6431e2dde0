// Package wire holds what racefree's own packages need of a
// racefree.DB and of its engines, and applications do not: the
// statements of an operation (Statement), the combiner's operations (Op),
// the interfaces an engine implements beyond racefree.Engine (Pipeliner,
// ManyBinder, ServerBound, CommitJudge, WritableChecker), and the DB's internal
// methods (DB, reached with Of). The root package keeps what
// applications use; it registers the way to its internals here when it
// loads, and imports this package, never the other way round.
package wire

import (
	"context"
	"database/sql"
	"time"
)

// Executor is racefree.Executor: *sql.DB, *sql.Tx, *sql.Conn and
// *racefree.DB satisfy it.
type Executor interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Public is what Of is given: a *racefree.DB (the methods only name it,
// so that a *sql.DB does not compile where a racefree.DB is meant).
type Public interface {
	Engine() string
	SQL() *sql.DB
}

// DB is a racefree.DB's internal methods, for racefree's own packages.
type DB interface {
	// Combine runs op in a batch of the combiner with the operations of
	// concurrent calls, as one transaction, and reports whether op ran
	// (false: the caller runs it alone). racefree.Config.Combine says
	// whether it batches at all; see the root package's combine.go for
	// the whole contract, and its unknown outcomes.
	Combine(ctx context.Context, op *Op) (bool, error)
	// Combining reports whether racefree.Config.Combine is on.
	Combining() bool
	// Pipeline runs stmts on one pooled connection in one round trip, as
	// one transaction (Pipeliner), retried on a transient conflict. An
	// error that matches racefree.ErrNotCommitted committed nothing; any
	// other may have committed. errors.ErrUnsupported on an engine that
	// cannot pipeline.
	Pipeline(ctx context.Context, stmts ...*Statement) error
	// CanPipeline reports whether the engine implements Pipeliner.
	CanPipeline() bool
	// CanMany reports whether the engine implements ManyBinder: whether
	// Combine runs a Statement's Many form, so that a primitive sets one.
	CanMany() bool
	// Prepared returns query prepared on the pool on SQLite, kept for the
	// life of the DB, or nil (PostgreSQL, or a failed preparation: run
	// the query unprepared).
	Prepared(ctx context.Context, query string) *sql.Stmt
	// PreparedAlready returns query's statement if Prepared, or a batch
	// of Combine that ran it, prepared it already; nil otherwise. It
	// prepares nothing.
	PreparedAlready(query string) *sql.Stmt
	// ClockArg returns the value for a query's clock parameter: nil for
	// the engine's clock, Unix milliseconds of racefree.Config.Clock
	// otherwise.
	ClockArg() any
	// InterpretError maps a driver error onto racefree's sentinel errors.
	InterpretError(err error) error
	// InterpretAutocommit is InterpretError for a statement that ran by
	// itself and commits by itself: a cancelled one that may have
	// committed all the same (CommitJudge) also matches
	// racefree.ErrUnavailable.
	InterpretAutocommit(err error) error
	// SchemaAtLeast reports whether the schema is at version v or later,
	// reading it through exec until it is.
	SchemaAtLeast(ctx context.Context, exec Executor, v int64) (bool, error)
}

var of func(Public) DB

// Register sets how Of finds a racefree.DB's internals. The root package
// calls it once, when it loads.
func Register(f func(Public) DB) { of = f }

// Of returns db's internal methods. db must be a *racefree.DB: anything
// else panics.
func Of(db Public) DB { return of(db) }

// Statement is one statement of a Pipeline: Query with Args. When Rows is
// not nil, it reads every row the statement returns; otherwise, when Dest
// is not nil, the statement's first row is scanned into it (an error
// matching racefree.ErrNotFound when it returns none). RowsAffected receives the
// number of rows the statement reports.
type Statement struct {
	Query string
	Args  []any
	Dest  []any
	// Rows is called once with the statement's rows, to read them all
	// (Next, then Scan). A pipeline that is run again (a transient
	// conflict) calls it again, with the rows of the new run: it must
	// start afresh each time. Its error ends the pipeline and is returned,
	// but cannot roll anything back: the statements were sent, and their
	// transaction commits unless one of them fails on the server.
	Rows func(Rows) error
	// Many, when not empty, is the statement's form for many operations
	// at once, which DB.Combine runs, on an engine that implements
	// ManyBinder, instead of one Query per operation, for the operations
	// of a batch that share it, when they are at least the engine's
	// ManyFrom. Its parameters are the operations' Args as the engine
	// binds them (ManyBinder: on PostgreSQL $k is the array of the
	// operations' Args[k-1]; on SQLite ?1 is one JSON array of the
	// operations' Args arrays, and ?2 maps their Keys to their places),
	// one element per operation in the batch's order, and each row it
	// returns begins with the place of its operation in that order (from
	// 1), then the columns Dest receives.
	// An operation whose row does not come back gets RowsAffected 0 (1
	// when it does), and racefree.ErrNotFound when the statement has a Dest, as
	// Query alone would report. Rows is not used with Many.
	Many string
	// IfMissed, on a statement of an Op after its first, makes
	// DB.Combine run it only when the statement just before it, a Dest
	// statement, found no row (a refusal, such as a quota charge's), and
	// the op's batch runs another operation of the same key right after
	// it (SQLite, whose batch holds several operations of one key): a
	// read of what the refused statement saw, which that later operation
	// may change before the caller could read it after the batch.
	// Otherwise it does not run: its Rows is not called, and the caller
	// reads after the batch, as alone. Such a statement has no Many form
	// and no Dest; a batch that pipelines never runs it.
	IfMissed bool
	// Clock, when not zero, is the place (from 1) in Args of the
	// statement's clock parameter, whose nil means the engine's clock
	// (racefree.DB's ClockArg). A SQLite batch of DB.Combine binds there,
	// in place of nil, the process clock read once just after its BEGIN
	// IMMEDIATE, instead of each statement reading it (unixepoch, about 5
	// us a statement): SQLite's clock is the process's, and read under the
	// write lock it is the clock each statement of the batch would read,
	// a few microseconds earlier. Alone, a statement reads the clock
	// itself, after any wait for the lock.
	Clock        int
	RowsAffected int64
}

// Rows are the rows of one Statement, read in order: Next advances to
// the next row (false after the last one), Scan copies its columns.
// *sql.Rows satisfies it, so a Statement's Rows also reads the rows of a
// statement run without a pipeline.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
}

// Pipeliner is an Engine that can run statements in one round trip as one
// transaction (PostgreSQL). Engines that cannot (SQLite) do not implement
// it.
type Pipeliner interface {
	// Pipeline sends stmts in order on conn, which is in no transaction,
	// in one round trip once the statements are known to the connection,
	// as one transaction: it commits after the last statement succeeds,
	// and a failing statement rolls back every one. A setting made with
	// set_config(…, true) holds for the statements after it and ends
	// with them. An error that wraps driver.ErrBadConn means that nothing
	// reached the server and conn is unusable. An error that the engine
	// knows committed nothing (nothing reached the server, or the server
	// answered that a statement or the commit failed, and rolled back)
	// matches racefree.ErrNotCommitted; any other error, such as a connection lost
	// after the statements were sent, may have committed. The Rows it hands to a
	// Statement's Rows skip a nil destination in Scan, and may be scanned
	// again (DB.Combine reads the place of a Many form's row first).
	Pipeline(ctx context.Context, conn *sql.Conn, stmts []*Statement) error
}

// ManyBinder is an Engine that can run a Statement's Many form: DB.Combine
// runs it once for the operations of a batch that share their Many forms,
// when they are at least ManyFrom, in its pipeline on an engine that is a
// Pipeliner, otherwise in the batch's transaction.
type ManyBinder interface {
	// BindMany returns the arguments of a Many form for the operations
	// whose Keys (Op.Key, distinct: a batch never holds two operations
	// of one key) are keys and whose statement passes args, in the
	// batch's order: keys[i] and args[i] are those of the operation at
	// place i+1, and every args[i] has the same length. PostgreSQL
	// returns one array per parameter ($k: every operation's
	// Args[k-1]), which the form unnests WITH ORDINALITY. SQLite returns
	// ?1, one JSON array of every operation's Args array, which the form
	// reads with json_each (or jsonb_each), and ?2, a JSON object from
	// the hex of each operation's Key (upper case, as SQLite's hex()
	// writes it) to its place, by which a form finds the place of a row
	// its RETURNING clause writes: RETURNING sees the written row only,
	// never the array. An argument it cannot carry faithfully is an
	// error: the batch then commits nothing, and its operations run
	// alone.
	BindMany(keys []string, args [][]any) ([]any, error)
	// ManyFrom returns the fewest operations that DB.Combine runs a Many
	// form for, below which the operations' own statements cost less: 2
	// on PostgreSQL, where each statement of a pipeline costs its share
	// of the round trip; 8 on SQLite, where a statement over a JSON
	// array of two to four operations costs more than their prepared
	// statements one by one (docs/performance.md).
	ManyFrom() int
}

// CommitJudge is an Engine that can tell whether a transaction whose
// COMMIT (or whose statement in autocommit) returned an error may have
// committed all the same (SQLite). DB.Combine takes a failed commit of an
// engine that is not one as an outcome it does not know.
type CommitJudge interface {
	// MayHaveCommitted reports whether err, returned by COMMIT or by a
	// statement that commits by itself, leaves open that the transaction
	// committed.
	MayHaveCommitted(err error) bool
}

// Housekeeper is an Engine with work of its own while a DB is open on it
// (SQLite: the write-ahead log's keeper). racefree.New starts it once the
// DB is ready; DB.Close stops it, waiting for it, before it closes the
// pool.
type Housekeeper interface {
	StartHousekeeping()
	StopHousekeeping()
}

// ServerBound is a Pipeliner that can make the server end a pipelined
// transaction's statements at a deadline (PostgreSQL). A pipeline's
// statements and its commit are all sent before any result comes back, so
// a client that gives up on it (a lock wait that outlived its deadline)
// cannot stop the server from committing it once the lock is free: a
// batch of DB.Combine whose operations have a deadline (Op.Deadline)
// sends Bound after its Begin instead, and waits for the server's answer.
type ServerBound interface {
	// Bound returns a statement that, sent in a pipeline, makes the
	// server end each later statement of its transaction that runs longer
	// than d, failing the transaction. Its setting ends with the
	// transaction.
	Bound(d time.Duration) *Statement
}

// GenericPlanner is implemented by an engine whose server, given a
// prepared statement's values, may plan it again at every run: PostgreSQL
// plans a statement for its values five times, then keeps one generic
// plan only when that plan's estimate is no dearer than theirs. A Many
// form's generic plan counts its arrays at 10 elements, so over a batch of
// two to eight the values' plan is always estimated cheaper, and the
// server planned the form at every batch, at a cost above the form's own
// run (docs/performance.md, "A plan at every batch"). A pipelined batch of
// DB.Combine that runs Many forms sends GenericPlan after its Begin and
// its bound, so that the forms run on one plan per connection.
type GenericPlanner interface {
	// GenericPlan returns a statement that, sent in a pipeline, makes
	// the server run the later prepared statements of its transaction on
	// their generic plans. Its setting ends with the transaction.
	GenericPlan() *Statement
}

// Op is one operation for DB.Combine (the combiner): the statements of one primitive
// call on the pool, on one key.
type Op struct {
	// Group keeps operations apart: a batch holds the operations of one
	// group only. Primitives pass the tenant, so that a PostgreSQL
	// transaction under row-level security sees one tenant setting.
	Group string
	// Key names what the operation writes. Operations of one group with
	// the same key run in the order they came, each on the state the
	// earlier one left. On an engine that pipelines (PostgreSQL), and
	// whenever their statements have Many forms, they never share a
	// batch: the later one waits for the next (a pipeline's statements
	// are all sent before any result comes back, and one statement over
	// arrays sees none of the rows its other elements write). On SQLite,
	// whose batch runs each operation's statements one after the other in
	// one transaction, they share one, in that order.
	Key string
	// Begin runs once at the start of a batch, before every operation's
	// statements: the first operation's Begin (PostgreSQL: the tenant's
	// set_config(…, true)). Operations of one group pass the same.
	Begin []*Statement
	// Stmts are the operation's statements, run in order, as Statement
	// says; a statement with Dest that returns no row makes the
	// operation's error match racefree.ErrNotFound, and the operation's later
	// statements still run. When every statement has a Many form, the
	// operation shares a batch only with operations whose statements have
	// the same Many forms on an engine that pipelines (on the others,
	// a batch runs its operations form by form), and on an engine that
	// binds them (ManyBinder) the batch runs each form once for all of
	// them (one statement over arrays, not one per operation).
	Stmts []*Statement
	// Fold, with FoldAs, runs at once a run of operations of one Key in a
	// batch that runs its operations one after the other (SQLite): two
	// or more that follow one another there, each with this FoldAs (not
	// empty), which names everything their outcomes depend on beside the
	// Key (the primitive, its statements, every argument, and the clock
	// unless it is the batch's: Statement.Clock).
	// DB.Combine calls the first one's Fold with the run's operations in
	// the order they came, in place of their statements, none of which
	// runs: it runs its own statements through run, in the batch's
	// transaction, and fills each operation's Dest as its statements one
	// after the other would have, each deciding on the state the one
	// before it left. An operation it folded counts as run, and as having
	// found its rows.
	// Its error fails the batch, which commits nothing, and its
	// operations run alone. An engine that keeps keys apart (DB.keysApart)
	// never holds such a run.
	Fold   func(ctx context.Context, run Run, ops []*Op) error
	FoldAs string
	// Deadline, when not zero, bounds the batch that holds op: a batch
	// gives up at the earliest Deadline of its operations, commits
	// nothing, and its operations run alone (Combine reports false), so
	// that an operation bounded in time waits for the database no longer
	// in a batch than alone. On PostgreSQL the server ends the batch
	// (ServerBound), which may answer a few milliseconds late but never
	// commits after its callers were told it failed. Zero leaves op's
	// batch unbounded by op, as Combine says.
	Deadline time.Time
}

// Run runs one statement in a batch's transaction, as the batch runs its
// operations' statements, and reports whether a Dest statement found its
// row (true for the others). DB.Combine hands one to an Op's Fold.
type Run func(ctx context.Context, st *Statement) (found bool, err error)

// WritableChecker is an Engine that can tell whether the node it reaches
// accepts writes. The PostgreSQL engine implements it.
type WritableChecker interface {
	// CheckWritable returns a *racefree.ReadOnlyError when the node
	// accepts no writes (a standby in recovery, or transactions read-only
	// by default), nil when it does, or the error that kept it from
	// knowing.
	CheckWritable(ctx context.Context, exec Executor) error
}
