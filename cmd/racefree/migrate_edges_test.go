package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// runIn runs racefree as a process of its own in dir, with env added to
// its environment, and returns what a shell would see: the default --db
// (sqlite:racefree.db) is a path in the current directory, and
// RACEFREE_DB is read when the command is built, so neither can be tried
// in this process.
func runIn(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := cli(ctx, args...)
	cmd.Dir = dir
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(interface{ ExitCode() int }); ok {
			code = ee.ExitCode()
		}
	}
	return result{code, out.String(), errb.String()}
}

// TestMigrateStatusAndSQLWithEachOptionalFlag: migrate status refuses a
// SQLite file that does not exist with one line and creates nothing, and
// migrate sql connects to nothing and creates nothing, without and with
// each optional argument: no --db (the default file in the current
// directory), RACEFREE_DB, --db, and --format json (status).
func TestMigrateStatusAndSQLWithEachOptionalFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		env  []string
		args []string
		file string // the path the refusal names
	}{
		{nil, nil, "racefree.db"},
		{nil, []string{"--format", "json"}, "racefree.db"},
		{[]string{"RACEFREE_DB=sqlite:env.db"}, nil, "env.db"},
		{[]string{"RACEFREE_DB=sqlite:env.db"}, []string{"--format", "json"}, "env.db"},
		{nil, []string{"--db", "sqlite:flag.db"}, "flag.db"},
		{nil, []string{"--db", "sqlite:flag.db", "--format", "json"}, "flag.db"},
		{[]string{"RACEFREE_DB=sqlite:env.db"}, []string{"--db", "sqlite:flag.db", "--format", "json"}, "flag.db"},
	} {
		r := runIn(t, dir, c.env, append([]string{"migrate", "status"}, c.args...)...)
		if r.code == 0 || r.stdout != "" || !strings.HasPrefix(r.stderr, "racefree: no database at "+c.file+" ") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("migrate status %q with %q: exit %d, stdout %q, stderr %q; want one line naming %s", c.args, c.env, r.code, r.stdout, r.stderr, c.file)
		}
	}
	for _, c := range []struct {
		env  []string
		args []string
		want string // a statement of the engine's script
	}{
		{nil, nil, "AUTOINCREMENT"},
		{[]string{"RACEFREE_DB=sqlite:env.db"}, nil, "AUTOINCREMENT"},
		{[]string{"RACEFREE_DB=postgres://nobody@127.0.0.1:1/x?connect_timeout=1"}, nil, "ENABLE ROW LEVEL SECURITY"},
		{[]string{"RACEFREE_DB=postgres://nobody@127.0.0.1:1/x?connect_timeout=1"}, []string{"--db", "sqlite:flag.db"}, "AUTOINCREMENT"},
	} {
		r := runIn(t, dir, c.env, append([]string{"migrate", "sql"}, c.args...)...)
		if r.code != 0 || !strings.Contains(r.stdout, "CREATE TABLE racefree_claims") || !strings.Contains(r.stdout, c.want) {
			t.Errorf("migrate sql %q with %q: exit %d, stderr %q; want the script with %s", c.args, c.env, r.code, r.stderr, c.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("migrate status and sql created %d files in the current directory, want none", len(entries))
	}
}
