package sqlite_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/sqlite"
)

func TestOpenRejectsWhatIsNotAFile(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"", ":memory:", "file:x?mode=memory", "a.db?x=1", filepath.Join(t.TempDir(), "no", "dir.db")} {
		if _, err := sqlite.Open(context.Background(), path, nil); err == nil {
			t.Errorf("%q: want an error", path)
		}
	}
}

// TestConnectionSettings: every connection, of Open and of OpenExisting
// (which never creates the file) alike, runs in WAL mode with synchronous
// NORMAL, foreign keys on, a 10 s busy timeout and transactions that
// begin IMMEDIATE.
func TestConnectionSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "r.db")
	db, err := sqlite.Open(ctx, path, &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		t.Fatal(err)
	}
	checkSettings(t, db, "Open")
	if !errors.Is(wire.Of(db).InterpretError(context.Canceled), context.Canceled) {
		t.Fatal("InterpretError must keep errors it does not know")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	existing, err := sqlite.OpenExisting(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer existing.Close()
	checkSettings(t, existing, "OpenExisting")
}

func checkSettings(t *testing.T, db *racefree.DB, opened string) {
	t.Helper()
	ctx := context.Background()
	for pragma, want := range map[string]string{"journal_mode": "wal", "synchronous": "1", "foreign_keys": "1", "busy_timeout": "10000"} {
		var got string
		if err := db.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil || got != want {
			t.Errorf("%s: PRAGMA %s = %q, %v; want %q", opened, pragma, got, err, want)
		}
	}
	// An IMMEDIATE transaction holds the write lock from BEGIN: a second
	// writer waits for it instead of failing on its first write.
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if tx2, err := db.SQL().BeginTx(short, nil); err == nil {
		_ = tx2.Rollback()
		t.Fatalf("%s: a second transaction began while the first held the write lock: BEGIN is not IMMEDIATE", opened)
	}
}

// TestOpenExistingCreatesNothing: OpenExisting refuses a path that names
// no file with ErrNoDatabase (fs.ErrNotExist), leaving no file behind,
// and opens an existing database as Open does.
func TestOpenExistingCreatesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "typo.db")
	if _, err := sqlite.OpenExisting(ctx, path, nil); !errors.Is(err, sqlite.ErrNoDatabase) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenExisting of no file: %v, want ErrNoDatabase", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("OpenExisting left %d files, want none", len(entries))
	}
	db, err := sqlite.Open(ctx, path, &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = sqlite.OpenExisting(ctx, path, nil)
	if err != nil {
		t.Fatalf("OpenExisting of a migrated database: %v", err)
	}
	defer db.Close()
	if v, err := db.SchemaVersion(ctx); err != nil || v < 1 {
		t.Fatalf("schema version through OpenExisting: %d, %v", v, err)
	}
}
