package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Engine represents a PostgreSQL database. It implements racefree.Engine.
type Engine struct {
	db *sql.DB
}

// Open connects to the database at url (postgres://… or a key=value
// connection string) and returns it as a racefree.DB.
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
func NewEngine(url string) (*Engine, error) {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return &Engine{db: stdlib.OpenDB(*cc)}, nil
}

// Name returns racefree.Postgres.
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
// unique_violation is ErrConflict; 40001 serialization_failure and 40P01
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
	case pe.Code == "40001", pe.Code == "40P01":
		return fmt.Errorf("%w: %w", racefree.ErrRetryable, err)
	case strings.HasPrefix(pe.Code, "08"), strings.HasPrefix(pe.Code, "57") && pe.Code != "57014":
		return fmt.Errorf("%w: %w", racefree.ErrUnavailable, err)
	}
	return err
}

// connectionLost reports an error that came from the connection rather
// than from the server's answer: a failed connect, a broken or closed
// connection, a network error.
func connectionLost(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, sql.ErrConnDone) || pgconn.SafeToRetry(err)
}
