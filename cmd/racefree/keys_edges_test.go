package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestKeysRefusedWithEachOptionalFlag: a refused keys command is one line
// on stderr, a non-zero exit and nothing on stdout without and with each
// of its optional flags (--scope, --name, --format json), and changes no
// key, tenant or revocation; a name of apikey.MaxNameBytes is taken, one
// byte more is refused before anything is opened (on a file that does not
// exist the line names the name, not the file, and no file is made).
func TestKeysRefusedWithEachOptionalFlag(t *testing.T) {
	t.Parallel()
	atLimit, pastLimit := strings.Repeat("n", apikey.MaxNameBytes), strings.Repeat("n", apikey.MaxNameBytes+1)
	testdb.EachDSN(t, func(t *testing.T, d string) {
		f := newRefusalFixture(t, d)
		createFlags := [][]string{nil, {"--scope", "read"}, {"--name", "ci"}, {"--format", "json"},
			{"--scope", "admin", "--name", "ci", "--format", "json"}}
		var refused [][]string
		for _, flags := range createFlags {
			refused = append(refused,
				append([]string{"keys", "create", "--tenant", "a b"}, flags...),
				append([]string{"keys", "create"}, flags...))
		}
		for _, flags := range [][]string{nil, {"--scope", "read"}, {"--format", "json"}} {
			refused = append(refused, append([]string{"keys", "create", "--tenant", "globex", "--name", pastLimit}, flags...))
		}
		for _, flags := range [][]string{nil, {"--format", "json"}} {
			refused = append(refused,
				append([]string{"keys", "revoke", "--tenant", "globex", f.key.ID}, flags...),
				append([]string{"keys", "revoke", "--tenant", "acme", "0123456789abcdef"}, flags...),
				append([]string{"keys", "revoke", f.key.ID}, flags...),
				append([]string{"keys", "list", "--tenant", "a/b"}, flags...))
		}
		for _, args := range refused {
			r := runCLI(t, append(args, "--db", d)...)
			if r.code == 0 || !strings.HasPrefix(r.stderr, "racefree: ") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || r.stdout != "" {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want non-zero, one line on stderr, nothing on stdout", args, r.code, r.stdout, r.stderr)
			}
		}
		f.unchanged(t)
		if r := runCLI(t, "keys", "create", "--tenant", "acme", "--name", atLimit, "--format", "json", "--db", d); r.code != 0 || !strings.Contains(r.stdout, `"name":"`+atLimit+`"`) {
			t.Errorf("a name of exactly %d bytes: exit %d, stdout %q, stderr %q; want it created", apikey.MaxNameBytes, r.code, r.stdout, r.stderr)
		}
	})
	dir := t.TempDir()
	missing := "sqlite:" + filepath.Join(dir, "typo.db")
	for _, flags := range [][]string{nil, {"--scope", "read"}, {"--format", "json"}} {
		args := append([]string{"keys", "create", "--tenant", "acme", "--name", pastLimit, "--db", missing}, flags...)
		if r := runCLI(t, args...); r.code == 0 || !strings.Contains(r.stderr, "name") || strings.Contains(r.stderr, "no database at") || r.stdout != "" {
			t.Errorf("a name of %d bytes on a missing file, %q: exit %d, stdout %q, stderr %q; want the name refused before anything is opened", apikey.MaxNameBytes+1, flags, r.code, r.stdout, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused keys commands created %d files", len(entries))
	}
}
