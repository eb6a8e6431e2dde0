//go:build linux

package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/racefree/racefree"
	sqlite3 "modernc.org/sqlite/lib"
)

// TestEdgesAnIOErrorMayHaveCommitted holds the edge of the commit
// judge's result code: the driver reports SQLite's extended codes, so a
// write whose WAL the disk refuses fails with SQLITE_IOERR_WRITE (778),
// not SQLITE_IOERR itself, and MayHaveCommitted must read the primary
// code under it: such an error may come after the commit frame was
// written, and the combiner must not run the batch's operations again.
// The fault is real to SQLite (the WAL's descriptors swapped for
// read-only ones, as internal/testing/reliability does), on Linux only.
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
	restore := readOnlyDescriptors(t, path+"-wal")
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

// readOnlyDescriptors replaces every descriptor of this process open on
// file by one open read-only on it, and returns what puts the originals
// back (internal/testing/reliability's failWrites).
func readOnlyDescriptors(t *testing.T, file string) (restore func()) {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd (%v); the I/O error test did not run", err)
	}
	var targets []int
	for _, e := range fds {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == file {
			targets = append(targets, fd)
		}
	}
	if len(targets) == 0 {
		t.Fatalf("no descriptor of this process is open on %s", file)
	}
	var saved [][2]int
	restore = func() {
		for _, s := range saved {
			if err := syscall.Dup3(s[1], s[0], syscall.O_CLOEXEC); err != nil {
				t.Errorf("restore descriptor %d: %v", s[0], err)
			}
			syscall.Close(s[1])
		}
		saved = nil
	}
	t.Cleanup(restore)
	for _, fd := range targets {
		orig, err := syscall.Dup(fd)
		if err != nil {
			t.Fatal(err)
		}
		saved = append(saved, [2]int{fd, orig})
		ro, err := syscall.Open(file, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = syscall.Dup3(ro, fd, syscall.O_CLOEXEC)
		syscall.Close(ro)
		if err != nil {
			t.Fatal(err)
		}
	}
	return restore
}
