package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
)

//go:embed migrations/*.sql
var migrations embed.FS

// The interfaces beyond [racefree.Engine] that the combiner, pipelines and
// /readyz look for: a missing method would silently turn each off.
var (
	_ wire.Pipeliner       = (*Engine)(nil)
	_ wire.ManyBinder      = (*Engine)(nil)
	_ wire.ServerBound     = (*Engine)(nil)
	_ wire.GenericPlanner  = (*Engine)(nil)
	_ wire.CommitJudge     = (*Engine)(nil)
	_ wire.WritableChecker = (*Engine)(nil)
)

// Engine represents a PostgreSQL database. It implements [racefree.Engine].
type Engine struct {
	db *sql.DB
}

// Open connects to the database at url (postgres://… or a key=value
// connection string) and returns it as a [racefree.DB].
func Open(ctx context.Context, url string, cfg *racefree.Config) (*racefree.DB, error) {
	e, err := NewEngine(url)
	if err != nil {
		return nil, err
	}
	db, err := racefree.New(ctx, e, cfg)
	if err != nil {
		_ = e.db.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return db, nil
}

// NewEngine parses url and prepares a connection pool. It does no I/O.
//
// A connection that answers a write with SQLSTATE 25006
// (read_only_sql_transaction: a standby, or a session whose transactions
// are read-only) is closed at once, and the pool discards it instead of
// handing it out again (dropReadOnly): after a failover, a DSN that
// lists several hosts with target_session_attrs=read-write connects anew
// and finds the new primary, instead of every later write meeting the
// old, now read-only, node through a kept connection.
func NewEngine(url string) (*Engine, error) {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	dropReadOnly(&cc.Config)
	return &Engine{db: stdlib.OpenDB(*cc)}, nil
}

// readOnlySQLState is read_only_sql_transaction: a write in a read-only
// transaction, which is every transaction of a hot standby.
const readOnlySQLState = "25006"

// dropReadOnly makes the connections of cfg close themselves when the
// server answers readOnlySQLState, keeping pgx's own handler (which
// closes on FATAL errors) for every other error. A closed connection is
// refused by stdlib's ResetSession (driver.ErrBadConn) when database/sql
// next takes it from the pool, so it is discarded and a new one opened.
func dropReadOnly(cfg *pgconn.Config) {
	keep := cfg.OnPgError
	cfg.OnPgError = func(c *pgconn.PgConn, pe *pgconn.PgError) bool {
		if pe.Code == readOnlySQLState {
			return false
		}
		return keep == nil || keep(c, pe)
	}
}

// Name returns [racefree.Postgres].
func (e *Engine) Name() string { return racefree.Postgres }

// SQL returns the connection pool.
func (e *Engine) SQL() *sql.DB { return e.db }

// Migrations returns the PostgreSQL migrations.
func (e *Engine) Migrations() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// LockMigrations takes a transaction-scoped advisory lock keyed on the
// current schema, so migrators of one schema queue behind each other and
// the lock is gone when the transaction ends, even through a pooler.
func (e *Engine) LockMigrations(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('racefree.migrate.' || current_schema()))`)
	return err
}

// InterpretError maps SQLSTATEs onto racefree's sentinels: 23505
// unique_violation is ErrConflict; 25006 read_only_sql_transaction (a
// write on a standby or in a read-only transaction) is a
// *racefree.ReadOnlyError, which matches ErrReadOnly and ErrUnavailable;
// the strict prelude's refusal (22P02 with "racefree: not durable: ") is a
// *racefree.NotDurableError, which matches ErrNotDurable and
// ErrUnavailable; 40001 serialization_failure and 40P01
// deadlock_detected are ErrRetryable; classes 08 (connection exception) and
// 57 (operator intervention: a shutdown, a terminated backend), except
// 57014 query_canceled, are ErrUnavailable, as is a connection that failed
// or broke before the server answered; sql.ErrNoRows is ErrNotFound. A
// cancelled or expired context is returned as it is.
func (e *Engine) InterpretError(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", racefree.ErrNotFound, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		if connectionLost(err) {
			return fmt.Errorf("%w: %w", racefree.ErrUnavailable, err)
		}
		return err
	}
	switch {
	case pe.Code == "23505":
		return fmt.Errorf("%w: %w", racefree.ErrConflict, err)
	case pe.Code == readOnlySQLState:
		return &racefree.ReadOnlyError{Reason: "the server refused a write (SQLSTATE 25006)", Err: err}
	case pe.Code == notDurableSQLState && strings.Contains(pe.Message, notDurablePrefix):
		reason := pe.Message[strings.Index(pe.Message, notDurablePrefix)+len(notDurablePrefix):]
		return &racefree.NotDurableError{Reason: strings.TrimSuffix(reason, `"`), Err: err}
	case pe.Code == "40001", pe.Code == "40P01":
		return fmt.Errorf("%w: %w", racefree.ErrRetryable, err)
	case wire.UnavailableSQLState(pe.Code):
		return fmt.Errorf("%w: %w", racefree.ErrUnavailable, err)
	}
	return err
}

// notDurableSQLState and notDurablePrefix are how the strict prelude
// (internal/send/sql/postgres/set_strict.sql) fails: SQL has no RAISE, so it
// casts its reason, which begins with the prefix, to integer
// (invalid_text_representation).
const (
	notDurableSQLState = "22P02"
	notDurablePrefix   = "racefree: not durable: "
)

// writable asks whether the node accepts writes: whether it is a
// standby, and whether a transaction of this session is read-only by
// default.
const writable = `SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'`

// CheckWritable returns a *racefree.ReadOnlyError when the node exec
// reaches is in recovery (a standby: pg_is_in_recovery()) or its
// transactions are read-only (transaction_read_only, as
// default_transaction_read_only makes them), nil when it accepts writes,
// or the error of the probe ([wire.WritableChecker]).
func (e *Engine) CheckWritable(ctx context.Context, exec wire.Executor) error {
	var recovery, readOnly bool
	if err := exec.QueryRowContext(ctx, writable).Scan(&recovery, &readOnly); err != nil {
		return e.InterpretError(err)
	}
	switch {
	case recovery:
		return &racefree.ReadOnlyError{Reason: "the server is in recovery (a standby)"}
	case readOnly:
		return &racefree.ReadOnlyError{Reason: "the server's transactions are read-only (transaction_read_only is on)"}
	}
	return nil
}

// connectionLost reports an error that came from the connection rather
// than from the server's answer: a failed connect (pgconn.ConnectError,
// whatever its cause), or what wire.ConnectionLost names (a broken or
// closed connection, a network error, nothing sent).
func connectionLost(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || wire.ConnectionLost(err)
}
