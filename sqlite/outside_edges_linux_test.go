//go:build linux

package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/iofault"
	sqlite3 "modernc.org/sqlite/lib"
)

// TestEdgesAnIOErrorMayHaveCommitted holds the edge of the commit
// judge's result code: the driver reports SQLite's extended codes, so a
// write whose WAL the disk refuses fails with SQLITE_IOERR_WRITE (778),
// not SQLITE_IOERR itself, and MayHaveCommitted must read the primary
// code under it: such an error may come after the commit frame was
// written, and the combiner must not run the batch's operations again.
// The fault is real to SQLite (the WAL's descriptors swapped for
// read-only ones, internal/testing/iofault), on Linux only.
func TestEdgesAnIOErrorMayHaveCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ioerr.db")
	e, err := NewEngine(path)
	if err != nil {
		t.Fatal(err)
	}
	db, err := racefree.New(ctx, e, &racefree.Config{Schema: racefree.SchemaMigrate, MaxOpenConns: 1, Combine: racefree.CombineOff})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (k INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	restore := iofault.FailWrites(t, path+"-wal")
	_, err = db.ExecContext(ctx, `INSERT INTO t VALUES (1)`)
	restore()
	if code := sqliteCode(err); code&0xff != sqlite3.SQLITE_IOERR || code == sqlite3.SQLITE_IOERR {
		t.Fatalf("a write whose WAL the disk refuses: %v (code %d); the test needs an extended SQLITE_IOERR code", err, code)
	}
	if !e.MayHaveCommitted(err) {
		t.Errorf("MayHaveCommitted(%v) = false; an I/O error may come after the commit frame", err)
	}
	if !errors.Is(e.InterpretError(err), racefree.ErrUnavailable) {
		t.Errorf("InterpretError(%v) is not ErrUnavailable", err)
	}
}
