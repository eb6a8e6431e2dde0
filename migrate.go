package racefree

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/racefree/racefree/internal/query"
)

// Migration represents one versioned schema change of an engine.
type Migration struct {
	Version int64  // NNN from the file name
	Name    string // the rest of the file name, without .sql
	SQL     string // the DDL, applied in one transaction
}

// MigrationStatus represents a migration and whether it is applied.
type MigrationStatus struct {
	Migration
	Applied   bool
	AppliedAt int64 // Unix ms; 0 when not applied
}

const migrationsTable = `CREATE TABLE IF NOT EXISTS racefree_schema_migrations (
  version    BIGINT PRIMARY KEY,
  name       TEXT NOT NULL,
  applied_at BIGINT NOT NULL
)`

var migrationName = regexp.MustCompile(`^(\d{3,})_([a-z0-9_]+)\.sql$`)

// LoadMigrations reads NNN_name.sql files from fsys in version order.
func LoadMigrations(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration %q: name must be NNN_name.sql", e.Name())
		}
		v, _ := strconv.ParseInt(m[1], 10, 64)
		body, err := fs.ReadFile(fsys, path.Clean(e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration: %w", err)
		}
		if len(out) > 0 && out[len(out)-1].Version == v {
			return nil, fmt.Errorf("migration version %d appears twice", v)
		}
		out = append(out, Migration{Version: v, Name: m[2], SQL: query.Embedded(string(body))})
	}
	slices.SortFunc(out, func(a, b Migration) int { return int(a.Version - b.Version) })
	return out, nil
}

// Migrations returns this engine's migrations in version order.
func (db *DB) Migrations() ([]Migration, error) { return LoadMigrations(db.engine.Migrations()) }

// CodeVersion returns the highest schema version this code knows.
func (db *DB) CodeVersion() (int64, error) {
	ms, err := db.Migrations()
	if err != nil || len(ms) == 0 {
		return 0, err
	}
	return ms[len(ms)-1].Version, nil
}

// SchemaVersion returns the highest version applied to the database, or 0.
func (db *DB) SchemaVersion(ctx context.Context) (int64, error) {
	var v sql.NullInt64
	err := db.sql.QueryRowContext(ctx, `SELECT MAX(version) FROM racefree_schema_migrations`).Scan(&v)
	if err != nil {
		if db.tableMissing(ctx) {
			return 0, nil
		}
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	db.sawSchema(v.Int64)
	return v.Int64, nil
}

// schemaAtLeast reports whether migration version v is applied. It answers
// from memory once it has seen v applied (Open and every migration record
// the version they see), and otherwise reads the version again through
// exec, so code running in compatible mode (SchemaAllowOutdated) switches
// to the new schema as soon as its migration lands, at the cost of one
// small query per call until then. Pass the executor the operation was
// given: the query then runs on the caller's transaction, never on the
// pool, so that a caller holding the pool's last connection (MaxOpenConns
// 1) cannot wait for itself.
func (db *DB) schemaAtLeast(ctx context.Context, exec Executor, v int64) (bool, error) {
	if db.schema.Load() >= v {
		return true, nil
	}
	var have sql.NullInt64
	if err := exec.QueryRowContext(ctx, `SELECT MAX(version) FROM racefree_schema_migrations`).Scan(&have); err != nil {
		return false, fmt.Errorf("read schema version: %w", err)
	}
	db.sawSchema(have.Int64)
	return have.Int64 >= v, nil
}

func (db *DB) sawSchema(v int64) {
	for {
		old := db.schema.Load()
		if v <= old || db.schema.CompareAndSwap(old, v) {
			return
		}
	}
}

func (db *DB) tableMissing(ctx context.Context) bool {
	q := `SELECT count(*) FROM sqlite_master WHERE name = 'racefree_schema_migrations'`
	if db.Engine() == Postgres {
		q = `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'racefree_schema_migrations'`
	}
	var n int
	return db.sql.QueryRowContext(ctx, q).Scan(&n) == nil && n == 0
}

// CheckSchema returns nil when the database is at the code's version, and a
// *SchemaError (ErrSchemaOutdated or ErrSchemaTooNew) otherwise.
func (db *DB) CheckSchema(ctx context.Context) error {
	want, err := db.CodeVersion()
	if err != nil {
		return err
	}
	have, err := db.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if have != want {
		return &SchemaError{Have: have, Want: want}
	}
	return nil
}

// MigrateUp applies the pending migrations and returns those it applied.
//
// It runs in one transaction that first takes the engine's migration lock
// (a transaction-scoped advisory lock on PostgreSQL, the write lock on
// SQLite), so that processes starting at the same moment each finish
// without error and every migration is applied exactly once. A schema
// newer than the code is refused with ErrSchemaTooNew and left untouched.
func (db *DB) MigrateUp(ctx context.Context) ([]Migration, error) {
	return db.MigrateUpTo(ctx, -1)
}

// MigrateUpTo is MigrateUp stopping after version target (-1: the last).
// It exists for staged rollouts and for the tests that prove each
// primitive's compatible mode against the previous schema version.
func (db *DB) MigrateUpTo(ctx context.Context, target int64) ([]Migration, error) {
	ms, err := db.Migrations()
	if err != nil {
		return nil, err
	}
	all := ms
	if target >= 0 {
		ms = slices.DeleteFunc(slices.Clone(ms), func(m Migration) bool { return m.Version > target })
	}
	var applied []Migration
	err = db.InTx(ctx, func(tx *sql.Tx) error {
		applied = nil
		if err := db.engine.LockMigrations(ctx, tx); err != nil {
			return fmt.Errorf("lock migrations: %w", err)
		}
		if _, err := tx.ExecContext(ctx, migrationsTable); err != nil {
			return fmt.Errorf("create migrations table: %w", err)
		}
		var have sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM racefree_schema_migrations`).Scan(&have); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		if want := lastVersion(all); have.Int64 > want {
			return &SchemaError{Have: have.Int64, Want: want}
		}
		for _, m := range ms {
			if m.Version <= have.Int64 {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("apply migration %03d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.ExecContext(ctx, db.rebind(`INSERT INTO racefree_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`),
				m.Version, m.Name, db.nowMillis()); err != nil {
				return fmt.Errorf("record migration %03d: %w", m.Version, err)
			}
			applied = append(applied, m)
		}
		return nil
	})
	if err == nil {
		db.sawSchema(lastVersion(ms))
	}
	if err != nil {
		var se *SchemaError
		if errors.As(err, &se) {
			return nil, se
		}
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return applied, nil
}

// MigrationStatus lists every migration the code knows with whether it is
// applied, followed by any applied version the code does not know.
func (db *DB) MigrationStatus(ctx context.Context) ([]MigrationStatus, error) {
	ms, err := db.Migrations()
	if err != nil {
		return nil, err
	}
	applied := map[int64]MigrationStatus{}
	if !db.tableMissing(ctx) {
		rows, err := db.sql.QueryContext(ctx, `SELECT version, name, applied_at FROM racefree_schema_migrations ORDER BY version`)
		if err != nil {
			return nil, fmt.Errorf("read migrations: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var s MigrationStatus
			if err := rows.Scan(&s.Version, &s.Name, &s.AppliedAt); err != nil {
				return nil, fmt.Errorf("read migrations: %w", err)
			}
			s.Applied = true
			applied[s.Version] = s
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("read migrations: %w", err)
		}
	}
	var out []MigrationStatus
	for _, m := range ms {
		s := MigrationStatus{Migration: m}
		if a, ok := applied[m.Version]; ok {
			s.Applied, s.AppliedAt = true, a.AppliedAt
			delete(applied, m.Version)
		}
		out = append(out, s)
	}
	for _, a := range applied {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b MigrationStatus) int { return int(a.Version - b.Version) })
	return out, nil
}

// MigrationScript returns the engine's migrations as one plain SQL script,
// for teams that apply DDL with their own tool (goose, Atlas,
// golang-migrate). Each migration records itself in
// racefree_schema_migrations, so that Open then finds the schema current.
func MigrationScript(engine Engine) (string, error) {
	ms, err := LoadMigrations(engine.Migrations())
	if err != nil {
		return "", err
	}
	now := `CAST(unixepoch('subsec') * 1000 AS INTEGER)`
	if engine.Name() == Postgres {
		now = `(extract(epoch FROM clock_timestamp()) * 1000)::bigint`
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- racefree schema for %s: %d migrations.\n\n%s;\n", engine.Name(), len(ms), migrationsTable)
	for _, m := range ms {
		fmt.Fprintf(&b, "\n-- %03d_%s\n%s\n", m.Version, m.Name, strings.TrimSpace(m.SQL))
		fmt.Fprintf(&b, "INSERT INTO racefree_schema_migrations (version, name, applied_at) VALUES (%d, '%s', %s);\n", m.Version, m.Name, now)
	}
	return b.String(), nil
}

func lastVersion(ms []Migration) int64 {
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

func isOutdated(err error) bool { return errors.Is(err, ErrSchemaOutdated) }

// nowMillis reads the configured clock, or the process clock. It is used
// only for bookkeeping (when a migration was applied), never for a decision.
func (db *DB) nowMillis() int64 {
	if db.cfg.Clock != nil {
		return Millis(db.cfg.Clock.Now())
	}
	return Millis(time.Now())
}

// rebind turns ? placeholders into $N for PostgreSQL. It is used only for
// the few fixed statements of this package; primitives keep their SQL in
// .sql files per engine.
func (db *DB) rebind(q string) string {
	if db.Engine() != Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
