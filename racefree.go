package racefree

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"

	"github.com/racefree/racefree/internal/wire"
)

// Engine names, as returned by Engine.Name and DB.Engine.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// Executor is what every racefree write accepts: *sql.DB, *sql.Tx, *sql.Conn
// and *DB all satisfy it. Passing the caller's *sql.Tx makes the guarantee
// commit or roll back together with the caller's own writes.
type Executor interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Engine represents one database engine's behaviour. The packages
// racefree/sqlite and racefree/postgres implement it; callers do not.
type Engine interface {
	// Name returns SQLite or Postgres. Primitives pick their queries by it.
	Name() string
	// SQL returns the connection pool.
	SQL() *sql.DB
	// InterpretError maps a driver error onto the sentinel errors
	// (ErrNotFound, ErrConflict, ErrRetryable, ErrUnavailable, ErrReadOnly), keeping the driver error
	// in the chain. It returns err unchanged when no sentinel applies.
	InterpretError(err error) error
	// Migrations returns the engine's migrations, named NNN_name.sql.
	Migrations() fs.FS
	// LockMigrations serialises migration runs across processes for the
	// lifetime of tx. It must not hold anything beyond the transaction.
	LockMigrations(ctx context.Context, tx *sql.Tx) error
}

// SchemaPolicy says what Open does with a schema older than the code.
type SchemaPolicy int

const (
	// SchemaRequireCurrent makes Open fail with ErrSchemaOutdated.
	SchemaRequireCurrent SchemaPolicy = iota
	// SchemaMigrate makes Open apply the pending migrations.
	SchemaMigrate
	// SchemaAllowOutdated makes Open succeed. Primitives then run in their
	// documented compatible mode against the previous schema version, which
	// is how new code runs in the minutes before its migration lands.
	SchemaAllowOutdated
)

// CombinePolicy says whether a DB gathers concurrent pool calls into
// batches of one commit (Config.Combine).
type CombinePolicy int

const (
	// CombineDefault, the zero value, combines: at one client the
	// combiner costs nothing measurable (0.95–0.99× the calls per second
	// of committing alone, docs/performance.md), and under concurrency
	// it gives 1.5–3× as many.
	CombineDefault CombinePolicy = iota
	// CombineOn combines, whatever the default becomes.
	CombineOn
	// CombineOff makes each call commit alone.
	CombineOff
)

// Config configures a DB. A nil *Config means all defaults.
type Config struct {
	// Clock is the time source. Defaults to nil: the engine's own clock,
	// read inside each statement.
	Clock Clock
	// Schema says what to do with an outdated schema. Defaults to
	// SchemaRequireCurrent. A schema newer than the code is always refused.
	Schema SchemaPolicy
	// MaxOpenConns bounds the connection pool. Defaults to 10. On
	// SQLite, while combined batches follow one another, one of these
	// connections is the combiner's writer, out of the pool until 250 ms
	// after the last batch; a pool of one is never taken so.
	MaxOpenConns int
	// TxAttempts bounds how often InTx runs a transaction that the engine
	// aborted for a transient conflict. Defaults to 10.
	TxAttempts int
	// TxBackoff is the first retry delay; each retry doubles it, with full
	// jitter, up to one second. Defaults to 5ms.
	TxBackoff time.Duration
	// Combine gathers the concurrent calls that claim Acquire, Renew and
	// Release, dedup Observe, inbox Receive without a processing
	// function and quota Consume make on the pool
	// (not in a caller's transaction) into batches, each one transaction
	// and one commit (docs/performance.md, "Combining concurrent calls into one commit"). Each call gets the outcome it gets
	// alone. On SQLite calls on one key (a hot quota key, a contended
	// claim) share a batch, each in its turn deciding on what the one
	// before it left; on PostgreSQL a batch holds each key once. A batch
	// whose commit got no answer answers each of its calls
	// ErrUnavailable (it may have committed) and never runs again.
	// Defaults to CombineDefault, which combines: CombineOff makes each
	// call commit alone.
	Combine CombinePolicy
	// CombineMax bounds the operations of one batch. Defaults to 64 on
	// SQLite and to 32 on PostgreSQL, where a quarter of it waiting
	// starts a second batch (CombineBatches).
	CombineMax int
	// CombineBatches bounds the batches that run at once; a batch
	// beyond the first starts only when a quarter of CombineMax
	// operations wait for one. Defaults to 1 on SQLite, whose single
	// writer a second batch would wait for, and to 2 on PostgreSQL (1
	// when MaxOpenConns is below 4): one batch runs on the server while
	// the next gathers its calls and travels, where more batches at once
	// split the same calls into smaller batches, each paying its own
	// statements and commit (docs/performance.md, "How many batches at
	// once on PostgreSQL"). Raise it for a server with cores to spare
	// behind a long round trip.
	CombineBatches int
	// RequireSynchronousReplication makes every write check, in its own
	// transaction and with no round trip of its own, that its commit will
	// be waited for by a synchronous standby, and fail otherwise with a
	// *NotDurableError (ErrNotDurable), having committed nothing: on
	// PostgreSQL the statement that sets a write's tenant, the first of
	// every racefree write, also checks synchronous_commit,
	// synchronous_standby_names and that a synchronous standby streams
	// (pg_stat_replication, which the role needs pg_read_all_stats to
	// judge: without it every write fails). A role that row-level
	// security does not bind then sends that statement too, and runs a
	// write of several statements in one transaction. Reads are not
	// checked. Defaults to false. SQLite has no standbys: Open refuses
	// the option there with an *InputError, rather than accept a promise
	// it cannot keep.
	RequireSynchronousReplication bool
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.MaxOpenConns <= 0 {
		out.MaxOpenConns = 10
	}
	if out.TxAttempts <= 0 {
		out.TxAttempts = 10
	}
	if out.TxBackoff <= 0 {
		out.TxBackoff = 5 * time.Millisecond
	}
	return out
}

// DB represents an open racefree database. It is safe for concurrent use and
// implements Executor over its pool.
type DB struct {
	engine Engine
	sql    *sql.DB
	cfg    Config
	schema atomic.Int64 // highest schema version seen applied; only grows
	stmts  sync.Map     // query text -> *sql.Stmt, see Prepared
	comb   combiner     // see Combine
	writer writer       // the combiner's connection on SQLite, see writer.go
}

// New wraps an engine in a DB and checks the schema against cfg.Schema. The
// engine packages call it from their Open functions; most callers use those.
// On error the engine's pool is left open for the caller to close.
func New(ctx context.Context, engine Engine, cfg *Config) (*DB, error) {
	db := &DB{engine: engine, sql: engine.SQL(), cfg: cfg.withDefaults()}
	if db.cfg.RequireSynchronousReplication && engine.Name() != Postgres {
		return nil, Invalid("RequireSynchronousReplication", "%s has no standbys to replicate to: the option needs PostgreSQL", engine.Name())
	}
	_, pipelines := engine.(wire.Pipeliner)
	if db.cfg.CombineMax <= 0 {
		db.cfg.CombineMax = 64
		if pipelines {
			db.cfg.CombineMax = 32
		}
	}
	if db.cfg.CombineBatches <= 0 {
		db.cfg.CombineBatches = 1
		if pipelines {
			db.cfg.CombineBatches = max(1, min(2, db.cfg.MaxOpenConns/2))
		}
	}
	db.sql.SetMaxOpenConns(db.cfg.MaxOpenConns)
	db.sql.SetMaxIdleConns(db.cfg.MaxOpenConns)
	if err := db.connect(ctx); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	switch db.cfg.Schema {
	case SchemaMigrate:
		if _, err := db.MigrateUp(ctx); err != nil {
			return nil, err
		}
	case SchemaRequireCurrent, SchemaAllowOutdated:
		err := db.CheckSchema(ctx)
		if err != nil && !(db.cfg.Schema == SchemaAllowOutdated && isOutdated(err)) {
			return nil, err
		}
	default:
		return nil, Invalid("Schema", "unknown policy %d", db.cfg.Schema)
	}
	if h, ok := engine.(wire.Housekeeper); ok {
		h.StartHousekeeping()
	}
	return db, nil
}

// connect opens the first connection. Processes that open one fresh SQLite
// file together contend for the switch to WAL, which fails with
// SQLITE_BUSY rather than waiting; those attempts are retried like a
// transaction.
func (db *DB) connect(ctx context.Context) error {
	return db.retry(ctx, func() error { return db.sql.PingContext(ctx) })
}

// Engine returns SQLite or Postgres.
func (db *DB) Engine() string { return db.engine.Name() }

// SQL returns the underlying pool.
func (db *DB) SQL() *sql.DB { return db.sql }

// RequiresSynchronousReplication reports whether every write checks that
// a synchronous standby waits for its commit
// (Config.RequireSynchronousReplication).
func (db *DB) RequiresSynchronousReplication() bool {
	return db.cfg.RequireSynchronousReplication
}

// Clock returns the configured clock, or nil for the engine's own clock.
func (db *DB) Clock() Clock { return db.cfg.Clock }

// clockArg returns the value to bind to a query's clock parameter. Every
// racefree query reads "now" as COALESCE(<clock parameter>, <engine clock>),
// so nil selects the engine's clock, and a configured Clock (tests) is sent
// as Unix milliseconds.
func (db *DB) clockArg() any {
	if db.cfg.Clock == nil {
		return nil
	}
	return Millis(db.cfg.Clock.Now())
}

// interpretError maps a driver error onto racefree's sentinel errors.
func (db *DB) interpretError(err error) error {
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, ErrRetryable) || errors.Is(err, ErrUnavailable) {
		return err
	}
	return db.engine.InterpretError(err)
}

// CheckWritable returns a *ReadOnlyError (ErrReadOnly, ErrUnavailable)
// when the database node the pool reaches accepts no writes: on
// PostgreSQL a standby (pg_is_in_recovery()) or a session whose
// transactions are read-only (transaction_read_only). On an engine
// without such nodes (SQLite) it returns nil. Other errors are returned
// after InterpretError. /readyz calls it.
func (db *DB) CheckWritable(ctx context.Context) error {
	c, ok := db.engine.(wire.WritableChecker)
	if !ok {
		return nil
	}
	return db.interpretError(c.CheckWritable(ctx, db.sql))
}

// Close stops the engine's housekeeping (SQLite: the write-ahead log's
// keeper), then closes the pool.
func (db *DB) Close() error {
	if h, ok := db.engine.(wire.Housekeeper); ok {
		h.StopHousekeeping()
	}
	db.writer.give()
	return db.sql.Close()
}

// ExecContext runs query on the pool.
func (db *DB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return db.sql.ExecContext(ctx, query, args...)
}

// QueryContext runs query on the pool.
func (db *DB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return db.sql.QueryContext(ctx, query, args...)
}

// prepared returns query prepared on the pool, or nil. database/sql then
// prepares it on each connection the first time it runs there, and reuses
// that preparation on every later run on the same connection. On SQLite
// the driver otherwise parses and plans a statement on every call, about a
// third of a one-row write's time; on PostgreSQL Prepared returns nil
// (a prepared statement is session state, which a transaction-mode pooler
// does not keep). It returns nil too when the preparation fails (a table
// not yet migrated, say): the caller runs the query unprepared and gets
// the error there. Only for racefree's own fixed statements: the
// preparations are kept for the life of the DB, one per query text.
func (db *DB) prepared(ctx context.Context, query string) *sql.Stmt {
	if db.engine.Name() != SQLite {
		return nil
	}
	if st, ok := db.stmts.Load(query); ok {
		return st.(*sql.Stmt)
	}
	st, err := db.sql.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	if have, loaded := db.stmts.LoadOrStore(query, st); loaded {
		_ = st.Close()
		return have.(*sql.Stmt)
	}
	return st
}

// preparedAlready returns query's preparation (Prepared) when the DB
// holds one, without making one.
func (db *DB) preparedAlready(query string) *sql.Stmt {
	if st, ok := db.stmts.Load(query); ok {
		return st.(*sql.Stmt)
	}
	return nil
}

// QueryRowContext runs query on the pool.
func (db *DB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return db.sql.QueryRowContext(ctx, query, args...)
}
