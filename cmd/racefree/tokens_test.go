package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestServeRefusesBadRefreshOptions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--refresh-grace", "5s"},
		{"--refresh-grace", "5s", "--refresh-secret", "short"},
		{"--refresh-grace", "-1s"},
		{"--refresh-grace", "2h", "--refresh-secret", strings.Repeat("s", 32)},
	} {
		r := runCLI(t, append([]string{"serve", "--db", "sqlite:" + filepath.Join(dir, "x.db"), "--addr", "127.0.0.1:0"}, args...)...)
		if r.code == 0 || !strings.HasPrefix(r.stderr, "racefree: invalid refresh-") {
			t.Errorf("%v: exit %d, %q; want a refusal", args, r.code, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused flags wrote %d files", len(entries))
	}
	if got, want := serveCmd().Flags().Lookup("refresh-grace").DefValue, "0s"; got != want {
		t.Errorf("--refresh-grace defaults to %s, want %s", got, want)
	}
}
