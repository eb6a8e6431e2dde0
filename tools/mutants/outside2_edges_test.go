package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Edges of the mutation runner found by reading its code from outside, a
// second round: which tests a verdict counts, when a baseline is a failed
// one, what a patch touches, which rows select a mutant's tests, what the
// ledger's key covers and what -record and -ledger-from-log keep. A runner
// that says "caught" where it could not know is the worst slip here.

// TestOutside2EdgesCatchingAtEveryDepth: a subtest of the other engine is
// no evidence at any depth (TestE/sqlite/at-limit as much as TestE/sqlite),
// and a test is the parent only of its own package's subtests, never of a
// namesake's in another package.
func TestOutside2EdgesCatchingAtEveryDepth(t *testing.T) {
	t.Parallel()
	base := newTestRun()
	for _, id := range []testID{
		{"p", ""}, {"p", "TestE"}, {"p", "TestE/sqlite"}, {"p", "TestE/sqlite/at-limit"}, {"p", "TestE/postgres"},
		{"p", "TestX"}, {"q", ""}, {"q", "TestX"}, {"q", "TestX/sub"},
	} {
		base.passed[id] = true
	}

	nested := newTestRun()
	nested.failed = []testID{{"p", "TestE/sqlite/at-limit"}, {"p", "TestE/sqlite"}, {"p", "TestE"}, {"p", ""}}
	if got := nested.catching(base, "sqlite"); len(got) != 0 {
		t.Errorf("a mutant of PostgreSQL's SQL is caught by %v: only a nested sqlite case failed", got)
	}
	if got, want := nested.catching(base, "postgres"), []testID{{"p", "TestE/sqlite/at-limit"}}; !slices.Equal(got, want) {
		t.Errorf("a mutant of SQLite's SQL is caught by %v, want %v", got, want)
	}

	namesakes := newTestRun()
	namesakes.failed = []testID{{"p", "TestX"}, {"q", "TestX/sub"}, {"q", "TestX"}, {"p", ""}, {"q", ""}}
	if got, want := namesakes.catching(base, ""), []testID{{"p", "TestX"}, {"q", "TestX/sub"}}; !slices.Equal(got, want) {
		t.Errorf("catching = %v, want %v: p:TestX failed on its own", got, want)
	}
	if got, want := innermost(slices.Clone(namesakes.failed)), []testID{{"p", "TestX"}, {"q", "TestX/sub"}, {"p", ""}, {"q", ""}}; !slices.Equal(got, want) {
		t.Errorf("innermost = %v, want %v", got, want)
	}
}

// TestOutside2EdgesBaselinesThatFail: a mutant is never judged on a
// package whose baseline failed: not when only one of its packages failed,
// and not when the package failed outside every test (its TestMain exits
// 1 after every test passed). And a package that one mutant needs whole
// runs whole on the baseline, though another mutant's row selects one test
// there: the unlisted mutant is judged by every test.
func TestOutside2EdgesBaselinesThatFail(t *testing.T) {
	t.Parallel()
	root := newTinyRepo(t)
	writeFiles(t, root, map[string]string{
		"leaky/leaky.go": "package leaky\n\n// Three returns 3.\nfunc Three() int { return 3 }\n",
		"leaky/leaky_test.go": `package leaky

import (
	"fmt"
	"os"
	"testing"
)

// TestMain fails the package after its tests passed, as goleak does.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		fmt.Println("a goroutine leaked")
		code = 1
	}
	os.Exit(code)
}

func TestThree(t *testing.T) {
	if Three() != 3 {
		t.Fatal("Three() != 3")
	}
}
`,
		"calc/more_test.go": `package calc

import "testing"

func TestAddCommutes(t *testing.T) {
	if Add(1, 2) != Add(2, 1) {
		t.Fatal("Add(1, 2) != Add(2, 1)")
	}
}
`,
		"GUARANTEES.md": "# Guarantees\n\n| promise | tests | mutants | engines |\n|---|---|---|---|\n| Add commutes | `calc:TestAddCommutes` | 302 | — |\n",
	})
	git(t, root, "add", "-A")
	addMutant(t, root, "300-three-is-four.patch", "Three returns 4", "leaky/leaky.go", "return 3", "return 4")
	addMutant(t, root, "301-add-subtracts-beside-broken.patch", "Add subtracts\nPackages: ./calc ./broken", "calc/calc.go", "a + b", "a - b")
	addMutant(t, root, "302-add-subtracts-listed.patch", "Add subtracts", "calc/calc.go", "a + b", "a - b")
	addMutant(t, root, "303-add-multiplies-unlisted.patch", "Add multiplies: commutative, so only TestAdd can tell", "calc/calc.go", "a + b", "a * b")

	_, out := runTiny(t, root, "30[0-3]")
	for _, c := range []struct{ file, want string }{
		{"300-three-is-four.patch", "BASELINE FAILED"},
		{"301-add-subtracts-beside-broken.patch", "BASELINE FAILED"},
		{"302-add-subtracts-listed.patch", "caught"},
		{"303-add-multiplies-unlisted.patch", "caught"},
	} {
		if got := verdict(t, out, c.file); !strings.HasPrefix(got, c.want) {
			t.Errorf("verdict on %s = %q, want %s", c.file, got, c.want)
		}
	}
	if !strings.Contains(out, "BASELINE FAILED  leaky: [package failed]\n") {
		t.Error("the output does not say that leaky failed outside every test")
	}
	if got := verdict(t, out, "303-add-multiplies-unlisted.patch"); !strings.Contains(got, " by calc:TestAdd/two ") {
		t.Errorf("verdict on 303 = %q, want it caught by calc:TestAdd/two", got)
	}
}

// TestOutside2EdgesSinkReadsOnlyGoTestsOwnBuildFailure: a test's log that
// quotes go test's "[build failed]" (the runner's own tests log runs of
// mutants that do not build) is a failed test, not a package that did not
// build; the package's own line is one.
func TestOutside2EdgesSinkReadsOnlyGoTestsOwnBuildFailure(t *testing.T) {
	t.Parallel()
	run := newTestRun()
	sink := &jsonSink{run: run}
	for _, line := range []string{
		`{"Action":"output","Package":"p","Test":"TestLog","Output":"        FAIL\texample.com/tiny/calc [build failed]\n"}`,
		`{"Action":"output","Package":"p","Test":"TestLog","Output":"        FAIL\texample.com/tiny/calc [setup failed]\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestLog"}`,
	} {
		sink.Write([]byte(line + "\n"))
	}
	if len(run.buildFailed) != 0 || !slices.Equal(run.failed, []testID{{"p", "TestLog"}}) {
		t.Errorf("build failed %v, failed %v; want none unbuilt and TestLog failed", run.buildFailed, run.failed)
	}
	sink.Write([]byte(`{"Action":"output","Package":"q","Output":"FAIL\tq [build failed]\n"}` + "\n"))
	if !slices.Equal(run.buildFailed, []string{"q"}) {
		t.Errorf("build failed %v, want [q]", run.buildFailed)
	}
}

// killedAt is a context that the test ends when it chooses, as the
// runner's deadline ends go test's: its Err is then
// context.DeadlineExceeded.
type killedAt struct {
	context.Context
	done chan struct{}
}

func (k *killedAt) Done() <-chan struct{} { return k.done }

func (k *killedAt) Err() error {
	select {
	case <-k.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// TestOutside2EdgesKilledAtTheRunnersDeadline: a go test that the runner
// kills at its own deadline (a binary that hangs past its -timeout) says
// so (errors.Is context.DeadlineExceeded), and the mutant is TIMEOUT:
// never BROKEN, and never caught by the package's failure, which is the
// kill's.
func TestOutside2EdgesKilledAtTheRunnersDeadline(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	marker := filepath.Join(t.TempDir(), "started")
	writeFiles(t, root, map[string]string{
		"go.mod":       "module example.com/hang\n\ngo 1.22\n",
		"hang/hang.go": "package hang\n\n// Block never returns.\nfunc Block() { select {} }\n",
		"hang/hang_test.go": "package hang\n\nimport (\n\t\"os\"\n\t\"testing\"\n)\n\n" +
			"func TestHang(t *testing.T) {\n\tos.WriteFile(os.Getenv(\"HANG_MARKER\"), nil, 0o644)\n\tBlock()\n}\n",
	})
	rn := &runner{root: root, jobs: 1, timeout: time.Hour, env: []string{"HANG_MARKER=" + marker},
		out: &printer{w: &bytes.Buffer{}}, mod: module{root: root, path: "example.com/hang"}}
	const pkg = "example.com/hang/hang"
	base := &baseline{run: newTestRun(), failed: map[string][]string{}}
	base.run.passed[testID{pkg, ""}] = true
	base.run.passed[testID{pkg, "TestHang"}] = true
	ctx := &killedAt{Context: context.Background(), done: make(chan struct{})}
	var goTestErr error
	results := make(chan result, 1)
	go func() {
		results <- rn.judge(ctx, base, &mutant{file: "1-hang.patch"}, []string{pkg}, func(p string, stream io.Writer, extra ...string) (*testRun, error) {
			run, err := rn.goTest(ctx, root, []string{p}, stream, extra...)
			goTestErr = worse(goTestErr, err)
			return run, err
		})
	}()
	// Kill go test once TestHang is running, as the deadline would.
	var r result
	for {
		if _, err := os.Stat(marker); err == nil {
			close(ctx.done)
			r = <-results
			break
		}
		select {
		case r = <-results:
			t.Fatalf("go test ended before TestHang ran: %s\n%s", r.reason, r.output)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if !errors.Is(goTestErr, context.DeadlineExceeded) {
		t.Errorf("goTest's error = %v, want one that is context.DeadlineExceeded", goTestErr)
	}
	if r.outcome != timedOut {
		t.Errorf("outcome = %d (%s, caught by %v), want TIMEOUT (%d)", r.outcome, r.reason, r.catching, timedOut)
	}
}

// writePatch writes a catalogue entry's text to a new file and parses it.
func writePatch(t *testing.T, name, text string) *mutant {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := parseMutant(p)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestOutside2EdgesWhatAPatchTouches: the files a mutant touches are its
// diff's file headers and nothing else: a removed SQL comment (a "--- "
// line inside a hunk) is no header, a deleted file is touched, and a name
// git quotes is unquoted. Which engine's SQL a mutant changes follows.
func TestOutside2EdgesWhatAPatchTouches(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, text string
		touched    []string
		blind      string
	}{
		{"1-comment.patch", "PostgreSQL's query loses its comment\nPackages: ./eng\n\n" +
			"diff --git a/eng/sql/postgres/q.sql b/eng/sql/postgres/q.sql\n" +
			"--- a/eng/sql/postgres/q.sql\n+++ b/eng/sql/postgres/q.sql\n" +
			"@@ -1,3 +1,2 @@\n--- the one row\n-SELECT 1\n+SELECT 2\n FROM t\n",
			[]string{"eng/sql/postgres/q.sql"}, "sqlite"},
		{"2-deleted.patch", "SQLite's query is gone and PostgreSQL's changes\n\n" +
			"diff --git a/eng/sql/sqlite/q.sql b/eng/sql/sqlite/q.sql\ndeleted file mode 100644\n" +
			"--- a/eng/sql/sqlite/q.sql\n+++ /dev/null\n@@ -1 +0,0 @@\n-SELECT 1\n" +
			"diff --git a/eng/sql/postgres/q.sql b/eng/sql/postgres/q.sql\n" +
			"--- a/eng/sql/postgres/q.sql\n+++ b/eng/sql/postgres/q.sql\n@@ -1 +1 @@\n-SELECT 1\n+SELECT 2\n",
			[]string{"eng/sql/sqlite/q.sql", "eng/sql/postgres/q.sql"}, ""},
		{"3-quoted.patch", "A statement with an accent in its name\n\n" +
			"diff --git \"a/eng/sql/postgres/\\303\\251t\\303\\251.sql\" \"b/eng/sql/postgres/\\303\\251t\\303\\251.sql\"\n" +
			"--- \"a/eng/sql/postgres/\\303\\251t\\303\\251.sql\"\n+++ \"b/eng/sql/postgres/\\303\\251t\\303\\251.sql\"\n" +
			"@@ -1 +1 @@\n-SELECT 1\n+SELECT 2\n",
			[]string{"eng/sql/postgres/été.sql"}, "sqlite"},
	} {
		m := writePatch(t, c.name, c.text)
		if !slices.Equal(m.touched, c.touched) {
			t.Errorf("%s touches %q, want %q", c.name, m.touched, c.touched)
		}
		if got := m.otherEngine(); got != c.blind {
			t.Errorf("%s: the other engine is %q, want %q", c.name, got, c.blind)
		}
	}
}

// TestOutside2EdgesRowsSelectFourDigitMutantsAndTheirTests: the rows
// select the tests of a four-digit mutant, tests with digits in their names
// included, from the tests cell and the edges cell both; a four-digit file
// name gives its number; and the root package is "." in the rows and in the
// names of its tests.
func TestOutside2EdgesRowsSelectFourDigitMutantsAndTheirTests(t *testing.T) {
	t.Parallel()
	got := parseGuarantees(strings.Join([]string{
		"| promise | tests | mutants | engines | edges |",
		"|---|---|---|---|---|",
		"| one | `tools/mutants:TestOutside2EdgesX`, `.:TestRoot` | 2775 | — | bounds: `seq:TestNextAt64` |",
		"| two | `claim:TestRenew` | 2776, 360 | both | — |",
	}, "\n"))
	want := map[string]proof{
		"2775": {"tools/mutants": {"TestOutside2EdgesX"}, ".": {"TestRoot"}, "seq": {"TestNextAt64"}},
		"2776": {"claim": {"TestRenew"}},
		"360":  {"claim": {"TestRenew"}},
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
	for file, n := range map[string]string{"2775-runner-x.patch": "2775", "360-runner-y.patch": "360", "12-z.patch": ""} {
		if got := (&mutant{file: file}).number(); got != n {
			t.Errorf("number of %s = %q, want %q", file, got, n)
		}
	}

	rn := &runner{mod: module{path: "example.com/tiny"}, proofs: got}
	if d := rn.mod.dir("example.com/tiny"); d != "." {
		t.Errorf("dir of the root package = %q, want \".\"", d)
	}
	sel := rn.selection(&mutant{file: "2775-runner-x.patch"}, []string{"example.com/tiny"})
	if !slices.Equal(sel["example.com/tiny"], []string{"TestRoot"}) {
		t.Errorf("the root package's selection = %v, want [TestRoot]", sel["example.com/tiny"])
	}
	if name := rn.testName(testID{"example.com/tiny", "TestRoot"}); name != ".:TestRoot" {
		t.Errorf("the root package's test is named %q, want .:TestRoot", name)
	}
}

// TestOutside2EdgesLedgerKeyCoversTheRest: the inputs of a mutant's key
// that the first round did not change: a touched file its test packages
// neither own nor link, a file the root package owns outside any other
// package (its testdata), and a package that a command its tests build at
// run time imports. Each changes that mutant's key and not another's.
func TestOutside2EdgesLedgerKeyCoversTheRest(t *testing.T) {
	t.Parallel()
	root := newTinyRepo(t)
	writeFiles(t, root, map[string]string{
		"root.go":            "package tiny\n\n// Seven returns 7.\nfunc Seven() int { return 7 }\n",
		"root_test.go":       "package tiny\n\nimport (\n\t\"os\"\n\t\"testing\"\n)\n\nfunc TestSeven(t *testing.T) {\n\tif _, err := os.ReadFile(\"testdata/seven.txt\"); err != nil || Seven() != 7 {\n\t\tt.Fatal(err)\n\t}\n}\n",
		"testdata/seven.txt": "7\n",
		"tool/main.go":       "package main\n\nimport \"example.com/tiny/lib\"\n\nfunc main() { println(lib.Name) }\n",
		"lib/lib.go":         "package lib\n\n// Name is the tool's name.\nconst Name = \"tool\"\n",
		"runs/runs.go":       "package runs\n\n// Cmd is what the tests build.\nconst Cmd = \"tool\"\n",
		"runs/runs_test.go":  "package runs\n\nimport \"testing\"\n\n// The test would go build \"example.com/tiny/tool\".\nfunc TestRuns(t *testing.T) {\n\tif Cmd != \"tool\" {\n\t\tt.Fatal(Cmd)\n\t}\n}\n",
	})
	git(t, root, "add", "-A")
	addMutant(t, root, "101-tool.patch", "The tool prints nothing\nPackages: ./calc", "tool/main.go", "println(lib.Name)", "println()")
	addMutant(t, root, "102-seven.patch", "Seven returns 8\nPackages: .", "root.go", "return 7", "return 8")
	addMutant(t, root, "103-runs.patch", "Cmd is another", "runs/runs.go", `"tool"`, `"other"`)
	addMutant(t, root, "104-pg.patch", "QuoteIdent quotes with '", "pg/pg.go", `"\"" + s + "\""`, `"'" + s + "'"`)

	keys := ledgerKeys(t, root)
	for _, c := range []struct {
		input, mutant string
		files         map[string]string
	}{
		{"a file the patch touches", "101-tool.patch", map[string]string{"tool/main.go": readFile(t, root, "tool/main.go") + "\n// A comment.\n"}},
		{"the root package's testdata", "102-seven.patch", map[string]string{"testdata/seven.txt": "seven\n"}},
		{"a package the command its tests build imports", "103-runs.patch", map[string]string{"lib/lib.go": "package lib\n\n// Name is the tool's name.\nconst Name = \"tool2\"\n"}},
	} {
		writeFiles(t, root, c.files)
		got := ledgerKeys(t, root)
		if got[c.mutant] == keys[c.mutant] {
			t.Errorf("%s changed: the key of %s did not", c.input, c.mutant)
		}
		if got["104-pg.patch"] != keys["104-pg.patch"] {
			t.Errorf("%s changed: the key of pg's mutant changed too", c.input)
		}
		keys = got
	}
}

// TestOutside2EdgesLedgerFromALogDropsEveryUnjudgedVerdict: a log's
// TIMEOUT, BASELINE FAILED and BROKEN lines drop their mutants' entries as
// SURVIVED does, and a caught line of a mutant this run did not key (left
// out by -run) records nothing, so the ledger stays readable.
func TestOutside2EdgesLedgerFromALogDropsEveryUnjudgedVerdict(t *testing.T) {
	t.Parallel()
	root := newTinyRepo(t)
	addMutant(t, root, "01-calc.patch", "Add subtracts", "calc/calc.go", "a + b", "a - b")
	addMutant(t, root, "02-calc.patch", "Add multiplies", "calc/calc.go", "a + b", "a * b")
	addMutant(t, root, "03-calc.patch", "Add divides", "calc/calc.go", "a + b", "a / b")
	addMutant(t, root, "04-calc.patch", "Add returns a", "calc/calc.go", "a + b", "a")
	keys := ledgerKeys(t, root)
	file := filepath.Join(t.TempDir(), "ledger.tsv")
	before := map[string]ledgerEntry{
		"01-calc.patch": {key: keys["01-calc.patch"], by: "calc:TestAdd/two"},
		"02-calc.patch": {key: keys["02-calc.patch"], by: "calc:TestAdd/two"},
		"03-calc.patch": {key: keys["03-calc.patch"], by: "calc:TestAdd/two"},
	}
	if err := writeLedger(file, before); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "ci.log")
	text := "TIMEOUT  01-calc.patch  (600.0s)  Add subtracts\n" +
		"BASELINE FAILED  02-calc.patch  Add multiplies: the unmutated tests of calc fail\n" +
		"BROKEN   03-calc.patch  (1.0s)  Add divides: the mutated code does not build: calc\n" +
		"caught   04-calc.patch  (1.2s)  by calc:TestAdd/two  Add returns a\n"
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	all, err := loadCatalogue(filepath.Join(root, filepath.FromSlash(catalogueDir)))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rn := &runner{root: root, jobs: 1, timeout: time.Minute, out: &printer{w: &out}, ledger: file, fromLog: log}
	if code := rn.run(context.Background(), all[:3]); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	entries, err := readLedger(file)
	if err != nil {
		t.Fatalf("the ledger cannot be read after -ledger-from-log: %v", err)
	}
	if len(entries) != 0 {
		t.Fatalf("ledger = %v, want it empty: 01 to 03 were not judged caught, 04 was not keyed", entries)
	}
}

// TestOutside2EdgesRecordShowsACrashedBinarysTests: a test binary that
// crashes (a panic in a goroutine) ends its running test without a fail
// event of its own; -record prints what that test printed, the panic
// included, as go test does.
func TestOutside2EdgesRecordShowsACrashedBinarysTests(t *testing.T) {
	t.Parallel()
	stream := strings.Join([]string{
		`{"Action":"run","Package":"x","Test":"TestCrash"}`,
		`{"Action":"output","Package":"x","Test":"TestCrash","Output":"=== RUN   TestCrash\n"}`,
		`{"Action":"output","Package":"x","Test":"TestCrash","Output":"    x_test.go:6: before\n"}`,
		`{"Action":"output","Package":"x","Test":"TestCrash","Output":"panic: boom\n"}`,
		`{"Action":"output","Package":"x","Test":"TestCrash","Output":"goroutine 20 [running]:\n"}`,
		`{"Action":"output","Package":"x","Output":"FAIL\tx\t0.019s\n"}`,
		`{"Action":"fail","Package":"x","Elapsed":0.02}`,
	}, "\n") + "\n"
	var printed bytes.Buffer
	if err := record(strings.NewReader(stream), filepath.Join(t.TempDir(), "tests.json"), &printed); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"x_test.go:6: before\n", "panic: boom\n", "goroutine 20 [running]:\n", "FAIL\tx\t0.019s\n"} {
		if !strings.Contains(printed.String(), want) {
			t.Errorf("the record printed\n%s\nwithout %q", printed.String(), want)
		}
	}
	if strings.Contains(printed.String(), "=== RUN") {
		t.Errorf("the record printed what go test prints only with -v:\n%s", printed.String())
	}
}
