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

func TestConnectionSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "r.db"), &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for pragma, want := range map[string]string{"journal_mode": "wal", "synchronous": "1", "foreign_keys": "1", "busy_timeout": "10000"} {
		var got string
		if err := db.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil || got != want {
			t.Errorf("PRAGMA %s = %q, %v; want %q", pragma, got, err, want)
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
		t.Fatal("a second transaction began while the first held the write lock: BEGIN is not IMMEDIATE")
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(wire.Of(db).InterpretError(context.Canceled), context.Canceled) {
		t.Fatal("InterpretError must keep errors it does not know")
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
