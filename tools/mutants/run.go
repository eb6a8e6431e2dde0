package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// tailLines is how many lines of output are shown for a mutant that
// survived, broke or timed out, and for a failed baseline.
const tailLines = 30

// A runner runs mutants against a repository and reports on them.
type runner struct {
	root      string        // the repository's top directory
	jobs      int           // mutants run in parallel
	verbose   bool          // stream go test's output; report every catching test
	timeout   time.Duration // go test -timeout for the baseline and each mutant
	baseFile  string        // a go test -json file to take the baseline from instead of running it
	noOverlay bool          // build every mutant, SQL too (see overlay.go)
	env       []string      // added to the environment of go test
	ledger    string        // the ledger's path; "" runs every selected mutant
	update    bool          // write the ledger anew after the run
	sample    int           // up-to-date mutants to run again anyway
	fromLog   string        // a runner's output to take caught verdicts from
	out       *printer

	mod      module
	files    []string         // the repository's files, relative to root
	proofs   map[string]proof // catalogue number → the tests GUARANTEES.md lists for it
	overlays *overlays        // prebuilt test binaries for mutants of SQL alone; nil: build every mutant
}

// A printer serialises writes to the runner's output between parallel
// mutants.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format, args...)
}

// outcome is the verdict on one mutant.
type outcome int

const (
	caught         outcome = iota // a test that passed on the baseline failed: good
	survived                      // every test that passed on the baseline still passes
	broken                        // the patch does not apply or the mutated code does not build
	timedOut                      // go test timed out before a baseline-passing test failed
	baselineFailed                // the unmutated packages' tests fail: no verdict is possible
	interrupted                   // the run was interrupted; no verdict
)

// A result is the verdict on one mutant and the evidence for it.
type result struct {
	m          *mutant
	outcome    outcome
	reason     string     // why the mutant is broken, or which packages' baseline failed
	catching   []testID   // the tests that caught it, first first
	discounted []discount // tests that failed but are no evidence
	output     []byte     // output of git apply or go test
	elapsed    time.Duration
	testTime   float64 // seconds the test binaries ran; the rest of elapsed went to copying and building
	overlaid   bool    // judged in prebuilt test binaries, without a build (see overlay.go)
	woven      bool    // and it is a woven Go mutant (see weave.go)
}

// A baseline is the unmutated run of the selected mutants' packages.
type baseline struct {
	run     *testRun
	failed  map[string][]string // package → failing tests ("" for the package itself); nil for none
	elapsed time.Duration
}

// run runs mutants, reports each as it finishes and returns the exit status:
// 0 only if every mutant was caught, 130 if ctx was cancelled.
func (rn *runner) run(ctx context.Context, mutants []*mutant) int {
	var err error
	if rn.mod, err = readModule(rn.root); err != nil {
		rn.out.printf("mutants: %v\n", err)
		return 1
	}
	if rn.files, err = listFiles(rn.root); err != nil {
		rn.out.printf("mutants: %v\n", err)
		return 1
	}
	if rn.proofs, err = readGuarantees(rn.root); err != nil {
		rn.out.printf("mutants: %v\n", err)
		return 1
	}

	// Resolve every mutant's packages; one that has none is broken.
	pkgsOf := map[*mutant][]string{}
	var union []string
	var counts [interrupted + 1]int
	var todo []*mutant
	for _, m := range mutants {
		patterns, err := m.packagesIn(rn.root)
		var pkgs []string
		if err == nil {
			pkgs, err = rn.mod.importPaths(patterns)
		}
		if err != nil {
			r := result{m: m, outcome: broken, reason: err.Error()}
			counts[r.outcome]++
			rn.report(r)
			continue
		}
		pkgsOf[m] = pkgs
		union = append(union, pkgs...)
		todo = append(todo, m)
	}
	var ledger *ledgerRun
	if rn.ledger != "" {
		if ledger, todo, err = rn.consultLedger(todo, pkgsOf); err != nil {
			rn.out.printf("mutants: ledger: %v\n", err)
			return 1
		}
		if rn.fromLog != "" {
			return ledger.seed(rn)
		}
		counts[caught] += ledger.upToDate
		union = nil
		for _, m := range todo {
			union = append(union, pkgsOf[m]...)
		}
	}
	slices.Sort(union)
	union = slices.Compact(union)

	// The baseline runs, in each package, every test that some mutant's
	// selection names, or all of them if some mutant needs them all.
	need := map[string][]string{}
	whole := map[string]bool{}
	for _, m := range todo {
		for pkg, names := range rn.selection(m, pkgsOf[m]) {
			if names == nil {
				whole[pkg] = true
			}
			need[pkg] = append(need[pkg], names...)
		}
	}
	for pkg := range whole {
		need[pkg] = nil
	}

	var base *baseline
	start := time.Now()
	if len(todo) > 0 {
		base = rn.baseline(ctx, union, need)
		if ctx.Err() != nil {
			rn.out.printf("mutants: interrupted\n")
			return 130
		}
	}

	if len(todo) > 0 && !rn.noOverlay {
		if rn.overlays, err = newOverlays(ctx, rn, todo); err != nil {
			rn.out.printf("mutants: %v\n", err)
			return 1
		}
		defer rn.overlays.close()
	}

	work := make(chan *mutant)
	results := make(chan result)
	go func() {
		defer close(work)
		for _, m := range todo {
			select {
			case work <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range min(rn.jobs, len(todo)) {
		wg.Go(func() {
			for m := range work {
				results <- rn.mutant(ctx, base, m, pkgsOf[m])
			}
		})
	}
	go func() {
		wg.Wait()
		close(results)
	}()
	mutantsStart := time.Now()
	ran, overlaid, woven := 0, 0, 0
	var busy, testing float64 // seconds over all mutants: in all, and in test binaries
	for r := range results {
		counts[r.outcome]++
		if ledger != nil {
			ledger.judged(rn, r)
		}
		if r.outcome != interrupted {
			rn.report(r)
		}
		if r.outcome != interrupted && r.outcome != baselineFailed {
			ran++
			busy += r.elapsed.Seconds()
			testing += r.testTime
			if r.woven {
				woven++
			} else if r.overlaid {
				overlaid++
			}
		}
	}
	if base != nil {
		secs := time.Since(mutantsStart).Seconds()
		n := float64(max(ran, 1))
		rn.out.printf("mutants: baseline %.1fs; %d mutants (%d of SQL and %d of Go without a build of their own) in %.1fs with -j %d (%.1fs each: %.1fs copying and building, %.1fs testing); %.1fs in all\n",
			base.elapsed.Seconds(), ran, overlaid, woven, secs, rn.jobs, busy/n, (busy-testing)/n, testing/n, time.Since(start).Seconds())
	}
	rn.out.printf("mutants: %d caught, %d survived, %d broken, %d timed out, %d baseline failed\n",
		counts[caught], counts[survived], counts[broken], counts[timedOut], counts[baselineFailed])
	if ledger != nil && rn.update && ctx.Err() == nil {
		if err := ledger.write(); err != nil {
			rn.out.printf("mutants: ledger: %v\n", err)
			return 1
		}
		rn.out.printf("mutants: ledger: wrote %s (%d caught)\n", rn.ledger, len(ledger.entries))
	}
	switch {
	case ctx.Err() != nil:
		rn.out.printf("mutants: interrupted\n")
		return 130
	case counts[caught] != len(mutants):
		return 1
	}
	return 0
}

// selection returns, for each of pkgs, the top-level tests that the rows
// of GUARANTEES.md naming m list in it, or nil when they list none there:
// then every test of the package judges m.
func (rn *runner) selection(m *mutant, pkgs []string) map[string][]string {
	listed := rn.proofs[m.number()]
	sel := map[string][]string{}
	for _, pkg := range pkgs {
		sel[pkg] = listed[rn.mod.dir(pkg)]
	}
	return sel
}

// runRegexp returns the go test -run pattern that selects exactly the
// top-level tests names (and their subtests); with none it selects nothing.
func runRegexp(names []string) string {
	if len(names) == 0 {
		return "^$"
	}
	return "^(" + strings.Join(names, "|") + ")$"
}

// baseline runs the tests of pkgs on an unmutated copy of the repository,
// once for the whole run, and reports the packages whose tests fail. In a
// package for which need holds names it runs only those tests (with their
// subtests); in the others, all.
func (rn *runner) baseline(ctx context.Context, pkgs []string, need map[string][]string) *baseline {
	start := time.Now()
	b := &baseline{run: newTestRun(), failed: map[string][]string{}}
	defer func() { b.elapsed = time.Since(start) }()
	fail := func(why string) *baseline {
		for _, p := range pkgs {
			b.failed[p] = append(b.failed[p], why)
		}
		rn.out.printf("BASELINE FAILED  %s\n", why)
		rn.tail(b.run.output.Bytes())
		return b
	}
	if rn.baseFile != "" {
		run, err := readBaseline(rn.baseFile)
		if err != nil {
			return fail("-baseline: " + err.Error())
		}
		b.run = run
		return rn.judgeBaseline(b, pkgs, nil, start)
	}
	scratch, err := rn.scratch(ctx, "")
	if err != nil {
		return fail(err.Error())
	}
	defer os.RemoveAll(scratch)
	// Two go test runs at once: the packages run whole, and the others
	// with the union of their selections (a name selected in one package
	// also runs its namesake in another, which costs a little time and
	// loses nothing).
	var whole, some, names []string
	for _, p := range pkgs {
		if need[p] == nil {
			whole = append(whole, p)
		} else {
			some = append(some, p)
			names = append(names, need[p]...)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var (
		wg     sync.WaitGroup
		runs   [2]*testRun
		errs   [2]error
		groups = [2][]string{whole, some}
		extra  = [2][]string{nil, {"-run", runRegexp(names)}}
	)
	for i := range groups {
		if len(groups[i]) == 0 {
			continue
		}
		var stream io.Writer
		if rn.verbose {
			stream = &lineWriter{prefix: "baseline: ", out: rn.out}
		}
		wg.Go(func() { runs[i], errs[i] = rn.goTest(ctx, scratch, groups[i], stream, extra[i]...) })
	}
	wg.Wait()
	var err2 error
	for i := range runs {
		if runs[i] != nil {
			b.run.merge(runs[i])
			err2 = worse(err2, errs[i])
		}
	}
	if ctx.Err() != nil {
		return b
	}
	return rn.judgeBaseline(b, pkgs, err2, start)
}

// judgeBaseline records in b which of pkgs failed in b.run (or are missing
// from it: a -baseline file from a run of other packages) and reports the
// baseline; err is go test's error, if it ran.
func (rn *runner) judgeBaseline(b *baseline, pkgs []string, err error, start time.Time) *baseline {
	for _, p := range pkgs {
		var why []string
		for _, id := range innermost(slices.Clone(b.run.failed)) {
			if id.pkg == p && id.name != "" {
				why = append(why, id.name)
			}
		}
		switch {
		case slices.Contains(b.run.buildFailed, p):
			why = append(why, "[build failed]")
		case slices.Contains(b.run.timedOut, p):
			why = append(why, "[timed out]")
		case len(why) == 0 && rn.baseFile != "" && !b.run.passed[testID{p, ""}] && !slices.Contains(b.run.failed, testID{p, ""}):
			why = append(why, "[not in "+rn.baseFile+"]")
		case len(why) == 0 && !b.run.passed[testID{p, ""}]:
			why = append(why, "[package failed]")
		}
		if len(why) > 0 {
			b.failed[p] = why
		}
	}
	if len(b.failed) == 0 && err != nil && !isExit(err) {
		for _, p := range pkgs {
			b.failed[p] = append(b.failed[p], "go test: "+err.Error())
		}
		rn.out.printf("BASELINE FAILED  go test: %s\n", err)
		rn.tail(b.run.output.Bytes())
		return b
	}
	n := 0
	for id := range b.run.passed {
		if id.name != "" {
			n++
		}
	}
	from := ""
	if rn.baseFile != "" {
		from = " in " + rn.baseFile
	}
	rn.out.printf("baseline%s: %d packages, %d tests passed, %d skipped (%.1fs)\n", from, len(pkgs), n, b.run.skipped, time.Since(start).Seconds())
	for _, p := range pkgs {
		if why := b.failed[p]; why != nil {
			rn.out.printf("BASELINE FAILED  %s: %s\n", rn.mod.dir(p), strings.Join(why, ", "))
		}
	}
	for _, p := range pkgs {
		if b.failed[p] != nil && b.run.pkgOutput[p] != nil {
			rn.tail(b.run.pkgOutput[p].Bytes())
		}
	}
	return b
}

// mutant applies m to a scratch copy of the repository and runs its
// packages' tests there: only the top-level tests that passed on the
// baseline, stopping at the first failure unless the run is verbose.
func (rn *runner) mutant(ctx context.Context, base *baseline, m *mutant, pkgs []string) (r result) {
	start := time.Now()
	r = result{m: m, outcome: broken}
	defer func() {
		r.elapsed = time.Since(start)
		if ctx.Err() != nil {
			r.outcome = interrupted
		}
	}()
	var bad []string
	for _, p := range pkgs {
		if base.failed[p] != nil {
			bad = append(bad, rn.mod.dir(p))
		}
	}
	if len(bad) > 0 {
		r.outcome, r.reason = baselineFailed, strings.Join(bad, " ")
		return r
	}

	// A mutant of SQL alone runs first in prebuilt test binaries, its
	// text swapped in at run time; only a catch counts there. Anything
	// else (a test binary that reads the SQL some other way, say) is
	// judged again the ordinary way, by building the mutated tree.
	var tried float64 // seconds the prebuilt test binaries ran
	if rn.overlays != nil && rn.overlays.applies(m) {
		if o, err := rn.overlays.tester(ctx, m); err != nil {
			rn.debugf("%s: no overlay: %v", m.file, err)
		} else {
			got := rn.judge(ctx, base, m, pkgs, o.test)
			if got.outcome == caught && o.goID != "" {
				// A woven catch counts only where the catching test passes
				// with no mutant switched on in the same binaries.
				if got.catching = o.confirm(got.catching); len(got.catching) == 0 {
					got.outcome, got.reason = survived, "no catch held up with no mutant switched on"
				}
			}
			o.close()
			if got.outcome == caught || ctx.Err() != nil {
				got.overlaid, got.woven = true, o.goID != ""
				return got
			}
			rn.debugf("%s: not caught in the prebuilt test binaries (%s); building it", m.file, got.reason)
			tried = got.testTime
		}
	}

	scratch, err := rn.scratch(ctx, m.path)
	if err != nil {
		r.reason = err.Error()
		return r
	}
	defer os.RemoveAll(scratch)
	got := rn.judge(ctx, base, m, pkgs, func(pkg string, stream io.Writer, extra ...string) (*testRun, error) {
		return rn.goTest(ctx, scratch, []string{pkg}, stream, extra...)
	})
	got.testTime += tried
	return got
}

// A tester runs go test's flags extra on one package of a mutated tree,
// copying go test's text output to stream if that is not nil.
type tester func(pkg string, stream io.Writer, extra ...string) (*testRun, error)

// judge runs m's packages' tests with test and returns the verdict on m.
func (rn *runner) judge(ctx context.Context, base *baseline, m *mutant, pkgs []string, test tester) (r result) {
	r = result{m: m, outcome: broken}
	var err error
	var stream io.Writer
	if rn.verbose {
		prefix := ""
		if rn.jobs > 1 {
			prefix = m.file + ": "
		}
		stream = &lineWriter{prefix: prefix, out: rn.out}
	}
	// Each package runs on its own, those with tests that GUARANTEES.md
	// lists for m first: only those tests, or, where no row lists one,
	// every test; in either case only tests that passed on the baseline.
	// Unless the run is verbose, it stops at the first package that
	// catches m.
	sel := rn.selection(m, pkgs)
	order := slices.Clone(pkgs)
	slices.SortStableFunc(order, func(a, b string) int {
		return cmpBool(sel[b] != nil, sel[a] != nil)
	})
	blind := m.otherEngine()
	got := newTestRun()
	for _, pkg := range order {
		names := base.run.topLevel([]string{pkg})
		if sel[pkg] != nil {
			names = slices.DeleteFunc(slices.Clone(sel[pkg]), func(n string) bool { return !base.run.passed[testID{pkg, n}] })
		}
		run := runRegexp(names) // with no name: build, run nothing, since no test could catch it
		extra := []string{"-run", run}
		if !rn.verbose {
			extra = append(extra, "-failfast")
		}
		one, oneErr := test(pkg, stream, extra...)
		if !rn.verbose && len(one.catching(base.run, blind)) == 0 && len(one.failed) > 0 &&
			len(one.buildFailed) == 0 && len(one.timedOut) == 0 && ctx.Err() == nil {
			// A failure that is no evidence (the other engine's subtest, a
			// test that did not pass on the baseline) stopped the run before
			// the tests that could catch the mutant ran: run them all.
			one, oneErr = test(pkg, stream, "-run", run)
		}
		if errors.Is(oneErr, context.DeadlineExceeded) {
			// The runner killed go test at its own deadline: the package
			// failed because of the kill, which is no evidence.
			one.failed = slices.DeleteFunc(one.failed, func(id testID) bool { return id.name == "" })
		}
		got.merge(one)
		err = worse(err, oneErr)
		if ctx.Err() != nil || !rn.verbose && (len(got.catching(base.run, blind)) > 0 || len(got.buildFailed) > 0 || len(got.timedOut) > 0) {
			break
		}
	}
	r.output = got.output.Bytes()
	r.testTime = got.testTime
	r.catching = got.catching(base.run, blind)
	r.discounted = got.discounted(base.run, blind)
	switch {
	case len(got.buildFailed) > 0:
		var dirs []string
		for _, p := range got.buildFailed {
			dirs = append(dirs, rn.mod.dir(p))
		}
		r.reason = "the mutated code does not build: " + strings.Join(dirs, " ")
	case len(r.catching) > 0:
		r.outcome = caught
	case len(got.timedOut) > 0 || errors.Is(err, context.DeadlineExceeded):
		r.outcome = timedOut
	case err != nil && !isExit(err):
		r.reason = "go test: " + err.Error()
	case len(got.failed) > 0:
		// Only tests that did not pass on the baseline failed: not evidence.
		r.outcome = survived
	case err != nil:
		r.reason = "go test failed without a failing test: " + err.Error()
	default:
		r.outcome = survived
	}
	return r
}

// scratch copies the repository's files into a new temporary directory and
// applies patch there if it is not "". The caller removes the directory.
func (rn *runner) scratch(ctx context.Context, patch string) (string, error) {
	dir, err := os.MkdirTemp("", "mutant-*")
	if err != nil {
		return "", err
	}
	if err := copyFiles(rn.root, dir, rn.files); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("copying the repository: %w", err)
	}
	if patch != "" {
		var out bytes.Buffer
		if err := command(ctx, dir, &out, nil, "git", "apply", "--whitespace=nowarn", patch); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("the patch does not apply: %v\n%s", err, out.Bytes())
		}
	}
	return dir, nil
}

// goTest runs go test -json on pkgs in dir and parses its output; text is
// copied to stream if that is not nil. The builds are path-independent
// (-trimpath), so that every scratch copy shares the build cache; vet is
// off, since a mutant is judged by the tests alone; and the test binaries
// carry no DWARF (-ldflags=-w), which nobody reads here and which is a third
// of the time it takes to link one.
func (rn *runner) goTest(ctx context.Context, dir string, pkgs []string, stream io.Writer, extra ...string) (*testRun, error) {
	ctx, cancel := context.WithTimeout(ctx, rn.timeout+2*time.Minute)
	defer cancel()
	args := []string{"test", "-json", "-count=1", "-trimpath", "-vet=off", "-ldflags=-w", "-timeout", rn.timeout.String()}
	args = append(args, extra...)
	args = append(args, pkgs...)
	r := newTestRun()
	sink := &jsonSink{run: r, stream: stream}
	err := command(ctx, dir, sink, rn.env, "go", args...)
	sink.flush()
	if lw, ok := stream.(*lineWriter); ok {
		lw.flush()
	}
	if ctx.Err() != nil && err != nil {
		err = fmt.Errorf("%w: %v", ctx.Err(), err)
	}
	return r, err
}

// worse returns the error that says more of two go test runs' errors: one
// that is not a plain non-zero exit (a time-out, a failure to start), or
// else the first.
func worse(a, b error) error {
	if a == nil || (isExit(a) && b != nil && !isExit(b)) {
		return b
	}
	return a
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func isExit(err error) bool {
	var exit *exec.ExitError
	return errors.As(err, &exit)
}

// command runs name with args in dir, with env added to the environment,
// writing its combined output to w. On
// cancellation the process and its children are interrupted, and killed
// once the process has exited or ten seconds later.
func command(ctx context.Context, dir string, w io.Writer, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	// Keep git from finding a repository above the scratch directory, in
	// which git apply would silently skip paths outside the current one.
	cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir))
	cmd.Env = append(cmd.Env, env...)
	newGroup(cmd)
	cmd.Cancel = func() error { return signalGroup(cmd, syscall.SIGINT) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdout, cmd.Stderr = w, w
	err := cmd.Run()
	if ctx.Err() != nil && cmd.Process != nil {
		signalGroup(cmd, syscall.SIGKILL) // leave no test binary behind
	}
	return err
}

// debugf prints a line of the runner's own reasoning when the run is verbose.
func (rn *runner) debugf(format string, args ...any) {
	if rn.verbose {
		rn.out.printf("mutants: "+format+"\n", args...)
	}
}

// report prints the verdict line for r and, unless the mutant was caught,
// the tail of the output that explains it.
func (rn *runner) report(r result) {
	secs := fmt.Sprintf("(%.1fs)", r.elapsed.Seconds())
	switch r.outcome {
	case caught:
		rn.out.printf("caught   %s  %s  by %s  %s\n", r.m.file, secs, rn.testName(r.catching[0]), r.m.desc)
		if rn.verbose && len(r.catching) > 1 {
			var names []string
			for _, id := range r.catching[1:] {
				names = append(names, rn.testName(id))
			}
			rn.out.printf("    also caught by %s\n", strings.Join(names, " "))
		}
		return
	case survived:
		rn.out.printf("SURVIVED %s  %s  %s\n", r.m.file, secs, r.m.desc)
		for _, d := range r.discounted {
			rn.out.printf("    failed, but no evidence: %s (%s)\n", rn.testName(d.id), d.why)
		}
	case broken:
		rn.out.printf("BROKEN   %s  %s  %s: %s\n", r.m.file, secs, r.m.desc, r.reason)
	case timedOut:
		rn.out.printf("TIMEOUT  %s  %s  %s\n", r.m.file, secs, r.m.desc)
		// What was running matters, not the goroutine dump's end.
		if i := bytes.Index(r.output, []byte("panic: test timed out")); i >= 0 {
			lines := strings.SplitN(string(r.output[i:]), "\n", tailLines+1)
			r.output = []byte(strings.Join(lines[:min(len(lines), tailLines)], "\n"))
		}
	case baselineFailed:
		rn.out.printf("BASELINE FAILED  %s  %s: the unmutated tests of %s fail\n", r.m.file, r.m.desc, r.reason)
		return
	}
	rn.tail(r.output)
}

// testName names a test as GUARANTEES.md does: dir:TestName/subtest, or
// dir:TestMain for a package that failed outside every test.
func (rn *runner) testName(id testID) string {
	name := id.name
	if name == "" {
		name = "TestMain"
	}
	return rn.mod.dir(id.pkg) + ":" + name
}

// tail prints the last tailLines non-empty lines of output, indented.
func (rn *runner) tail(output []byte) {
	lines := strings.Split(strings.TrimRight(string(output), "\n"), "\n")
	lines = slices.DeleteFunc(lines, func(l string) bool { return strings.TrimSpace(l) == "" })
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	rn.out.mu.Lock()
	defer rn.out.mu.Unlock()
	for _, line := range lines {
		fmt.Fprintf(rn.out.w, "    %s\n", line)
	}
}

// gitRoot returns the top-level directory of the repository containing the
// current directory.
func gitRoot() (string, error) {
	cmd := exec.Command("git", "rev-parse", "--show-toplevel")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// listFiles returns the repository-relative paths of the files git tracks
// or would track: cached ones and untracked ones that are not ignored.
func listFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "-z")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the repository's files: %w", err)
	}
	files := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	slices.Sort(files)
	return slices.Compact(files), nil
}

// copyFiles copies the named files from src to dst, preserving permissions
// and symbolic links. Files missing from disk, directories (submodules) and
// special files are skipped.
func copyFiles(src, dst string, files []string) error {
	for _, name := range files {
		if name == "" {
			continue
		}
		from, to := filepath.Join(src, name), filepath.Join(dst, name)
		info, err := os.Lstat(from)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsRegular():
			err = copyFile(from, to, mode.Perm())
		case mode&fs.ModeSymlink != 0:
			var target string
			if target, err = os.Readlink(from); err == nil {
				err = os.Symlink(target, to)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// copyFile copies the regular file from to a new file to with permissions perm.
func copyFile(from, to string, perm fs.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(to, perm) // OpenFile's perm is subject to the umask
}

// A lineWriter copies output to the runner's output a whole line at a time,
// each line behind a prefix, so that parallel mutants' output interleaves
// only at line boundaries.
type lineWriter struct {
	prefix string
	out    *printer
	buf    []byte
}

// Write implements [io.Writer].
func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.out.printf("%s%s\n", w.prefix, w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

// flush writes out a final unterminated line, if any.
func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.Write([]byte("\n"))
	}
}
