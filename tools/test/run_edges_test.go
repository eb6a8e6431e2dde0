package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/testing/testdb"
)

// The test command's promises, tried on the command as built, in a tiny
// module whose two packages' tests record the TEST_DATABASE_URL they were
// given: what its lines say is what ran.

var built struct {
	once sync.Once
	path string
	err  error
}

// TestMain removes the command built for the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if built.path != "" {
		os.RemoveAll(filepath.Dir(built.path))
	}
	os.Exit(code)
}

// command builds this package's command once and returns its path.
func command(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "racefree-test-command-")
		if err != nil {
			built.err = err
			return
		}
		built.path = filepath.Join(dir, "test")
		// -trimpath: the plain build's flags in CI (go vet's), whose
		// compiled dependencies it reuses.
		out, err := exec.Command("go", "build", "-trimpath", "-o", built.path, ".").CombinedOutput()
		if err != nil {
			built.err = errors.New(string(out))
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// tinyModule writes a module of two packages, a and b, whose tests write
// the TEST_DATABASE_URL they see to $TINY_OUT/a and $TINY_OUT/b; b's test
// fails when TINY_FAIL is 1. It returns the module's directory.
func tinyModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	test := func(pkg string) string {
		return "package " + pkg + "\n\nimport (\n\t\"os\"\n\t\"path/filepath\"\n\t\"testing\"\n)\n\n" +
			"func Test" + strings.ToUpper(pkg) + "(t *testing.T) {\n" +
			"\tif err := os.WriteFile(filepath.Join(os.Getenv(\"TINY_OUT\"), \"" + pkg + "\"), []byte(os.Getenv(\"TEST_DATABASE_URL\")), 0o644); err != nil {\n\t\tt.Fatal(err)\n\t}\n" +
			"\tif \"" + pkg + "\" == \"b\" && os.Getenv(\"TINY_FAIL\") == \"1\" {\n\t\tt.Fatal(\"failing as asked\")\n\t}\n}\n"
	}
	for name, text := range map[string]string{
		"go.mod":      "module example.com/tiny\n\ngo 1.22\n",
		"a/a_test.go": test("a"),
		"b/b_test.go": test("b"),
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A tinyRun is what one run of the command in a tiny module did.
type tinyRun struct {
	code           int
	stdout, stderr string
	urls           map[string]string // package → the TEST_DATABASE_URL its test saw; absent: it did not run
}

// runCommand runs the command with args in a new tiny module, with env
// added to an environment that has none of TEST_DATABASE_URL,
// RACEFREE_REQUIRE_POSTGRES and GOFLAGS (a caller's -run would select
// the tiny module's tests too).
func runCommand(t *testing.T, env []string, args ...string) tinyRun {
	t.Helper()
	r, _ := runWithin(t, 10*time.Minute, env, args...)
	return r
}

// runWithin runs the command like runCommand, but fails the test when
// it has not ended within limit (and kills it), and returns how long it
// ran.
func runWithin(t *testing.T, limit time.Duration, env []string, args ...string) (tinyRun, time.Duration) {
	t.Helper()
	bin := command(t)
	dir := tinyModule(t)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 5 * time.Second
	cmd.Dir = dir
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "TEST_DATABASE_URL=") && !strings.HasPrefix(e, "RACEFREE_REQUIRE_POSTGRES=") && !strings.HasPrefix(e, "GOFLAGS=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "TINY_OUT="+out)
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	r := tinyRun{urls: map[string]string{}}
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("the command had not ended after %s", limit)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	r.stdout, r.stderr = stdout.String(), stderr.String()
	for _, pkg := range []string{"a", "b"} {
		if data, err := os.ReadFile(filepath.Join(out, pkg)); err == nil {
			r.urls[pkg] = string(data)
		}
	}
	t.Logf("exit %d after %s\nstdout:\n%s\nstderr:\n%s", r.code, took, r.stdout, r.stderr)
	return r, took
}

// unreachable is a PostgreSQL URL that refuses at once.
const unreachable = "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable"

// TestEdgesTheTestCommandSaysWhatRan: with a PostgreSQL that answers, the
// tests get the URL they were given, as it was given, and every package
// runs when only flags are given; the command's lines, on standard error
// alone, name both engines and the verdict.
func TestEdgesTheTestCommandSaysWhatRan(t *testing.T) {
	t.Parallel()
	url := testdb.PostgresURL(t)
	if strings.Contains(url, "?") {
		url += "&application_name=racefree-test-command"
	} else {
		url += "?application_name=racefree-test-command"
	}
	r := runCommand(t, []string{"TEST_DATABASE_URL=" + url}, "-count=1")
	if r.code != 0 {
		t.Fatalf("exit %d, want 0", r.code)
	}
	for _, pkg := range []string{"a", "b"} {
		if got, ok := r.urls[pkg]; !ok || got != url {
			t.Errorf("package %s ran %v with TEST_DATABASE_URL %q, want it run with %q", pkg, ok, got, url)
		}
	}
	if !strings.Contains(r.stderr, "test: engines: SQLite and PostgreSQL (") || !strings.Contains(r.stderr, "test: passed; engines: SQLite and PostgreSQL (") {
		t.Errorf("standard error does not say both engines ran and passed")
	}
	if strings.Contains(r.stdout, "test: ") {
		t.Errorf("the command's own lines are on standard output")
	}
}

// TestEdgesTheTestCommandWithoutPostgreSQL: a PostgreSQL that does not
// answer is skipped, said so at the start and at the end, and not handed
// to the tests; with RACEFREE_REQUIRE_POSTGRES=1 the command fails before
// any test runs.
func TestEdgesTheTestCommandWithoutPostgreSQL(t *testing.T) {
	t.Parallel()
	r := runCommand(t, []string{"TEST_DATABASE_URL=" + unreachable}, "-count=1", "./...")
	if r.code != 0 {
		t.Fatalf("exit %d, want 0: the SQLite half passed", r.code)
	}
	if got, ok := r.urls["a"]; !ok || got != "" {
		t.Errorf("package a ran %v with TEST_DATABASE_URL %q, want it run with none", ok, got)
	}
	if !strings.Contains(r.stderr, "test: engines: SQLite only: the PostgreSQL half is SKIPPED") || !strings.Contains(r.stderr, "test: passed; engines: SQLite only: the PostgreSQL half is SKIPPED") {
		t.Errorf("standard error does not say, at the start and the end, that PostgreSQL was skipped")
	}

	r = runCommand(t, []string{"TEST_DATABASE_URL=" + unreachable, "RACEFREE_REQUIRE_POSTGRES=1"}, "-count=1", "./...")
	if r.code != 1 || len(r.urls) != 0 || !strings.Contains(r.stderr, "RACEFREE_REQUIRE_POSTGRES=1 requires it") {
		t.Errorf("with RACEFREE_REQUIRE_POSTGRES=1: exit %d, %d packages ran; want exit 1 before any test, with the reason", r.code, len(r.urls))
	}
}

// TestEdgesTheTestCommandFails: a failing test fails the command with go
// test's status and a last line that says FAILED; go that cannot start
// fails it too; and under -json every line of standard output is JSON.
func TestEdgesTheTestCommandFails(t *testing.T) {
	t.Parallel()
	r := runCommand(t, []string{"TEST_DATABASE_URL=" + unreachable, "TINY_FAIL=1"}, "-count=1", "./...")
	if r.code != 1 || !strings.Contains(r.stderr, "test: FAILED; engines:") {
		t.Errorf("a failing test: exit %d, want go test's 1 and a last line saying FAILED", r.code)
	}

	r = runCommand(t, []string{"TEST_DATABASE_URL=" + unreachable}, "-json", "-count=1", "./...")
	if r.code != 0 {
		t.Fatalf("-json: exit %d", r.code)
	}
	for line := range strings.Lines(r.stdout) {
		if !json.Valid([]byte(line)) {
			t.Fatalf("-json: a line of standard output is not JSON: %q", line)
		}
	}

	r = runCommand(t, []string{"TEST_DATABASE_URL=" + unreachable, "PATH=" + t.TempDir()}, "-count=1", "./...")
	if r.code != 1 || len(r.urls) != 0 || !strings.Contains(r.stderr, "test: ") {
		t.Errorf("without go on PATH: exit %d, %d packages ran; want exit 1 with a line saying why", r.code, len(r.urls))
	}
}
