package send

// The tenant of every racefree statement: what package tenant promises
// (With, InTx, row-level security), carried to the database.

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"sync"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/schema"
	"github.com/racefree/racefree/internal/statement"
	"github.com/racefree/racefree/internal/tenantid"
	"github.com/racefree/racefree/internal/wire"
)

//go:embed sql
var sqlFiles embed.FS

var queries = map[string]query.Set{
	racefree.SQLite:   query.MustLoad(sqlFiles, "sql", racefree.SQLite),
	racefree.Postgres: query.MustLoad(sqlFiles, "sql", racefree.Postgres),
}

func q(db *racefree.DB, name string) string { return queries[db.Engine()].Get(name) }

// InTx is tenant.InTx: see its documentation.
func InTx(ctx context.Context, db *racefree.DB, id string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := tenantid.Check(id); err != nil {
		return err
	}
	if err := needSchema(ctx, db, db, id); err != nil {
		return err
	}
	return tenantTx(ctx, db, id, func(tx *sql.Tx) error {
		return fn(tenantid.WithTx(ctx, id, tx), tx)
	})
}

// tenantTx runs fn in a transaction of db ([racefree.DB.InTx]) that belongs
// to tenant id: set first, marked as set for the calls inside it (setIn),
// and the tenant registered in it unless the process knows it already; the
// process remembers the tenant once the transaction commits.
func tenantTx(ctx context.Context, db *racefree.DB, id string, fn func(tx *sql.Tx) error) error {
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		if err := set(ctx, db, tx, db.RequiresSynchronousReplication(), id); err != nil {
			return err
		}
		setIn.Store(tx, id)
		defer setIn.Delete(tx)
		if !known(db, id) {
			if err := register(ctx, db, tx, id); err != nil {
				return err
			}
		}
		return fn(tx)
	})
	if err == nil {
		remember(db, id)
	}
	return err
}

// Run runs fn, a racefree operation, for the tenant ctx names. With a
// *sql.Tx, fn runs in it: on PostgreSQL the transaction's tenant is set
// first unless InTx set it (a *MismatchError when it belongs to another
// tenant). With any other executor on PostgreSQL, fn runs in a transaction
// of its own that sets the tenant; on SQLite, fn runs on exec as it is.
// Primitives call it; applications call InTx.
//
// exec must be what it seems: an Executor that wraps a *sql.Tx in a type
// of its own is taken for a pool, so on PostgreSQL fn would run in a
// separate transaction. Pass the *sql.Tx itself.
func Run(ctx context.Context, db *racefree.DB, exec racefree.Executor, fn func(exec racefree.Executor) error) error {
	id := tenantid.From(ctx)
	if err := needSchema(ctx, db, exec, id); err != nil {
		return err
	}
	if tx, ok := exec.(*sql.Tx); ok {
		if tenantid.Tx(ctx) == tx {
			return fn(tx)
		}
		if v, ok := setIn.Load(tx); ok {
			// A transaction InTx or Run opened and set (a primitive
			// calling another one inside it): no second statement.
			if have := v.(string); have != id {
				return &tenantid.MismatchError{Tx: have, Context: id}
			}
			return fn(tx)
		}
		if db.Engine() == racefree.Postgres && !writeBypasses(ctx, db, tx) {
			if err := ensure(ctx, db, tx, db.RequiresSynchronousReplication(), id); err != nil {
				return err
			}
		}
		if !known(db, id) {
			if err := register(ctx, db, tx, id); err != nil {
				return err
			}
			rememberFor(db, id, retryRegistration)
		}
		return fn(tx)
	}
	if db.Engine() != racefree.Postgres || writeBypasses(ctx, db, exec) {
		// SQLite, or a PostgreSQL role that row-level security does not
		// bind: no setting to carry, so no transaction of Run's own (the
		// statements' own tenant filter still applies). exec may hold a
		// write lock already (a wrapped transaction), and a second writer
		// would wait for itself.
		if !known(db, id) {
			if err := register(ctx, db, exec, id); err != nil {
				return err
			}
			rememberFor(db, id, retryRegistration)
		}
		return fn(exec)
	}
	return tenantTx(ctx, db, id, func(tx *sql.Tx) error { return fn(tx) })
}

// Read runs fn, the reads of a racefree operation, for the tenant ctx
// names, and writes nothing: unlike Run it never records the tenant in
// the registry (a tenant that never wrote has nothing to read, and a
// PostgreSQL standby refuses the INSERT with SQLSTATE 25006), so a read
// works on a node that accepts no writes. With a *sql.Tx, fn runs in it,
// the tenant set first unless InTx, Read or Run set it (a *MismatchError
// when it belongs to another tenant). On the pool of PostgreSQL with a
// role that row-level security binds, fn runs in a READ ONLY
// transaction of its own ([racefree.DB.ReadTx]) that sets the tenant: a
// write slipped into fn fails with [racefree.ErrReadOnly] on the primary
// too. Everything else (SQLite, a role that bypasses row-level security,
// any other executor) runs fn on exec as it is.
func Read(ctx context.Context, db *racefree.DB, exec racefree.Executor, fn func(exec racefree.Executor) error) error {
	id := tenantid.From(ctx)
	if err := needSchema(ctx, db, exec, id); err != nil {
		return err
	}
	if tx, ok := exec.(*sql.Tx); ok {
		if tenantid.Tx(ctx) == tx {
			return fn(tx)
		}
		if v, ok := setIn.Load(tx); ok {
			if have := v.(string); have != id {
				return &tenantid.MismatchError{Tx: have, Context: id}
			}
			return fn(tx)
		}
		if db.Engine() == racefree.Postgres && !bypasses(ctx, db, tx) {
			if err := ensure(ctx, db, tx, false, id); err != nil {
				return err
			}
		}
		return fn(tx)
	}
	if db.Engine() != racefree.Postgres || !pooled(db, exec) || bypasses(ctx, db, exec) {
		return fn(exec)
	}
	return db.ReadTx(ctx, func(tx *sql.Tx) error {
		if err := set(ctx, db, tx, false, id); err != nil {
			return err
		}
		setIn.Store(tx, id)
		defer setIn.Delete(tx)
		return fn(tx)
	})
}

// ReadTx is tenant.ReadTx: see its documentation.
func ReadTx(ctx context.Context, db *racefree.DB, id string, fn func(ctx context.Context, exec racefree.Executor) error) error {
	if err := tenantid.Check(id); err != nil {
		return err
	}
	if db.Engine() != racefree.Postgres {
		return fn(tenantid.WithTx(ctx, id, nil), db)
	}
	if err := needSchema(ctx, db, db, id); err != nil {
		return err
	}
	return db.ReadTx(ctx, func(tx *sql.Tx) error {
		if err := set(ctx, db, tx, false, id); err != nil {
			return err
		}
		setIn.Store(tx, id)
		defer setIn.Delete(tx)
		return fn(tenantid.WithTx(ctx, id, tx), tx)
	})
}

// ReadRow runs query, one statement of a racefree read, with args for
// the tenant ctx names and scans its first row into dest (an error
// matching [racefree.ErrNotFound] when it returns none), like QueryRow, and
// writes nothing (see Read): on the pool of PostgreSQL, with a role that
// row-level security binds, the statement travels pipelined with the
// tenant's set_config even for a tenant the process has not recorded;
// everything else runs through Read.
func ReadRow(ctx context.Context, db *racefree.DB, exec racefree.Executor, query string, args []any, dest ...any) error {
	st := &wire.Statement{Query: query, Args: args, Dest: dest}
	if pooled(db, exec) && wire.Of(db).CanPipeline() && !bypasses(ctx, db, exec) {
		id := tenantid.From(ctx)
		if err := needSchema(ctx, db, exec, id); err != nil {
			return err
		}
		return wire.Of(db).Pipeline(ctx, &wire.Statement{Query: q(db, "set"), Args: []any{id}}, st)
	}
	return Read(ctx, db, exec, func(exec racefree.Executor) error {
		var ps *sql.Stmt
		if pooled(db, exec) {
			ps = wire.Of(db).Prepared(ctx, st.Query) // SQLite's pool: see Statement
		}
		found, err := statement.Run(ctx, exec, ps, statement.Statement{Query: st.Query, Args: st.Args, Dest: st.Dest, Affected: &st.RowsAffected})
		if err == nil && !found {
			err = sql.ErrNoRows
		}
		return wire.Of(db).InterpretError(err)
	})
}

// QueryRow runs query, one statement of a racefree operation, with args
// for the tenant ctx names, and scans its first row into dest (an error
// matching [racefree.ErrNotFound] when it returns none). Exec does the same
// for a statement whose rows it does not read, and returns the number of
// rows it affected. Errors are returned after InterpretError.
//
// On the pool (exec is db or db.SQL()) of PostgreSQL, with a role that
// row-level security binds, the statement travels in one round trip with
// set_config('racefree.tenant_id', tenant, true) before it, as one
// transaction ([wire.DB].Pipeline): the statement sees the tenant, the
// connection goes back to the pool without it, and a failing statement
// changes nothing. A transient conflict runs both again, as InTx does.
// A tenant's first call in the process goes through Run, which records
// the tenant in the registry. Everything else (SQLite, a role that
// bypasses row-level security, the caller's transaction, any other
// executor) runs the statement through Run, unchanged.
func QueryRow(ctx context.Context, db *racefree.DB, exec racefree.Executor, query string, args []any, dest ...any) error {
	return one(ctx, db, exec, &wire.Statement{Query: query, Args: args, Dest: dest})
}

// Exec runs query, which returns no rows that matter, like QueryRow.
func Exec(ctx context.Context, db *racefree.DB, exec racefree.Executor, query string, args ...any) (int64, error) {
	st := &wire.Statement{Query: query, Args: args}
	err := one(ctx, db, exec, st)
	return st.RowsAffected, err
}

// Pipelined runs stmts, the statements of one racefree operation, for
// the tenant ctx names in one round trip, as one transaction
// ([wire.DB].Pipeline), whenever exec is the pool of PostgreSQL and the
// tenant is already registered: first set_config(…, true) with the tenant,
// unless the role is one that row-level security does not bind, then
// stmts. It reports false, and runs nothing, otherwise: the caller then
// runs its statements as it does on every other executor. The statements
// are all sent before any result comes back, so a later one cannot use an
// earlier one's result: it is written to find what it needs in the
// transaction itself.
func Pipelined(ctx context.Context, db *racefree.DB, exec racefree.Executor, stmts ...*wire.Statement) (bool, error) {
	if !pooled(db, exec) || !wire.Of(db).CanPipeline() {
		return false, nil
	}
	id := tenantid.From(ctx)
	if err := needSchema(ctx, db, exec, id); err != nil {
		return true, err
	}
	if !known(db, id) {
		return false, nil
	}
	if writeBypasses(ctx, db, exec) {
		return true, wire.Of(db).Pipeline(ctx, stmts...)
	}
	return true, wire.Of(db).Pipeline(ctx, append([]*wire.Statement{{Query: writeSet(db), Args: []any{id}}}, stmts...)...)
}

// combined runs op's statements, those of one racefree operation on op.Key,
// for the tenant ctx names, in a batch with concurrent operations of the
// same tenant ([wire.DB].Combine): one transaction and one commit for
// the batch, which on PostgreSQL begins with set_config(…, true) with the
// tenant, unless the role is one that row-level security does not bind.
// op.Key must name everything the operation writes, prefixed by the
// primitive, so that operations on one row run in the order they came,
// each on the state the one before it left, and on PostgreSQL never in one
// batch ([wire.Op].Key). A Dest
// statement that finds no row makes the error match [racefree.ErrNotFound].
// A run of op's key that folds (op.Fold) runs at once ([wire.Op].Fold).
//
// It reports false, and runs nothing, unless exec is the pool,
// [racefree.Config.Combine] is on and the tenant is already registered, or
// when the batch failed as a whole and committed nothing
// ([racefree.ErrNotCommitted]): the caller then runs its statements as it
// does on every other executor. A batch whose commit got no answer may
// have committed: it reports true with the batch's error (on PostgreSQL
// [racefree.ErrUnavailable]), and the caller must not run its statements
// again. Errors are returned after InterpretError.
//
// ctx's deadline bounds the batch ([wire.Op.Deadline]): a batch still
// waiting for the database (a lock another transaction holds) when the
// earliest deadline of its operations passes gives up and commits
// nothing, and combined reports false like for any batch that failed as a
// whole; the caller's own attempt then ends at once on its expired ctx.
// Without it a caller that led a batch would wait for it past its
// deadline: a request bounded to a second answered after a minute.
func combined(ctx context.Context, db *racefree.DB, exec racefree.Executor, op *Op) (bool, error) {
	deadline, _ := ctx.Deadline()
	if !wire.Of(db).Combining() || !pooled(db, exec) {
		return false, nil
	}
	id := tenantid.From(ctx)
	if err := needSchema(ctx, db, exec, id); err != nil {
		return true, err
	}
	if !known(db, id) {
		return false, nil
	}
	var begin []*wire.Statement
	if db.Engine() == racefree.Postgres && !writeBypasses(ctx, db, exec) {
		begin = []*wire.Statement{{Query: writeSet(db), Args: []any{id}}}
	}
	ran, err := wire.Of(db).Combine(ctx, &wire.Op{Group: id, Key: op.Key, Begin: begin, Stmts: op.Stmts, Fold: op.Fold, FoldAs: op.FoldAs, Deadline: deadline})
	return ran, wire.Of(db).InterpretError(err)
}

// one runs st, alone, as QueryRow and Exec say: pipelined with its tenant,
// or, for a role that row-level security does not bind, as before tenancy.
// On the pool, where st commits by itself, a caller that gave up once st
// was sent gets [racefree.ErrUnavailable] with the context's error where
// the server may commit it all the same ([wire.DB].InterpretAutocommit).
func one(ctx context.Context, db *racefree.DB, exec racefree.Executor, st *wire.Statement) error {
	if pooled(db, exec) && wire.Of(db).CanPipeline() && !writeBypasses(ctx, db, exec) {
		if ok, err := Pipelined(ctx, db, exec, st); ok {
			return err
		}
	}
	return Run(ctx, db, exec, func(exec racefree.Executor) error {
		return Statement(ctx, db, exec, st)
	})
}

// Statement runs st on exec, the executor Run handed its fn: on SQLite's
// pool the statement prepared once per connection ([wire.DB].Prepared),
// which saves parsing and planning it on every call (half of a claim's
// CPU), and its text everywhere else. A Dest statement that returns no
// row fails with an error matching [racefree.ErrNotFound] and
// sql.ErrNoRows; st.RowsAffected receives the count of any other. Errors
// are returned after InterpretError, and on the pool, where st commits
// by itself, as an autocommit: a caller that gave up once st was sent
// gets [racefree.ErrUnavailable] with the context's error where the server
// may commit it all the same ([wire.DB].InterpretAutocommit).
func Statement(ctx context.Context, db *racefree.DB, exec racefree.Executor, st *wire.Statement) error {
	return alone(ctx, db, exec, st, pooled(db, exec))
}

// ReadStatement is Statement for a read, whose errors are returned after
// InterpretError alone, on the pool too: a read commits nothing.
func ReadStatement(ctx context.Context, db *racefree.DB, exec racefree.Executor, st *wire.Statement) error {
	return alone(ctx, db, exec, st, false)
}

// alone runs st as Statement says; autocommit says its errors are
// interpreted as an autocommit's.
func alone(ctx context.Context, db *racefree.DB, exec racefree.Executor, st *wire.Statement, autocommit bool) error {
	var ps *sql.Stmt
	if pooled(db, exec) {
		ps = wire.Of(db).Prepared(ctx, st.Query)
	}
	found, err := statement.Run(ctx, exec, ps, statement.Statement{Query: st.Query, Args: st.Args, Dest: st.Dest, Affected: &st.RowsAffected})
	if err == nil && !found {
		err = sql.ErrNoRows
	}
	if autocommit { // it committed by itself: a cancelled one may have
		return wire.Of(db).InterpretAutocommit(err)
	}
	return wire.Of(db).InterpretError(err)
}

// pooled reports whether exec is db's own pool, where a statement may
// run on any connection: never a caller's transaction or connection.
func pooled(db *racefree.DB, exec racefree.Executor) bool {
	return exec == racefree.Executor(db) || exec == racefree.Executor(db.SQL())
}

// Each is tenant.Each: see its documentation.
func Each(ctx context.Context, db *racefree.DB, fn func(ctx context.Context) error) error {
	rows, err := db.SQL().QueryContext(ctx, q(db, "list"))
	if err != nil {
		return wire.Of(db).InterpretError(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return wire.Of(db).InterpretError(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return wire.Of(db).InterpretError(err)
	}
	for _, id := range ids {
		if err := fn(tenantid.WithTx(ctx, id, nil)); err != nil {
			return err
		}
	}
	return nil
}

func needSchema(ctx context.Context, db *racefree.DB, exec racefree.Executor, id string) error {
	want := int64(tenantid.TenantsVersion)
	if id != tenantid.Default {
		want = tenantid.KeysVersion
	}
	return schema.Need(ctx, db, exec, want)
}

// set sets tx's tenant to id (set.sql), checking first, when strict,
// that a synchronous standby will wait for tx's commit (set_strict.sql,
// see writeSet).
func set(ctx context.Context, db *racefree.DB, tx *sql.Tx, strict bool, id string) error {
	if db.Engine() != racefree.Postgres {
		return nil
	}
	query := q(db, "set")
	if strict {
		query = q(db, "set_strict")
	}
	if _, err := tx.ExecContext(ctx, query, id); err != nil {
		return fmt.Errorf("set tenant: %w", wire.Of(db).InterpretError(err))
	}
	return nil
}

// ensure sets the transaction's tenant when it has none, in one statement
// (ensure.sql; when strict, ensure_strict.sql, which checks first that a
// synchronous standby will wait for tx's commit), and refuses a
// transaction set to another tenant.
func ensure(ctx context.Context, db *racefree.DB, tx *sql.Tx, strict bool, id string) error {
	query := q(db, "ensure")
	if strict {
		query = q(db, "ensure_strict")
	}
	var have string
	err := tx.QueryRowContext(ctx, query, id).Scan(&have)
	if err != nil {
		return fmt.Errorf("set tenant: %w", wire.Of(db).InterpretError(err))
	}
	if have != id {
		return &tenantid.MismatchError{Tx: have, Context: id}
	}
	return nil
}

// CheckDurable is tenant.CheckDurable: see its documentation.
func CheckDurable(ctx context.Context, db *racefree.DB) error {
	if db.Engine() != racefree.Postgres {
		return racefree.Invalid("engine", "%s has no standbys to replicate to", db.Engine())
	}
	return db.ReadTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, q(db, "set_strict"), tenantid.Default)
		return wire.Of(db).InterpretError(err)
	})
}

// writeSet is the statement that begins a write pipelined or combined on
// PostgreSQL: set, or, with [racefree.Config.RequireSynchronousReplication],
// its strict form, which also fails, and so aborts the write's
// transaction, unless a synchronous standby will wait for its commit
// (sql/postgres/set_strict.sql). A write in a transaction begins the same
// way (set and ensure with strict set); reads begin with set and ensure
// alone.
func writeSet(db *racefree.DB) string {
	if db.RequiresSynchronousReplication() {
		return q(db, "set_strict")
	}
	return q(db, "set")
}

// writeBypasses is bypasses for a write: with
// [racefree.Config.RequireSynchronousReplication] no role bypasses the
// statement that begins a write, since it carries the check.
func writeBypasses(ctx context.Context, db *racefree.DB, exec racefree.Executor) bool {
	return !db.RequiresSynchronousReplication() && bypasses(ctx, db, exec)
}

// setIn holds the transactions InTx and Run opened, with their tenant, for
// as long as their function runs: a racefree call made inside another
// one's transaction needs no statement to know its tenant.
var setIn sync.Map // *sql.Tx -> string

// bypass caches, per DB, whether its role is a superuser or has BYPASSRLS:
// row-level security does not bind such a role, so a call made with it
// needs no setting and no transaction of Run's own, and costs what it cost
// before tenancy. A role changed while the process runs keeps its cached
// answer; one that lost BYPASSRLS then sees nothing (it fails closed)
// until the process restarts.
var bypass sync.Map // *racefree.DB -> bool

func bypasses(ctx context.Context, db *racefree.DB, exec racefree.Executor) bool {
	if v, ok := bypass.Load(db); ok {
		return v.(bool)
	}
	var b bool
	if err := exec.QueryRowContext(ctx, q(db, "bypasses")).Scan(&b); err != nil {
		return false // unknown: set the tenant, which is always correct
	}
	bypass.Store(db, b)
	return b
}

// Registry: the tenants this process has recorded in racefree_tenants. An
// entry made in a caller's transaction, which may yet roll back, is
// trusted for retryRegistration only.
const retryRegistration = 10 * time.Minute

var registry sync.Map // regKey -> time.Time (zero: forever)

type regKey struct {
	db *racefree.DB
	id string
}

func known(db *racefree.DB, id string) bool {
	v, ok := registry.Load(regKey{db, id})
	if !ok {
		return false
	}
	until := v.(time.Time)
	return until.IsZero() || time.Now().Before(until)
}

func remember(db *racefree.DB, id string) { registry.Store(regKey{db, id}, time.Time{}) }

func rememberFor(db *racefree.DB, id string, d time.Duration) {
	registry.Store(regKey{db, id}, time.Now().Add(d))
}

func register(ctx context.Context, db *racefree.DB, exec racefree.Executor, id string) error {
	if _, err := exec.ExecContext(ctx, q(db, "register"), id, racefree.Millis(time.Now())); err != nil {
		return fmt.Errorf("register tenant: %w", err)
	}
	return nil
}
