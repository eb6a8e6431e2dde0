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

// Edges of the ledger (ledger.go) found by reading its code from outside:
// a key that misses one input lets CI skip a mutant nobody judged on
// today's code, the one way the short mode can say "caught" where it
// could not know.

// ledgerKeys returns the key of every mutant of root's catalogue, as
// consultLedger computes them.
func ledgerKeys(t *testing.T, root string) map[string]string {
	t.Helper()
	all, err := loadCatalogue(filepath.Join(root, filepath.FromSlash(catalogueDir)))
	if err != nil {
		t.Fatal(err)
	}
	rn := &runner{root: root, out: &printer{w: &bytes.Buffer{}}}
	if rn.mod, err = readModule(root); err != nil {
		t.Fatal(err)
	}
	if rn.files, err = listFiles(root); err != nil {
		t.Fatal(err)
	}
	if rn.proofs, err = readGuarantees(root); err != nil {
		t.Fatal(err)
	}
	k, err := newKeyer(rn)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, m := range all {
		patterns, err := m.packagesIn(root)
		if err != nil {
			t.Fatal(err)
		}
		pkgs, err := rn.mod.importPaths(patterns)
		if err != nil {
			t.Fatal(err)
		}
		if keys[m.file], err = k.key(m, pkgs); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// TestEdgesLedgerKeyCoversEveryInput changes, one at a time, each input a
// mutant's verdict depends on and checks that the key of the mutant it
// concerns changes, and that the key of a mutant it does not concern stays
// (a key that changed with everything would run the whole catalogue in
// CI's short mode, a key that missed one would skip a mutant nobody judged
// on today's code).
func TestEdgesLedgerKeyCoversEveryInput(t *testing.T) {
	t.Parallel()
	root := newTinyRepo(t)
	// twice links calc (which embeds q.sql); its tests alone import
	// helper and build the command tool at run time, and read a golden
	// file.
	writeFiles(t, root, map[string]string{
		"calc/q.sql":     "SELECT 1\n",
		"calc/sql.go":    "package calc\n\nimport _ \"embed\"\n\n// Query is calc's statement.\n//\n//go:embed q.sql\nvar Query string\n",
		"twice/twice.go": "package twice\n\nimport \"example.com/tiny/calc\"\n\n// Twice returns 2x.\nfunc Twice(x int) int { return calc.Add(x, x) }\n",
		"twice/twice_test.go": "package twice\n\nimport (\n\t\"os\"\n\t\"testing\"\n\n\t\"example.com/tiny/helper\"\n)\n\n" +
			"// tool is the command this test would build: \"example.com/tiny/tool\".\n\n" +
			"func TestTwice(t *testing.T) {\n\tif _, err := os.ReadFile(\"testdata/golden.txt\"); err != nil {\n\t\tt.Fatal(err)\n\t}\n\tif Twice(2) != helper.Four {\n\t\tt.Fatal(Twice(2))\n\t}\n}\n",
		"twice/testdata/golden.txt": "4\n",
		"helper/helper.go":          "package helper\n\n// Four is 4.\nconst Four = 4\n",
		"tool/main.go":              "package main\n\nfunc main() {}\n",
		"go.sum":                    "",
	})
	git(t, root, "add", "-A")
	addMutant(t, root, "101-twice.patch", "Twice adds one more", "twice/twice.go", "calc.Add(x, x)", "calc.Add(x, x) + 1")
	addMutant(t, root, "102-pg.patch", "QuoteIdent quotes with '", "pg/pg.go", `"\"" + s + "\""`, `"'" + s + "'"`)

	keys := ledgerKeys(t, root)
	for _, c := range []struct {
		input string
		files map[string]string
		all   bool // every mutant's key changes, not twice's alone
	}{
		{"go.sum", map[string]string{"go.sum": "example.com/other v1.0.0 h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"}, true},
		{"the patch's text", map[string]string{catalogueDir + "/101-twice.patch": strings.Replace(readFile(t, root, catalogueDir+"/101-twice.patch"), "calc.Add(x, x) + 1", "calc.Add(x, x) + 2", 1)}, false},
		{"the tests the rows select", map[string]string{"GUARANTEES.md": "# Guarantees\n\n| promise | tests | mutants | engines |\n|---|---|---|---|\n| Twice doubles | `twice:TestTwice` | 101 | — |\n"}, false},
		{"a test file of its package", map[string]string{"twice/twice_test.go": readFile(t, root, "twice/twice_test.go") + "\n// A comment.\n"}, false},
		{"its package's testdata", map[string]string{"twice/testdata/golden.txt": "four\n"}, false},
		{"a package its code links", map[string]string{"calc/calc.go": readFile(t, root, "calc/calc.go") + "\n// A comment.\n"}, false},
		{"a file a linked package embeds", map[string]string{"calc/q.sql": "SELECT 2\n"}, false},
		{"a package only its tests link", map[string]string{"helper/helper.go": "package helper\n\n// Four is 2 + 2.\nconst Four = 2 + 2\n"}, false},
		{"a command its tests build", map[string]string{"tool/main.go": "package main\n\nfunc main() { println() }\n"}, false},
	} {
		writeFiles(t, root, c.files)
		got := ledgerKeys(t, root)
		if got["101-twice.patch"] == keys["101-twice.patch"] {
			t.Errorf("%s changed: the key of twice's mutant did not", c.input)
		}
		if changed := got["102-pg.patch"] != keys["102-pg.patch"]; changed != c.all {
			t.Errorf("%s changed: the key of pg's mutant changed = %v, want %v", c.input, changed, c.all)
		}
		keys = got
	}

	// The ledger itself is never an input.
	writeFiles(t, root, map[string]string{ledgerFile: "# nothing recorded\n"})
	if got := ledgerKeys(t, root); got["101-twice.patch"] != keys["101-twice.patch"] {
		t.Error("writing the ledger changed a key")
	}
}

func readFile(t *testing.T, root, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestEdgesLedgerForgetsAMutantThatSurvivesItsSpotCheck: a mutant caught
// on a run that reached the database (TINY_DB set) is recorded; run again
// as a spot check (-sample) on the same inputs where it survives (no
// database: its catching subtest skips), it leaves the ledger, so the
// next run judges it again instead of skipping it as caught.
func TestEdgesLedgerForgetsAMutantThatSurvivesItsSpotCheck(t *testing.T) {
	t.Parallel()
	root := newTinyRepo(t)
	addMutant(t, root, "101-pg.patch", "QuoteIdent quotes with '", "pg/pg.go", `"\"" + s + "\""`, `"'" + s + "'"`)
	file := filepath.Join(t.TempDir(), "ledger.tsv")
	run := func(sample int, env ...string) string {
		t.Helper()
		all, err := loadCatalogue(filepath.Join(root, filepath.FromSlash(catalogueDir)))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		rn := &runner{root: root, jobs: 1, timeout: time.Minute, env: env, out: &printer{w: &out}, ledger: file, update: true, sample: sample}
		rn.run(context.Background(), all)
		t.Logf("runner output:\n%s", out.String())
		return out.String()
	}
	if out := run(0, "TINY_DB=1"); !strings.Contains(out, "caught   101-pg.patch") {
		t.Fatal("with the database the mutant was not caught")
	}
	if entries, err := readLedger(file); err != nil || entries["101-pg.patch"].by == "" {
		t.Fatalf("ledger = %v (%v), want 101-pg.patch recorded", entries, err)
	}
	if out := run(1); !strings.Contains(out, "SURVIVED 101-pg.patch") {
		t.Fatal("the spot check without the database did not run the mutant, or it did not survive")
	}
	entries, err := readLedger(file)
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := entries["101-pg.patch"]; ok {
		t.Fatalf("the ledger still records 101-pg.patch as caught by %s after it survived its spot check", e.by)
	}
	if out := run(0); !strings.Contains(out, "not recorded: running 1") {
		t.Fatal("the next run skipped the mutant that survived")
	}
}

// TestEdgesLedgerSampleDependsOnTheSeed: the spot check samples the same
// mutants for one seed (a commit) and, over many seeds, every one of them:
// a sample that ignored the seed would try the same few again forever.
func TestEdgesLedgerSampleDependsOnTheSeed(t *testing.T) {
	t.Parallel()
	names := []string{"1.patch", "2.patch", "3.patch", "4.patch", "5.patch", "6.patch", "7.patch", "8.patch"}
	if a, b := sampled(names, "c1", 2), sampled(names, "c1", 2); strings.Join(a, ",") != strings.Join(b, ",") || len(a) != 2 {
		t.Fatalf("one seed sampled %v, then %v: want the same two", a, b)
	}
	seen := map[string]bool{}
	for i := range 64 {
		for _, n := range sampled(names, "commit"+string(rune('a'+i%26))+string(rune('a'+i/26)), 2) {
			seen[n] = true
		}
	}
	if len(seen) != len(names) {
		t.Fatalf("64 seeds sampled %d of %d mutants: the sample does not follow the seed", len(seen), len(names))
	}
	if got := sampled(names, "c1", 12); len(got) != len(names) {
		t.Fatalf("a sample of 12 from 8 took %d", len(got))
	}
}
