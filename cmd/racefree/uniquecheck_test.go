package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
)

func TestUniqueCheckCLI(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		db := testdb.Open(t, dsn, nil)
		ctx := context.Background()
		if _, err := db.ExecContext(ctx, `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT, deleted_at BIGINT)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO users VALUES (1, 'ann@x.io', NULL), (2, 'Ann@x.io', NULL), (3, 'ann@x.io', 5), (4, NULL, NULL), (5, NULL, NULL)`); err != nil {
			t.Fatal(err)
		}
		before := fileSum(t, dsn)

		r := runCLI(t, "unique-check", "--db", dsn, "--table", "users", "--key", "lower(email)", "--where", "deleted_at IS NULL")
		if r.code != 1 || !strings.Contains(r.stdout, "1 duplicate groups, 1 surplus rows") || !strings.Contains(r.stdout, "sha256:") || strings.Contains(r.stdout, "ann@x.io") {
			t.Fatalf("text: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if !strings.HasPrefix(r.stderr, "racefree: ") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("stderr should be one line: %q", r.stderr)
		}

		r = runCLI(t, "unique-check", "--db", dsn, "--table", "users", "--key", "lower(email)", "--format", "json", "--reveal-values")
		if r.code != 1 {
			t.Fatalf("json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		var got struct {
			Table           string   `json:"table"`
			Keys            []string `json:"keys"`
			Where           *string  `json:"where"`
			DuplicateGroups int64    `json:"duplicate_groups"`
			SurplusRows     int64    `json:"surplus_rows"`
			Groups          []struct {
				Values      []*string `json:"values"`
				Count       int64     `json:"count"`
				PrimaryKeys []int     `json:"primary_keys"`
			} `json:"groups"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		if got.Table != `"users"` || got.Keys[0] != "lower(email)" || got.Where == nil || got.DuplicateGroups != 1 || got.SurplusRows != 2 ||
			len(got.Groups) != 1 || *got.Groups[0].Values[0] != "ann@x.io" || got.Groups[0].Count != 3 || len(got.Groups[0].PrimaryKeys) != 3 {
			t.Fatalf("json: %+v", got)
		}

		if r := runCLI(t, "unique-check", "--db", dsn, "--table", "users", "--key", "email", "--key", "id"); r.code != 0 || !strings.Contains(r.stdout, "no duplicates") {
			t.Fatalf("clean: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}

		r = runCLI(t, "unique-check", "--db", dsn, "--table", "users", "--key", "lower(email)", "--dedupe-sql", "keep=min-id")
		if r.code != 1 || !strings.Contains(r.stdout, "DELETE FROM \"users\"") || !strings.Contains(r.stdout, "users_dedupe_archive") {
			t.Fatalf("dedupe: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}

		dir := t.TempDir()
		mig := filepath.Join(dir, "042.sql")
		write(t, mig, "UPDATE users SET email = trim(email);\nCREATE UNIQUE INDEX users_email ON users (lower(email)) WHERE deleted_at IS NULL;\nCREATE UNIQUE INDEX users_id ON users (id);\n")
		r = runCLI(t, "unique-check", "--db", dsn, "--migration", mig)
		if r.code != 1 || !strings.Contains(r.stdout, "042.sql:2") || !strings.Contains(r.stdout, "042.sql:3") || !strings.Contains(r.stdout, "updates email") {
			t.Fatalf("migration: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}

		for _, args := range [][]string{
			{"--table", "users", "--key", "email; DROP TABLE users"},
			{"--table", "users", "--key", "no_such_column"},
			{"--table", "nope", "--key", "email"},
			{"--table", "users"},
			{"--table", "users", "--key", "email", "--migration", mig},
			{"--table", "users", "--key", "email", "--format", "xml"},
			{"--table", "users", "--key", "email", "--dedupe-sql", "keep=random"},
			{"--no-such-flag"},
		} {
			r := runCLI(t, append([]string{"unique-check", "--db", dsn}, args...)...)
			if r.code != 2 || !strings.HasPrefix(r.stderr, "racefree: ") || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line", args, r.code, r.stderr)
			}
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM users`).Scan(&n); err != nil || n != 5 {
			t.Fatalf("users has %d rows (%v): unique-check wrote", n, err)
		}
		if after := fileSum(t, dsn); after != before {
			t.Fatal("unique-check changed the SQLite file")
		}
	})
}

func TestUniqueCheckMissingSQLiteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := runCLI(t, "unique-check", "--db", "sqlite:"+filepath.Join(dir, "x.db"), "--table", "users", "--key", "email")
	if r.code != 2 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("unique-check created %d files", len(entries))
	}
}

// fileSum hashes a SQLite DSN's database file and its WAL; "" on PostgreSQL.
func fileSum(t *testing.T, dsn string) string {
	t.Helper()
	path, ok := strings.CutPrefix(dsn, racefree.SQLite+":")
	if !ok {
		return ""
	}
	h := sha256.New()
	for _, p := range []string{path, path + "-wal"} {
		b, _ := os.ReadFile(p)
		h.Write(b)
	}
	return string(h.Sum(nil))
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestUniqueCheckMaxKeys proves --max-keys: a group lists its lowest
// primary keys up to the bound (default 10) with its true row count beside
// them, in JSON and in text, -1 lists all, and 0 is refused with exit 2.
// It runs the command in this process (runUniqueCheck).
// JSON output masks the key values unless --reveal-values, as text does.
func TestUniqueCheckMaxKeys(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		db := testdb.Open(t, dsn, nil)
		ctx := context.Background()
		if _, err := db.ExecContext(ctx, `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 12; i++ {
			if _, err := db.ExecContext(ctx, `INSERT INTO users VALUES (`+strconv.Itoa(100-i)+`, 'many@x.io')`); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO users VALUES (1, 'pair@x.io'), (2, 'pair@x.io')`); err != nil {
			t.Fatal(err)
		}
		type group struct {
			Values      []string `json:"values"`
			Count       int64    `json:"count"`
			PrimaryKeys []int    `json:"primary_keys"`
		}
		groups := func(args ...string) []group {
			t.Helper()
			r := runUniqueCheck(t, append([]string{"--db", dsn, "--table", "users", "--key", "email", "--format", "json"}, args...)...)
			if r.code != 1 {
				t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
			}
			var rep struct {
				Groups []group `json:"groups"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("%v: %s", err, r.stdout)
			}
			return rep.Groups
		}
		g := groups("--reveal-values")
		if len(g) != 2 || g[0].Values[0] != "many@x.io" || g[0].Count != 12 || fmt.Sprint(g[0].PrimaryKeys) != "[88 89 90 91 92 93 94 95 96 97]" ||
			g[1].Count != 2 || fmt.Sprint(g[1].PrimaryKeys) != "[1 2]" {
			t.Fatalf("default --max-keys: %+v", g)
		}
		if g := groups("--max-keys", "1"); len(g) != 2 || g[0].Count != 12 || fmt.Sprint(g[0].PrimaryKeys) != "[88]" || g[1].Count != 2 || fmt.Sprint(g[1].PrimaryKeys) != "[1]" {
			t.Fatalf("--max-keys 1: %+v", g)
		}
		if g := groups("--max-keys", "-1"); len(g) != 2 || len(g[0].PrimaryKeys) != 12 || g[0].PrimaryKeys[0] != 88 {
			t.Fatalf("--max-keys -1: %+v", g)
		}
		if g := groups(); len(g) != 2 || !strings.HasPrefix(g[0].Values[0], "sha256:") || strings.Contains(g[1].Values[0], "pair") {
			t.Fatalf("JSON without --reveal-values: %+v, want masked values", g)
		}
		r := runUniqueCheck(t, "--db", dsn, "--table", "users", "--key", "email")
		if r.code != 1 || !strings.Contains(r.stdout, "88 89 90 91 92 93 94 95 96 97 … 2 more (--max-keys)") {
			t.Fatalf("text: exit %d\n%s", r.code, r.stdout)
		}
		// --limit lists the largest groups; the totals still count them all.
		r = runUniqueCheck(t, "--db", dsn, "--table", "users", "--key", "email", "--limit", "1", "--format", "json")
		var rep struct {
			DuplicateGroups int64 `json:"duplicate_groups"`
			SurplusRows     int64 `json:"surplus_rows"`
			Groups          []group
		}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 || rep.DuplicateGroups != 2 || rep.SurplusRows != 12 || len(rep.Groups) != 1 || rep.Groups[0].Count != 12 {
			t.Fatalf("--limit 1: exit %d, %+v (%v)", r.code, rep, err)
		}
		r = runUniqueCheck(t, "--db", dsn, "--table", "users", "--key", "email", "--limit", "1")
		if r.code != 1 || !strings.Contains(r.stdout, "… 1 more groups (--limit)") {
			t.Fatalf("text --limit 1: exit %d\n%s", r.code, r.stdout)
		}
		if r := runUniqueCheck(t, "--db", dsn, "--table", "users", "--key", "email", "--max-keys", "0"); r.code != 2 {
			t.Fatalf("--max-keys 0: exit %d, want 2", r.code)
		}
	})
}

// runUniqueCheck runs the unique-check command in this process, flags
// parsed as the binary parses them, and returns its exit status and
// output as run would: cheaper than a child process, so that the many
// runs of a test do not slow the others down.
func runUniqueCheck(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return runUniqueCheckCtx(ctx, args...)
}

// runUniqueCheckCtx is runUniqueCheck under the caller's context.
func runUniqueCheckCtx(ctx context.Context, args ...string) result {
	var out, errb bytes.Buffer
	cmd := uniqueCheckCmd()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	code := 0
	if err := cmd.ExecuteContext(ctx); err != nil {
		code = 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		fmt.Fprintf(&errb, "racefree: %s\n", oneLine(err.Error()))
	}
	return result{code, out.String(), errb.String()}
}
