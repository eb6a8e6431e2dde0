package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

//go:embed migrations/*.sql
var migrations embed.FS

// BusyTimeout is how long a statement waits for another connection's write
// lock before it fails with SQLITE_BUSY.
const BusyTimeout = 10 * time.Second

// The combiner looks for [wire.CommitJudge]: a missing method would take
// every failed commit for an unknown outcome; and for [wire.ManyBinder]:
// a missing method would run every batch one statement per operation.
var (
	_ wire.CommitJudge = (*Engine)(nil)
	_ wire.ManyBinder  = (*Engine)(nil)
	_ wire.Housekeeper = (*Engine)(nil)
)

// Engine represents a SQLite database file. It implements [racefree.Engine].
type Engine struct {
	db  *sql.DB
	wal *walKeeper
}

// Open opens the SQLite database file at path, creating the file (but not
// its directory) when it does not exist, and returns it as a [racefree.DB].
func Open(ctx context.Context, path string, cfg *racefree.Config) (*racefree.DB, error) {
	e, err := NewEngine(path)
	if err != nil {
		return nil, err
	}
	db, err := racefree.New(ctx, e, cfg)
	if err != nil {
		_ = e.db.Close()
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	return db, nil
}

// ErrNoDatabase means OpenExisting found no database file at its path. It
// matches fs.ErrNotExist.
var ErrNoDatabase = fmt.Errorf("no database file: %w", fs.ErrNotExist)

// OpenExisting opens the SQLite database file at path like Open, except
// that it never creates it: the file is opened read/write without create
// (the URI mode=rw), so a path that names no file is an error matching
// ErrNoDatabase and fs.ErrNotExist, and leaves no file behind. Commands
// that only use a database someone else made call it, so that a typo in
// a path does not leave an empty database there.
func OpenExisting(ctx context.Context, path string, cfg *racefree.Config) (*racefree.DB, error) {
	e, err := newEngine(path, false)
	if err != nil {
		return nil, err
	}
	if err := e.db.PingContext(ctx); err != nil {
		_ = e.db.Close()
		if _, serr := os.Stat(path); errors.Is(serr, fs.ErrNotExist) {
			return nil, fmt.Errorf("sqlite %s: %w", path, ErrNoDatabase)
		}
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	db, err := racefree.New(ctx, e, cfg)
	if err != nil {
		_ = e.db.Close()
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	return db, nil
}

// NewEngine checks path and prepares a connection pool on it. It does no
// I/O beyond checking that the directory exists.
func NewEngine(path string) (*Engine, error) { return newEngine(path, true) }

// newEngine is NewEngine; without create, its connections open the file
// read/write only, never creating it.
func newEngine(path string, create bool) (*Engine, error) {
	return newEngineWAL(path, create, WALLimit, walCheckEvery)
}

// newEngineWAL is newEngine with the log's limit and the keeper's period
// given (tests).
func newEngineWAL(path string, create bool, walLimit int64, walEvery time.Duration) (*Engine, error) {
	if path == "" {
		return nil, racefree.Invalid("sqlite path", "empty")
	}
	if path == ":memory:" || strings.Contains(path, "mode=memory") {
		return nil, racefree.Invalid("sqlite path", "an in-memory database is private to one connection; use a file")
	}
	if strings.ContainsAny(path, "?#") {
		return nil, racefree.Invalid("sqlite path", "%q must not contain ? or #", path)
	}
	if dir := filepath.Dir(path); dir != "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("sqlite %s: directory %s does not exist", path, dir)
		}
	}
	params := url.Values{}
	params.Set("_busy_timeout", fmt.Sprint(BusyTimeout.Milliseconds()))
	params.Set("_journal_mode", "WAL")
	params.Set("_synchronous", "NORMAL")
	params.Set("_foreign_keys", "1")
	params.Set("_txlock", "immediate")
	params.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walLimit))
	// The absolute path: the log's file whatever the working directory
	// becomes, and the URI that opens without create.
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	name := path + "?" + params.Encode()
	if !create {
		params.Set("mode", "rw") // SQLITE_OPEN_READWRITE without SQLITE_OPEN_CREATE
		name = (&url.URL{Scheme: "file", Path: abs, RawQuery: params.Encode()}).String()
	}
	db, err := sql.Open("sqlite", name)
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	return &Engine{db: db, wal: &walKeeper{path: abs + "-wal", limit: walLimit, every: walEvery}}, nil
}

// StartHousekeeping starts what keeps the database file in shape while a
// DB is open on it: the write-ahead log's keeper (WALLimit). racefree.New
// calls it once the DB is ready.
func (e *Engine) StartHousekeeping() { e.wal.start(e.db) }

// StopHousekeeping stops it, and returns once it stopped. DB.Close calls
// it before it closes the pool.
func (e *Engine) StopHousekeeping() { e.wal.stop() }

// Name returns [racefree.SQLite].
func (e *Engine) Name() string { return racefree.SQLite }

// SQL returns the connection pool.
func (e *Engine) SQL() *sql.DB { return e.db }

// Migrations returns the SQLite migrations.
func (e *Engine) Migrations() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// LockMigrations does nothing: the IMMEDIATE transaction already holds the
// database's write lock, which excludes every other migrator.
func (e *Engine) LockMigrations(context.Context, *sql.Tx) error { return nil }

// MayHaveCommitted reports whether err, returned by COMMIT or by a
// statement that commits by itself, leaves open that the transaction
// committed ([wire.CommitJudge]): an I/O error only. SQLite commits in
// the process, and in WAL mode a transaction commits once its commit
// frame is in the WAL: a busy or locked database, a constraint checked at
// commit, a full disk or an interrupt fails before that frame is written,
// and the driver rolls back what is left open, so nothing committed. An
// I/O error may come after the frame is written (with synchronous=FULL,
// its fsync), and recovery then finds the transaction committed.
func (e *Engine) MayHaveCommitted(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_IOERR
}

// InterpretError maps SQLite result codes onto racefree's sentinels:
// SQLITE_BUSY and SQLITE_LOCKED are ErrRetryable, a UNIQUE or PRIMARY KEY
// violation is ErrConflict, SQLITE_FULL (the disk or filesystem is full:
// the write rolled back) and SQLITE_IOERR (a read, write or sync of the
// database's files failed: a write that commits by itself may have
// committed, see MayHaveCommitted) are ErrUnavailable, and sql.ErrNoRows
// is ErrNotFound.
func (e *Engine) InterpretError(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", racefree.ErrNotFound, err)
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	switch code := se.Code(); {
	case code&0xff == sqlite3.SQLITE_BUSY, code&0xff == sqlite3.SQLITE_LOCKED:
		return fmt.Errorf("%w: %w", racefree.ErrRetryable, err)
	case code == sqlite3.SQLITE_CONSTRAINT_UNIQUE, code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return fmt.Errorf("%w: %w", racefree.ErrConflict, err)
	case code&0xff == sqlite3.SQLITE_FULL, code&0xff == sqlite3.SQLITE_IOERR:
		return fmt.Errorf("%w: %w", racefree.ErrUnavailable, err)
	}
	return err
}
