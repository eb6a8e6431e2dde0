package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runLedger runs root's whole catalogue with the ledger at file, updating
// it, and returns the exit status and the output.
func runLedger(t *testing.T, root, file string, sample int) (int, string) {
	t.Helper()
	all, err := loadCatalogue(filepath.Join(root, filepath.FromSlash(catalogueDir)))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rn := &runner{root: root, jobs: 2, timeout: time.Minute, out: &printer{w: &out},
		ledger: file, update: true, sample: sample}
	code := rn.run(context.Background(), all)
	t.Logf("runner output:\n%s", out.String())
	return code, out.String()
}

// TestLedgerRunsOnlyWhatChanged checks CI's short mode: a mutant caught on
// today's inputs is not run again; one is run again when a file its
// verdict depends on changes (its package's tests, a package its tests
// link), and not when an unrelated package changes; a survivor never
// enters the ledger; the sample runs up-to-date mutants anyway.
func TestLedgerRunsOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	root := newTinyRepo(t)
	writeFiles(t, root, map[string]string{
		"twice/twice.go":      "package twice\n\nimport \"example.com/tiny/calc\"\n\n// Twice returns 2x.\nfunc Twice(x int) int { return calc.Add(x, x) }\n",
		"twice/twice_test.go": "package twice\n\nimport \"testing\"\n\nfunc TestTwice(t *testing.T) {\n\tif Twice(2) != 4 {\n\t\tt.Fatal(Twice(2))\n\t}\n}\n",
	})
	git(t, root, "add", "-A")
	addMutant(t, root, "01-calc.patch", "Add subtracts", "calc/calc.go", "a + b", "a - b")
	addMutant(t, root, "02-twice.patch", "Twice adds one more", "twice/twice.go", "calc.Add(x, x)", "calc.Add(x, x) + 1")
	addMutant(t, root, "03-equivalent.patch", "Add adds zero (no test can tell)", "calc/calc.go", "a + b", "a + b + 0")
	file := filepath.Join(t.TempDir(), "ledger.tsv")

	code, out := runLedger(t, root, file, 0)
	if code != 1 || !strings.Contains(out, "0 caught on today's inputs") || !strings.Contains(out, "running 3") {
		t.Fatalf("first run: exit %d, want 1 and all three run", code)
	}
	entries, err := readLedger(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries["01-calc.patch"].by == "" || entries["02-twice.patch"].by != "twice:TestTwice" {
		t.Fatalf("ledger after the first run = %v, want the two caught mutants", entries)
	}
	if _, ok := entries["03-equivalent.patch"]; ok {
		t.Fatal("the ledger records a mutant that survived")
	}

	// Nothing changed: only the survivor runs again.
	code, out = runLedger(t, root, file, 0)
	if code != 1 || !strings.Contains(out, "2 caught on today's inputs") || !strings.Contains(out, "running 1") {
		t.Fatalf("second run: exit %d, want 1 with only the survivor run", code)
	}
	os.Remove(filepath.Join(root, catalogueDir, "03-equivalent.patch"))

	// An unrelated package changes: nothing runs.
	writeFiles(t, root, map[string]string{"untested/untested.go": tinyModule["untested/untested.go"] + "\n// A comment.\n"})
	if code, out = runLedger(t, root, file, 0); code != 0 || !strings.Contains(out, "running 0") {
		t.Fatalf("after an unrelated change: exit %d, want 0 with nothing run", code)
	}

	// A package that twice's tests link changes: twice's mutant runs
	// again, and so does calc's (its own package).
	writeFiles(t, root, map[string]string{"calc/extra.go": "package calc\n\n// Zero is 0.\nconst Zero = 0\n"})
	if code, out = runLedger(t, root, file, 0); code != 0 || !strings.Contains(out, "2 whose inputs changed") {
		t.Fatalf("after a change to calc: exit %d, want 0 with both run again", code)
	}

	// A test file of twice changes: only twice's mutant runs again.
	writeFiles(t, root, map[string]string{"twice/more_test.go": "package twice\n"})
	if code, out = runLedger(t, root, file, 0); code != 0 || !strings.Contains(out, "1 whose inputs changed") || !strings.Contains(out, "02-twice.patch") || strings.Contains(out, "01-calc.patch") {
		t.Fatalf("after a new test file in twice: exit %d, want 0 with twice's mutant alone run again", code)
	}

	// The sample runs an up-to-date mutant anyway.
	if code, out = runLedger(t, root, file, 1); code != 0 || !strings.Contains(out, "(1 of them sampled to run again)") || !strings.Contains(out, "running 1") {
		t.Fatalf("with -sample 1: exit %d, want 0 with one run", code)
	}
}

// TestLedgerFromALog checks that a runner's output (as CI prints it, or
// quoted) merges into the ledger: the mutants it reports caught are
// recorded, those it reports otherwise are dropped, and the rest stay.
func TestLedgerFromALog(t *testing.T) {
	t.Parallel()
	root := newTinyRepo(t)
	addMutant(t, root, "01-calc.patch", "Add subtracts", "calc/calc.go", "a + b", "a - b")
	addMutant(t, root, "02-calc.patch", "Add multiplies", "calc/calc.go", "a + b", "a * b")
	addMutant(t, root, "03-calc.patch", "Add divides", "calc/calc.go", "a + b", "a / b")
	log := filepath.Join(t.TempDir(), "ci.log")
	text := "> caught   01-calc.patch  (1.2s)  by calc:TestAdd/two  Add subtracts\nSURVIVED 02-calc.patch  (1.0s)  Add multiplies\n"
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ledger.tsv")
	before := map[string]ledgerEntry{
		"02-calc.patch": {key: strings.Repeat("2", 64), by: "calc:TestAdd"},
		"03-calc.patch": {key: strings.Repeat("3", 64), by: "calc:TestAdd/three"},
	}
	if err := writeLedger(file, before); err != nil {
		t.Fatal(err)
	}
	all, err := loadCatalogue(filepath.Join(root, filepath.FromSlash(catalogueDir)))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rn := &runner{root: root, jobs: 1, timeout: time.Minute, out: &printer{w: &out}, ledger: file, fromLog: log}
	if code := rn.run(context.Background(), all); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	entries, err := readLedger(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries["01-calc.patch"].by != "calc:TestAdd/two" || entries["03-calc.patch"] != before["03-calc.patch"] {
		t.Fatalf("ledger = %v, want 01-calc.patch caught by calc:TestAdd/two and 03-calc.patch as it was", entries)
	}
	if !strings.Contains(out.String(), "1 of 3 mutants caught on today's inputs") {
		t.Fatalf("output %q does not count the one mutant caught on today's inputs", out.String())
	}
}
