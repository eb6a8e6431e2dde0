package main

import (
	"context"
	"path/filepath"
	"testing"
)

// TestRunOnASmallTable keeps the reproduction command of
// docs/performance.md working: the whole measurement, on a table small
// enough for a test.
func TestRunOnASmallTable(t *testing.T) {
	t.Parallel()
	if err := run(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "reap.db"), 300, 100); err != nil {
		t.Fatal(err)
	}
}
