// Command mutants is the mutation-testing runner: it checks that the test
// suite catches every bug in a catalogue of known mutants.
//
// Each file tools/mutants/catalogue/*.patch is one mutant, a unified diff that
// re-creates a real bug (see tools/mutants/README.md for the format). The runner
// first runs the tests of every selected mutant's packages on an unmutated
// copy of the repository (the baseline) and records which tests pass. Then,
// for every mutant, it copies the repository's files into a scratch
// directory, applies the patch there with git apply, and runs go test on the
// mutant's packages: in each, the tests that the rows of the guarantees
// tables (GUARANTEES.md and the "What is guaranteed" sections of docs/*.md)
// naming the mutant list there, or every test when they list none. The mutant is
//
//   - caught when a test that passed on the baseline fails (the first such
//     test is named); for a mutant of one engine's SQL (…/sql/postgres/…),
//     the other engine's subtests never run that SQL and do not count,
//   - SURVIVED when every test that passed on the baseline still passes (the
//     suite has a hole); a test that skipped on the baseline, such as a
//     PostgreSQL subtest without TEST_DATABASE_URL, proves nothing,
//   - BROKEN when the patch no longer applies or the mutated code does not
//     build (the catalogue is stale),
//   - TIMEOUT when go test timed out before any such test failed, and
//   - BASELINE FAILED when its packages' tests fail without the mutation:
//     fix the suite (or the database) first; no verdict is possible.
//
// Usage, from anywhere inside the repository:
//
//	go run ./tools/mutants [-run REGEX] [-j N] [-v] [-list] [-timeout D] [-baseline FILE] [-ledger FILE [-update] [-sample N]]
//	go test -json ./... | go run ./tools/mutants -record FILE
//
// With -baseline the runner takes the baseline from FILE, the record of a
// go test -json run (such as CI's run of every test with -race) that -record
// wrote, instead of running it again.
//
// With -ledger the runner skips the mutants that the ledger records as
// caught on exactly today's inputs (ledger.go), CI's short mode.
//
// The exit status is 0 when every mutant was caught and 1 otherwise. The
// environment is passed through unchanged, so TEST_DATABASE_URL,
// RACEFREE_REQUIRE_POSTGRES and GOFLAGS apply to the tests too.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// catalogueDir is the catalogue's location relative to the repository root.
const catalogueDir = "tools/mutants/catalogue"

func main() {
	log.SetFlags(0)
	log.SetPrefix("mutants: ")
	runFilter := flag.String("run", "", "run only the mutants whose file name matches `regexp`")
	jobs := flag.Int("j", 1, "run `N` mutants in parallel")
	verbose := flag.Bool("v", false, "stream the output of go test while it runs, and name every test that catches a mutant")
	list := flag.Bool("list", false, "list the mutants with their descriptions, packages and the tests that judge them; run nothing")
	timeout := flag.Duration("timeout", 10*time.Minute, "go test -timeout for the baseline and for each mutant")
	baseFile := flag.String("baseline", "", "take the baseline from `file`, a go test -json run of the mutants' packages that -record wrote, instead of running it")
	build := flag.Bool("build", false, "build every mutant's tests, SQL mutants too, instead of running those in test binaries built once (see overlay.go)")
	recordFile := flag.String("record", "", "copy go test -json output from standard input to `file`, for -baseline, printing what go test would print without -json; run nothing")
	ledgerPath := flag.String("ledger", "", "run only the mutants that `file` (tools/mutants/ledger.tsv) does not record as caught on today's inputs, and a sample of the others (see ledger.go)")
	update := flag.Bool("update", false, "with -ledger: write the ledger anew from this run's verdicts")
	sample := flag.Int("sample", 24, "with -ledger: also run `N` of the up-to-date mutants, chosen anew for each commit")
	fromLog := flag.String("ledger-from-log", "", "with -ledger: record as caught, on today's inputs, every mutant that `log` (the output of a run of this same tree) reports caught; run nothing")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./tools/mutants [-run regexp] [-j N] [-v] [-list] [-timeout d] [-baseline file]\n       go test -json ... | go run ./tools/mutants -record file\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 || *jobs < 1 || *timeout <= 0 || *sample < 0 || ((*update || *fromLog != "") && *ledgerPath == "") {
		flag.Usage()
		os.Exit(2)
	}
	if *recordFile != "" {
		if err := record(os.Stdin, *recordFile, os.Stdout); err != nil {
			log.Fatalf("-record: %v", err)
		}
		return
	}
	filter, err := regexp.Compile(*runFilter)
	if err != nil {
		log.Fatalf("-run: %v", err)
	}

	root, err := gitRoot()
	if err != nil {
		log.Fatal(err)
	}
	all, err := loadCatalogue(filepath.Join(root, filepath.FromSlash(catalogueDir)))
	if err != nil {
		log.Fatal(err)
	}
	if len(all) == 0 {
		fmt.Printf("mutants: the catalogue is empty (no %s/*.patch)\n", catalogueDir)
		return
	}
	var selected []*mutant
	for _, m := range all {
		if filter.MatchString(m.file) {
			selected = append(selected, m)
		}
	}
	if len(selected) == 0 {
		fmt.Printf("mutants: no mutant matches -run %q\n", *runFilter)
		return
	}

	if *list {
		proofs, err := readGuarantees(root)
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range selected {
			pkgs, err := m.packagesIn(root)
			fmt.Printf("%s  %s\n", m.file, m.desc)
			if err != nil {
				fmt.Printf("    packages: ? (%v)\n", err)
			} else {
				fmt.Printf("    packages: %s\n", strings.Join(pkgs, " "))
			}
			var tests []string
			for dir, names := range proofs[m.number()] {
				for _, n := range names {
					tests = append(tests, dir+":"+n)
				}
			}
			slices.Sort(tests)
			if len(tests) == 0 {
				tests = []string{"every test of its packages (no row of " + guaranteesFile + " names it)"}
			}
			fmt.Printf("    tests: %s\n", strings.Join(tests, " "))
		}
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second interrupt kills the runner outright
	}()
	rn := &runner{root: root, jobs: *jobs, verbose: *verbose, timeout: *timeout, baseFile: *baseFile, noOverlay: *build, out: &printer{w: os.Stdout},
		ledger: *ledgerPath, update: *update, sample: *sample, fromLog: *fromLog}
	code := rn.run(ctx, selected)
	stop()
	os.Exit(code)
}
