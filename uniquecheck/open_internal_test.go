package uniquecheck

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"
)

// TestOpenReadsOnly checks Open's promise on SQLite by itself, whatever a
// caller checks before it: a path that names no file is an error and
// leaves no file behind, and an existing database is opened read-only, so
// a write through the checker's pool fails and the file is unchanged.
func TestOpenReadsOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if c, err := Open("sqlite:" + filepath.Join(dir, "missing.db")); err == nil {
		c.Close()
		t.Fatal("Open of a path that names no file succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("Open of a missing file left %d files", len(entries))
	}

	path := filepath.Join(dir, "app.db")
	w, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Exec(`CREATE TABLE users (email TEXT)`); err != nil {
		t.Fatal(err)
	}
	w.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open("sqlite:" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.db.ExecContext(context.Background(), `INSERT INTO users (email) VALUES ('a@x')`); err == nil {
		t.Fatal("a write through the checker's pool succeeded: Open did not open the file read-only")
	}
	c.Close()
	if after, err := os.ReadFile(path); err != nil || string(after) != string(before) {
		t.Fatalf("the database file changed under Open (%v)", err)
	}
}
