package testdb

import (
	"os"
	"path/filepath"
	"testing"
)

// Previous reads the previous release's statement name for engine from
// dir/previous/engine/name.sql (dir is a package's testdata directory):
// the statements the rollout tests run against the expand-only schema.
func Previous(t testing.TB, dir, engine, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "previous", engine, name+".sql"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
