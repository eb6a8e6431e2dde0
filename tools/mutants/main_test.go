package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// tinyModule is a throwaway module with six packages: calc, whose tests
// pass; broken, which has a test that fails without any mutation; pg, whose
// postgres subtest skips unless Reachable says TINY_DB is set (as
// racefree's do without TEST_DATABASE_URL), and fails when it runs without
// it; slow, whose test hangs if Wait does; eng, whose SQL lives in
// sql/<engine>/ as racefree's does; and untested, which has no test files.
var tinyModule = map[string]string{
	"go.mod": "module example.com/tiny\n\ngo 1.22\n",
	"calc/calc.go": `package calc

// Add returns the sum of a and b.
func Add(a, b int) int { return a + b }
`,
	"calc/calc_test.go": `package calc

import "testing"

func TestAdd(t *testing.T) {
	t.Run("zero", func(t *testing.T) {
		if got, want := Add(0, 0), 0; got != want {
			t.Fatalf("Add(0, 0) = %d, want %d", got, want)
		}
	})
	t.Run("two", func(t *testing.T) {
		if got, want := Add(1, 1), 2; got != want {
			t.Fatalf("Add(1, 1) = %d, want %d", got, want)
		}
	})
}
`,
	"broken/broken.go": `package broken

// Half returns x/2.
func Half(x int) int { return x / 2 }
`,
	"broken/broken_test.go": `package broken

import "testing"

func TestHalf(t *testing.T) {
	if got, want := Half(4), 2; got != want {
		t.Fatalf("Half(4) = %d, want %d", got, want)
	}
}

func TestAlreadyFailing(t *testing.T) { t.Fatal("fails without any mutation") }
`,
	"pg/pg.go": `package pg

import "os"

// Reachable reports whether the postgres engine's database is there.
func Reachable() bool { return os.Getenv("TINY_DB") != "" }

// Quote quotes s for the sqlite engine.
func Quote(s string) string { return "'" + s + "'" }

// QuoteIdent quotes s for the postgres engine.
func QuoteIdent(s string) string { return "\"" + s + "\"" }
`,
	"pg/pg_test.go": `package pg

import (
	"os"
	"testing"
)

func TestQuote(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		if got, want := Quote("a"), "'a'"; got != want {
			t.Fatalf("Quote = %s, want %s", got, want)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		if !Reachable() {
			t.Skip("TINY_DB is not set")
		}
		if os.Getenv("TINY_DB") == "" {
			t.Fatal("cannot connect: no database") // as a test whose skip check was mutated away
		}
		if got, want := QuoteIdent("a"), "\"a\""; got != want {
			t.Fatalf("QuoteIdent = %s, want %s", got, want)
		}
	})
}
`,
	"slow/slow.go": `package slow

import "time"

// Wait returns after d.
func Wait(d time.Duration) { time.Sleep(d) }
`,
	"slow/slow_test.go": `package slow

import "testing"

func TestWait(t *testing.T) { Wait(0) }
`,
	"eng/eng.go": `package eng

import _ "embed"

//go:embed sql/postgres/q.sql
var PostgresQuery string

//go:embed sql/sqlite/q.sql
var SQLiteQuery string
`,
	"eng/sql/postgres/q.sql": "SELECT 1\n",
	"eng/sql/sqlite/q.sql":   "SELECT 1\n",
	"eng/eng_test.go": `package eng

import "testing"

// TestQuery's sqlite subtest also reads the PostgreSQL query, standing in
// for a flake: it fails on a mutant of PostgreSQL's SQL that it never runs.
func TestQuery(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		if SQLiteQuery != "SELECT 1\n" || PostgresQuery != "SELECT 1\n" {
			t.Fatal("flake")
		}
	})
	t.Run("postgres", func(t *testing.T) {
		if PostgresQuery != "SELECT 1\n" {
			t.Fatalf("PostgresQuery = %q", PostgresQuery)
		}
	})
}
`,
	// hooked passes its embedded SQL through a hook as racefree's
	// internal/query.Embedded does, so a mutant of it needs no build.
	"hooked/hooked.go": `package hooked

import _ "embed"

//go:embed sql/q.sql
var q string

//go:embed sql/same.sql
var same string

// Query returns the query the package runs, and Same one that another
// file repeats word for word.
func Query() (string, string) { return swap(q), swap(same) }

var swap = func(s string) string { return s }
`,
	"hooked/mutated.go": `//go:build racefree_mutants

package hooked

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
)

func init() {
	data, err := os.ReadFile(os.Getenv("RACEFREE_MUTANT_SQL"))
	if err != nil {
		return
	}
	var m map[string]string
	if json.Unmarshal(data, &m) != nil {
		os.Exit(3)
	}
	swap = func(s string) string {
		sum := sha256.Sum256([]byte(s))
		if r, ok := m[hex.EncodeToString(sum[:])]; ok {
			return r
		}
		return s
	}
}
`,
	"hooked/sql/q.sql":     "SELECT 10\n",
	"hooked/sql/same.sql":  "SELECT 3\n",
	"hooked/sql/again.sql": "SELECT 3\n",
	"hooked/hooked_test.go": `package hooked

import "testing"

func TestQuery(t *testing.T) {
	if q, same := Query(); q != "SELECT 10\n" || same != "SELECT 3\n" {
		t.Fatalf("Query() = %q, %q", q, same)
	}
}
`,
	// plain embeds its SQL without the hook: an overlay cannot reach it.
	"plain/plain.go": `package plain

import _ "embed"

// Query is the query the package runs.
//
//go:embed sql/p.sql
var Query string
`,
	"plain/sql/p.sql": "SELECT 'plain'\n",
	"plain/plain_test.go": `package plain

import "testing"

func TestQuery(t *testing.T) {
	if Query != "SELECT 'plain'\n" {
		t.Fatalf("Query = %q", Query)
	}
}
`,
	"untested/untested.go": `package untested

// One returns 1; no test checks it.
func One() int { return 1 }
`,
}

// newTinyRepo writes tinyModule into a new git repository and returns its
// root.
func newTinyRepo(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	writeFiles(t, root, tinyModule)
	git(t, root, "init", "-q")
	git(t, root, "add", "-A")
	return root
}

// writeFiles writes files (slash-separated path → text) under root,
// making their directories.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// addMutant replaces old by new in file, saves git diff as the catalogue
// entry name with the description desc, and restores the file.
func addMutant(t *testing.T, root, name, desc, file, old, new string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(file))
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(old)) {
		t.Fatalf("%s has no %q", file, old)
	}
	if err := os.WriteFile(p, bytes.Replace(data, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	diff := git(t, root, "diff")
	git(t, root, "checkout", "--", file)
	dir := filepath.Join(root, filepath.FromSlash(catalogueDir))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(desc+"\n\n"+diff), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runTiny runs the catalogue of root (the mutants whose file name matches
// filter) with the extra environment env and returns the exit status and
// the output.
func runTiny(t *testing.T, root, filter string, env ...string) (int, string) {
	t.Helper()
	return runTinyFrom(t, root, filter, "", env...)
}

// runTinyFrom is runTiny taking the baseline from baseFile if that is not "".
func runTinyFrom(t *testing.T, root, filter, baseFile string, env ...string) (int, string) {
	t.Helper()
	all, err := loadCatalogue(filepath.Join(root, filepath.FromSlash(catalogueDir)))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(filter)
	var selected []*mutant
	for _, m := range all {
		if re.MatchString(m.file) {
			selected = append(selected, m)
		}
	}
	var out bytes.Buffer
	rn := &runner{root: root, jobs: 2, timeout: 3 * time.Second, env: env, baseFile: baseFile, out: &printer{w: &out}}
	code := rn.run(context.Background(), selected)
	t.Logf("runner output:\n%s", out.String())
	return code, out.String()
}

// verdict returns the verdict line the runner printed for the mutant file.
func verdict(t *testing.T, out, file string) string {
	t.Helper()
	for line := range strings.Lines(out) {
		if strings.Contains(line, " "+file+" ") {
			return strings.TrimSpace(line)
		}
	}
	t.Fatalf("no verdict for %s", file)
	return ""
}

// TestRunnerVerdicts runs a catalogue of eight mutants of the tiny module and
// checks the verdict on each: only a test that passed on the baseline
// catches a mutant.
func TestRunnerVerdicts(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := newTinyRepo(t)
	addMutant(t, root, "100-add-subtracts.patch", "Add subtracts", "calc/calc.go", "a + b", "a - b")
	addMutant(t, root, "101-comment-only.patch", "A comment changes, nothing else", "calc/calc.go", "the sum of", "the total of")
	addMutant(t, root, "102-half-of-broken-package.patch", "Half doubles, in a package whose tests fail unmutated", "broken/broken.go", "x / 2", "x * 2")
	addMutant(t, root, "103-does-not-compile.patch", "Add returns a string", "calc/calc.go", "return a + b", `return "a"`)
	addMutant(t, root, "104-postgres-only.patch", "QuoteIdent quotes with single quotes: only the postgres subtest can tell", "pg/pg.go", `"\"" + s + "\""`, `"'" + s + "'"`)
	addMutant(t, root, "107-postgres-sql.patch", "PostgreSQL's query selects 2", "eng/sql/postgres/q.sql", "SELECT 1", "SELECT 2")
	addMutant(t, root, "106-untested.patch", "One returns 2, in a package without tests", "untested/untested.go", "return 1", "return 2")
	addMutant(t, root, "108-reachable-without-a-database.patch", "Reachable reports a database that is not there", "pg/pg.go", `os.Getenv("TINY_DB") != ""`, `os.Getenv("TINY_DB") != "off"`)
	// The baseline's failing test is a subtest: name it, not its parent.
	brokenTest := filepath.Join(root, "broken", "broken_test.go")
	data, err := os.ReadFile(brokenTest)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte(`func TestAlreadyFailing(t *testing.T) { t.Fatal("fails without any mutation") }`),
		[]byte(`func TestAlreadyFailing(t *testing.T) {
	t.Run("sub", func(t *testing.T) { t.Fatal("fails without any mutation") })
}`), 1)
	if err := os.WriteFile(brokenTest, data, 0o644); err != nil {
		t.Fatal(err)
	}

	code, out := runTiny(t, root, ".")
	for _, c := range []struct{ file, want string }{
		{"100-add-subtracts.patch", `^caught +\S+ +\(\S+\) +by calc:TestAdd/two +Add subtracts$`},
		{"101-comment-only.patch", `^SURVIVED `},
		{"102-half-of-broken-package.patch", `^BASELINE FAILED .*the unmutated tests of broken fail`},
		{"103-does-not-compile.patch", `^BROKEN .*does not build`},
		{"104-postgres-only.patch", `^SURVIVED `},
		{"106-untested.patch", `^SURVIVED `},
		// Without a database the postgres subtest skipped on the baseline:
		// its failure with the mutant is no evidence.
		{"108-reachable-without-a-database.patch", `^SURVIVED `},
		// The sqlite subtest fails first and -failfast stops the run: the
		// runner runs every test again and the postgres subtest catches it.
		{"107-postgres-sql.patch", `^caught .* by eng:TestQuery/postgres `},
	} {
		if got := verdict(t, out, c.file); !regexp.MustCompile(c.want).MatchString(got) {
			t.Errorf("verdict on %s = %q, want it to match %q", c.file, got, c.want)
		}
	}
	if !strings.Contains(out, "BASELINE FAILED  broken: TestAlreadyFailing/sub\n") {
		t.Errorf("the output does not name the test that failed on the baseline")
	}
	if !strings.Contains(out, "    failed, but no evidence: pg:TestQuote/postgres (did not pass on the baseline)\n") {
		t.Errorf("the output does not say why pg:TestQuote/postgres is no evidence against 108")
	}
	if got, want := lastLine(out), "mutants: 2 caught, 4 survived, 1 broken, 0 timed out, 1 baseline failed"; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
	if got, want := code, 1; got != want {
		t.Errorf("exit status = %d, want %d", got, want)
	}

	// With the database, the postgres subtest runs on the baseline and
	// catches the mutant it could not see without.
	code, out = runTiny(t, root, "10[04]", "TINY_DB=1")
	if got, want := verdict(t, out, "104-postgres-only.patch"), "by pg:TestQuote/postgres"; !strings.Contains(got, want) {
		t.Errorf("verdict on 104 = %q, want it to contain %q", got, want)
	}
	if got, want := code, 0; got != want {
		t.Errorf("exit status with every mutant caught = %d, want %d", got, want)
	}

	// A mutant that does not build fails the run, though none survived.
	if code, _ = runTiny(t, root, "103"); code != 1 {
		t.Errorf("exit status with a broken mutant = %d, want 1", code)
	}
}

// TestBaselineFromARecordedRun takes the baseline from the record of a go
// test -json run, as CI does with its run of every test under -race: the
// verdicts are those of a baseline the runner runs itself, and the record
// prints what go test prints without -json.
func TestBaselineFromARecordedRun(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := newTinyRepo(t)
	addMutant(t, root, "100-add-subtracts.patch", "Add subtracts", "calc/calc.go", "a + b", "a - b")
	addMutant(t, root, "102-half-of-broken-package.patch", "Half doubles, in a package whose tests fail unmutated", "broken/broken.go", "x / 2", "x * 2")
	addMutant(t, root, "104-postgres-only.patch", "QuoteIdent quotes with single quotes: only the postgres subtest can tell", "pg/pg.go", `"\"" + s + "\""`, `"'" + s + "'"`)

	cmd := exec.Command("go", "test", "-json", "-count=1", "./calc", "./broken", "./pg")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TINY_DB=1")
	stream, err := cmd.Output()
	if err == nil {
		t.Fatal("go test passed, though broken's test fails")
	}
	file := filepath.Join(t.TempDir(), "tests.json")
	var printed bytes.Buffer
	if err := record(bytes.NewReader(stream), file, &printed); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ok  \texample.com/tiny/calc", "--- FAIL: TestAlreadyFailing", "fails without any mutation", "FAIL\texample.com/tiny/broken"} {
		if !strings.Contains(printed.String(), want) {
			t.Errorf("the record printed\n%s\nwithout %q", printed.String(), want)
		}
	}
	if strings.Contains(printed.String(), "=== RUN") || strings.Contains(printed.String(), "--- PASS") {
		t.Errorf("the record printed what go test prints only with -v:\n%s", printed.String())
	}

	code, out := runTinyFrom(t, root, ".", file, "TINY_DB=1")
	for _, c := range []struct{ file, want string }{
		{"100-add-subtracts.patch", `^caught .* by calc:TestAdd/two `},
		{"102-half-of-broken-package.patch", `^BASELINE FAILED .*the unmutated tests of broken fail`},
		{"104-postgres-only.patch", `^caught .* by pg:TestQuote/postgres `},
	} {
		if got := verdict(t, out, c.file); !regexp.MustCompile(c.want).MatchString(got) {
			t.Errorf("verdict on %s = %q, want it to match %q", c.file, got, c.want)
		}
	}
	if !strings.Contains(out, "baseline in "+file+": 3 packages") {
		t.Errorf("the output does not say where the baseline came from")
	}
	if code != 1 {
		t.Errorf("exit status = %d, want 1", code)
	}

	// A record of other packages is no baseline for calc.
	if err := record(strings.NewReader(""), file, io.Discard); err != nil {
		t.Fatal(err)
	}
	_, out = runTinyFrom(t, root, "100", file)
	if got := verdict(t, out, "100-add-subtracts.patch"); !strings.HasPrefix(got, "BASELINE FAILED") {
		t.Errorf("verdict on 100 with an empty record = %q, want BASELINE FAILED", got)
	}
}

// TestRunnerReportsATimeout runs a mutant that makes a test hang: go test
// times out, and the test that was running is no catch.
func TestRunnerReportsATimeout(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := newTinyRepo(t)
	addMutant(t, root, "105-hangs.patch", "Wait never returns", "slow/slow.go", "time.Sleep(d)", "time.Sleep(time.Hour)")
	code, out := runTiny(t, root, ".")
	if got := verdict(t, out, "105-hangs.patch"); !strings.HasPrefix(got, "TIMEOUT ") {
		t.Errorf("verdict on 105 = %q, want TIMEOUT", got)
	}
	if got, want := lastLine(out), "mutants: 0 caught, 0 survived, 0 broken, 1 timed out, 0 baseline failed"; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
	if got, want := code, 1; got != want {
		t.Errorf("exit status = %d, want %d", got, want)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestCatchingNamesInnermostTests checks that a parent test failing with its
// subtest, and a package failing with its test, are not named as catches,
// and that a test that did not pass on the baseline is never one.
func TestCatchingNamesInnermostTests(t *testing.T) {
	t.Parallel()
	base := newTestRun()
	for _, id := range []testID{{"p", ""}, {"p", "TestA"}, {"p", "TestA/sqlite"}, {"p", "TestA/postgres"}, {"p", "TestB"}, {"p", "TestD"}, {"q", ""}} {
		base.passed[id] = true
	}
	run := newTestRun()
	// TestC skipped on the baseline, and so did TestD/postgres, so that
	// TestD passed there: it fails now only with that subtest, which is no
	// evidence. q fails outside every test.
	run.failed = []testID{{"p", "TestC"}, {"p", "TestA/postgres"}, {"p", "TestA"}, {"p", "TestD/postgres"}, {"p", "TestD"}, {"p", "TestB"}, {"p", ""}, {"q", ""}}
	got := run.catching(base, "")
	want := []testID{{"p", "TestA/postgres"}, {"p", "TestB"}, {"q", ""}}
	if !slices.Equal(got, want) {
		t.Errorf("catching = %v, want %v", got, want)
	}
}

// TestEngineSQLMutantIsCaughtOnlyByItsEngine checks that a mutant of one
// engine's SQL is not caught by a failure of the other engine's subtests,
// which never run that SQL: such a failure is a flake, not evidence.
func TestEngineSQLMutantIsCaughtOnlyByItsEngine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		touched []string
		want    string
	}{
		{[]string{"claim/sql/postgres/acquire.sql"}, "sqlite"},
		{[]string{"claim/sql/sqlite/acquire.sql", "dedup/sql/sqlite/record.sql"}, "postgres"},
		{[]string{"claim/sql/postgres/acquire.sql", "claim/sql/sqlite/acquire.sql"}, ""},
		{[]string{"claim/sql/postgres/acquire.sql", "claim/claim.go"}, ""},
		{[]string{"postgres/postgres.go"}, ""},
	} {
		m := &mutant{touched: c.touched}
		if got := m.otherEngine(); got != c.want {
			t.Errorf("otherEngine of %v = %q, want %q", c.touched, got, c.want)
		}
	}

	base := newTestRun()
	for _, id := range []testID{{"p", ""}, {"p", "TestE"}, {"p", "TestE/sqlite"}, {"p", "TestE/postgres"}} {
		base.passed[id] = true
	}
	run := newTestRun()
	run.failed = []testID{{"p", "TestE/sqlite"}, {"p", "TestE"}, {"p", ""}}
	if got := run.catching(base, "sqlite"); len(got) != 0 {
		t.Errorf("a postgres SQL mutant is caught by %v, want no test: only the sqlite subtest failed", got)
	}
	if got, want := run.catching(base, "postgres"), []testID{{"p", "TestE/sqlite"}}; !slices.Equal(got, want) {
		t.Errorf("a sqlite SQL mutant is caught by %v, want %v", got, want)
	}
}

// TestSQLMutantsRunWithoutABuild checks that a mutant of SQL alone that
// passes through the module's hook runs in a test binary built once, and
// that one the hook cannot tell apart (a text two files share) or does not
// see (eng's SQL) is judged by building the mutated tree: the same verdicts
// either way.
func TestSQLMutantsRunWithoutABuild(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := newTinyRepo(t)
	addMutant(t, root, "110-hooked-sql.patch", "The query selects 20", "hooked/sql/q.sql", "SELECT 10", "SELECT 20")
	addMutant(t, root, "111-shared-text.patch", "The repeated query selects 4", "hooked/sql/same.sql", "SELECT 3", "SELECT 4")
	addMutant(t, root, "107-postgres-sql.patch", "PostgreSQL's query selects 2", "eng/sql/postgres/q.sql", "SELECT 1", "SELECT 2")
	addMutant(t, root, "112-plain-sql.patch", "The plain query selects another word", "plain/sql/p.sql", "'plain'", "'other'")
	code, out := runTiny(t, root, ".", "TINY_DB=1")
	for _, c := range []struct{ file, want string }{
		{"110-hooked-sql.patch", `^caught .* by hooked:TestQuery `},
		// same.sql's text is again.sql's too, so the overlay would
		// change both: the mutant is built, and it is caught there.
		{"111-shared-text.patch", `^caught .* by hooked:TestQuery `},
		{"107-postgres-sql.patch", `^caught .* by eng:TestQuery/postgres `},
		// plain's SQL does not pass through the hook: the prebuilt binary
		// cannot see the mutant, so the runner builds it, and it is caught.
		{"112-plain-sql.patch", `^caught .* by plain:TestQuery `},
	} {
		if got := verdict(t, out, c.file); !regexp.MustCompile(c.want).MatchString(got) {
			t.Errorf("verdict on %s = %q, want it to match %q", c.file, got, c.want)
		}
	}
	if !strings.Contains(out, " 4 mutants (1 of SQL and 0 of Go without a build of their own) ") {
		t.Errorf("the summary does not say that exactly one mutant ran without a build")
	}
	if code != 0 {
		t.Errorf("exit status = %d, want 0", code)
	}
}

// TestGoMutantsRunWithoutABuild checks that mutants of Go function bodies
// (methods with unnamed receivers and blank or variadic parameters, generic
// functions) run woven into test binaries built once, and are caught there;
// that one changing a declaration other than a function is built; and that
// a catch by a test that fails in the woven binaries with no mutant
// switched on (it reads the source) is no evidence there, so the mutant is
// judged by building it: the same verdicts either way.
func TestGoMutantsRunWithoutABuild(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := newTinyRepo(t)
	files := map[string]string{
		"shapes/shapes.go": `package shapes

// Acc is a receiver.
type Acc struct{}

// Count returns how many xs there are.
func (*Acc) Count(_ int, xs ...int) int { return len(xs) }

// Max returns the larger of a and b.
func Max[T int | float64](a, b T) T {
	if a > b {
		return a
	}
	return b
}

// Limit is a variable.
var Limit = 3
`,
		"shapes/shapes_test.go": `package shapes

import "testing"

func TestCount(t *testing.T) {
	var a Acc
	if a.Count(9, 1, 2) != 2 {
		t.Fatal("Count(9, 1, 2) != 2")
	}
}

func TestMax(t *testing.T) {
	if Max(1, 2) != 2 || Max(2.5, 1.0) != 2.5 {
		t.Fatal("Max is wrong")
	}
}

func TestLimit(t *testing.T) {
	if Limit != 3 {
		t.Fatal("Limit != 3")
	}
}
`,
		"reads/reads.go": `package reads

// Two returns 2.
func Two() int { return 2 }
`,
		"reads/reads_test.go": `package reads

import (
	"os"
	"strings"
	"testing"
)

// TestTwoAndItsSource fails when the source holds more than Two.
func TestTwoAndItsSource(t *testing.T) {
	src, err := os.ReadFile("reads.go")
	if err != nil || strings.Count(string(src), "func ") != 1 {
		t.Fatal("reads.go is not what it was")
	}
	if Two() != 2 {
		t.Fatal("Two() != 2")
	}
}
`,
	}
	writeFiles(t, root, files)
	git(t, root, "add", "-A")
	addMutant(t, root, "120-count-one-more.patch", "Count counts one more", "shapes/shapes.go", "return len(xs)", "return len(xs) + 1")
	addMutant(t, root, "121-max-is-min.patch", "Max returns the smaller", "shapes/shapes.go", "if a > b {", "if a < b {")
	addMutant(t, root, "122-limit-four.patch", "Limit is 4", "shapes/shapes.go", "var Limit = 3", "var Limit = 4")
	addMutant(t, root, "123-two-is-three.patch", "Two returns 3", "reads/reads.go", "return 2", "return 3")
	addMutant(t, root, "124-two-the-long-way.patch", "Two returns 1 + 1: no one can tell", "reads/reads.go", "return 2", "return 1 + 1")
	code, out := runTiny(t, root, "12[0-4]")
	for _, c := range []struct{ file, want string }{
		{"120-count-one-more.patch", `^caught .* by shapes:TestCount `},
		{"121-max-is-min.patch", `^caught .* by shapes:TestMax `},
		{"122-limit-four.patch", `^caught .* by shapes:TestLimit `},
		{"123-two-is-three.patch", `^caught .* by reads:TestTwoAndItsSource `},
		{"124-two-the-long-way.patch", `^SURVIVED `},
	} {
		if got := verdict(t, out, c.file); !regexp.MustCompile(c.want).MatchString(got) {
			t.Errorf("verdict on %s = %q, want it to match %q", c.file, got, c.want)
		}
	}
	if !strings.Contains(out, " 5 mutants (0 of SQL and 2 of Go without a build of their own) ") {
		t.Errorf("the summary does not say that exactly 120 and 121 ran without a build")
	}
	if code != 1 {
		t.Errorf("exit status = %d, want 1 (124 survives)", code)
	}
}

// TestRunnerRunsTheTestsGuaranteesListsForAMutant checks that a mutant that
// rows of GUARANTEES.md name is judged by the tests they list, and only by
// those (subtests named by their top-level test), in the baseline too; and
// that a mutant no row names is judged by its packages' every test.
func TestRunnerRunsTheTestsGuaranteesListsForAMutant(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := newTinyRepo(t)
	files := map[string]string{
		"calc/more_test.go": `package calc

import "testing"

func TestAddCommutes(t *testing.T) {
	if Add(1, 2) != Add(2, 1) {
		t.Fatal("Add(1, 2) != Add(2, 1)")
	}
}

func TestAddZero(t *testing.T) {
	t.Run("sub", func(t *testing.T) {
		if Add(0, 0) != 0 {
			t.Fatal("Add(0, 0) != 0")
		}
	})
}

// TestNeverListed fails whenever it runs: only a run of the whole package
// runs it.
func TestNeverListed(t *testing.T) { t.Fatal("ran, though no row lists it") }
`,
		"GUARANTEES.md": strings.Join([]string{
			"# Guarantees",
			"",
			"| promise | tests | mutants | engines |",
			"|---|---|---|---|",
			"| Add is commutative | `calc:TestAddCommutes` | 200 | — |",
			"| Add(0, 0) is 0 | `calc:TestAddZero/sub` | 201 | — |",
			"| Add is a sum | `calc:TestAddZero` | 200, 201 | — |",
			"| nothing is proven | — | — | — |",
			"",
		}, "\n"),
	}
	writeFiles(t, root, files)
	addMutant(t, root, "200-add-subtracts.patch", "Add subtracts", "calc/calc.go", "a + b", "a - b")
	addMutant(t, root, "201-add-subtracts-too.patch", "Add subtracts, listed with a test that cannot tell", "calc/calc.go", "a + b", "a - b")
	addMutant(t, root, "202-add-subtracts-unlisted.patch", "Add subtracts, in no row", "calc/calc.go", "a + b", "a - b")

	// TestAdd would catch 200 and 201, and TestNeverListed fails: neither
	// runs, in the baseline or with a mutant.
	code, out := runTiny(t, root, "20[01]")
	for _, c := range []struct{ file, want string }{
		{"200-add-subtracts.patch", `^caught .* by calc:TestAddCommutes `},
		{"201-add-subtracts-too.patch", `^SURVIVED `},
	} {
		if got := verdict(t, out, c.file); !regexp.MustCompile(c.want).MatchString(got) {
			t.Errorf("verdict on %s = %q, want it to match %q", c.file, got, c.want)
		}
	}
	if !strings.Contains(out, "baseline: 1 packages, 3 tests passed, 0 skipped") {
		t.Errorf("the baseline ran other tests than TestAddCommutes and TestAddZero/sub")
	}
	if got, want := code, 1; got != want {
		t.Errorf("exit status = %d, want %d", got, want)
	}

	// A mutant that no row names runs the whole package, in the baseline
	// too, where TestNeverListed fails.
	_, out = runTiny(t, root, "202")
	if got, want := verdict(t, out, "202-add-subtracts-unlisted.patch"), "BASELINE FAILED"; !strings.HasPrefix(got, want) {
		t.Errorf("verdict on 202 = %q, want %s", got, want)
	}
	if !strings.Contains(out, "BASELINE FAILED  calc: TestNeverListed\n") {
		t.Errorf("the baseline of an unlisted mutant did not run the whole package")
	}
}

// TestParseGuarantees checks which tests the runner reads for each mutant
// from GUARANTEES.md: the union over the rows naming it, by directory,
// subtests named by their top-level test.
func TestParseGuarantees(t *testing.T) {
	t.Parallel()
	got := parseGuarantees(strings.Join([]string{
		"| promise | tests | mutants | engines |",
		"|---|---|---|---|",
		"| one | `claim:TestAcquire/postgres`, `server:TestClaimsOverHTTP` | 010, 011 | both |",
		"| two | `claim:TestRenew`, `claim:TestAcquire`, `.:TestGuaranteesAreProven` | 011 | both |",
		"| a pipe in `a|b` | `claim:TestGuard` | 012 | — |",
		"| none | — | — | — |",
		"not a row: | `claim:TestX` | 013 | — |",
	}, "\n"))
	want := map[string]proof{
		"010": {"claim": {"TestAcquire"}, "server": {"TestClaimsOverHTTP"}},
		"011": {"claim": {"TestAcquire", "TestRenew"}, "server": {"TestClaimsOverHTTP"}, ".": {"TestGuaranteesAreProven"}},
		"012": {"claim": {"TestGuard"}},
	}
	if len(got) != len(want) {
		t.Errorf("mutants %v, want %v", got, want)
	}
	for n, p := range want {
		for dir, names := range p {
			if !slices.Equal(got[n][dir], names) {
				t.Errorf("mutant %s, %s: %v, want %v", n, dir, got[n][dir], names)
			}
		}
		if len(got[n]) != len(p) {
			t.Errorf("mutant %s: %v, want %v", n, got[n], p)
		}
	}
}

// TestReadGuaranteesReadsTheDocsPages checks that the runner reads the
// tests of a mutant from every table of GUARANTEES.md and from the "What is
// guaranteed" section of each docs/*.md page, and from no other table of a
// page.
func TestReadGuaranteesReadsTheDocsPages(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"GUARANTEES.md": strings.Join([]string{
			"# Guarantees",
			"## claim",
			"| promise | tests | mutants | engines |",
			"|---|---|---|---|",
			"| on the index | `claim:TestAcquire` | 010 | both |",
		}, "\n"),
		"docs/claims.md": strings.Join([]string{
			"# Claims",
			"| figure | tests | mutants | engines |",
			"|---|---|---|---|",
			"| a table before the section | `claim:TestBefore` | 010 | both |",
			"## What is guaranteed",
			"| promise | tests | mutants | engines |",
			"|---|---|---|---|",
			"| on the page | `claim:TestRenew` | 010, 011 | both |",
			"### server",
			"| promise | tests | mutants | engines |",
			"|---|---|---|---|",
			"| under a package's heading | `server:TestClaimsOverHTTP` | 011 | both |",
			"## Afterwards",
			"| a table after the section | `claim:TestAfter` | 011 | both |",
		}, "\n"),
		"docs/dedup.md": strings.Join([]string{
			"# Dedup",
			"## What is guaranteed",
			"| on another page | `dedup:TestObserve` | 012 | both |",
		}, "\n"),
		"docs/sequences.md": strings.Join([]string{
			"# Sequences",
			"## What is guaranteed",
			"| promise | tests | mutants | engines | edges |",
			"|---|---|---|---|---|",
			"| with an edges column | `seq:TestNext` | 013 | both | bounds: `seq:TestNextAtMax`; cancel: `seq:TestNext` |",
		}, "\n"),
	})
	got, err := readGuarantees(root)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]proof{
		"010": {"claim": {"TestAcquire", "TestRenew"}},
		"011": {"claim": {"TestRenew"}, "server": {"TestClaimsOverHTTP"}},
		"012": {"dedup": {"TestObserve"}},
		"013": {"seq": {"TestNext", "TestNextAtMax"}},
	}
	if len(got) != len(want) {
		t.Errorf("mutants %v, want %v", got, want)
	}
	for n, p := range want {
		if len(got[n]) != len(p) {
			t.Errorf("mutant %s: %v, want %v", n, got[n], p)
		}
		for dir, names := range p {
			if !slices.Equal(got[n][dir], names) {
				t.Errorf("mutant %s, %s: %v, want %v", n, dir, got[n][dir], names)
			}
		}
	}
}

// TestTimeoutIsTheBinarysOwn checks that only go test's own time-out panic
// marks a package as timed out, not a test's log that quotes one (the
// runner's tests log the output of runs with a hanging mutant).
func TestTimeoutIsTheBinarysOwn(t *testing.T) {
	t.Parallel()
	run := newTestRun()
	sink := &jsonSink{run: run}
	for _, line := range []string{
		`{"Action":"output","Package":"p","Test":"TestLog","Output":"        TIMEOUT  105-hangs.patch\n"}`,
		`{"Action":"output","Package":"p","Test":"TestLog","Output":"            panic: test timed out after 5s\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestLog"}`,
	} {
		sink.Write([]byte(line + "\n"))
	}
	if len(run.timedOut) != 0 || !slices.Equal(run.failed, []testID{{"p", "TestLog"}}) {
		t.Errorf("timed out %v, failed %v; want none timed out and TestLog failed", run.timedOut, run.failed)
	}
	sink.Write([]byte(`{"Action":"output","Package":"q","Test":"TestWait","Output":"panic: test timed out after 5s\n"}` + "\n"))
	if !slices.Equal(run.timedOut, []string{"q"}) {
		t.Errorf("timed out %v, want [q]", run.timedOut)
	}
}
