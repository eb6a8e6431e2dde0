package sqlite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A second round from outside of the SQLite engine (sqlite.go, wal.go):
// each test holds one promise at the point where a slip would break it.

// TestEdges2ADirectoryThatIsAFileIsRefused: NewEngine checks that the
// path's directory is one: a path under a regular file is refused at
// once, naming the directory, never accepted to fail later at the first
// statement.
func TestEdges2ADirectoryThatIsAFileIsRefused(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(file, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(filepath.Join(file, "r.db"))
	if err == nil {
		_ = e.SQL().Close()
		t.Fatal("NewEngine under a regular file: no error; want one naming the directory")
	}
	if !strings.Contains(err.Error(), "directory "+file) {
		t.Errorf("NewEngine under a regular file: %v; want it to name the directory %s", err, file)
	}
}

// TestEdges2AKeeperStoppedBeforeItStartsNeverStarts: the WAL keeper of an
// engine whose housekeeping was stopped before it started (a DB closed
// before racefree.New started it) does not start when
// StartHousekeeping comes later: it would run on a pool that is closed.
func TestEdges2AKeeperStoppedBeforeItStartsNeverStarts(t *testing.T) {
	t.Parallel()
	e, err := NewEngine(filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.SQL().Close()
	e.StopHousekeeping()
	e.StartHousekeeping()
	defer e.StopHousekeeping()
	if e.wal.cancel != nil || e.wal.done != nil {
		t.Fatal("StartHousekeeping after StopHousekeeping started the WAL keeper")
	}
}
