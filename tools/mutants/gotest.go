package main

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strings"
)

// A testID names one test of one package: the package's import path and
// the test's full name, subtests included ("TestAcquire/postgres"). An
// empty name stands for the package as a whole, whose test binary can fail
// outside any test (TestMain, goleak, a crash).
type testID struct {
	pkg, name string
}

// A testRun is what one go test -json run showed.
type testRun struct {
	passed      map[testID]bool          // tests and packages that passed
	skipped     int                      // tests that skipped: they prove nothing
	failed      []testID                 // tests and packages that failed, in the order go test reported them
	buildFailed []string                 // packages that did not build or load
	timedOut    []string                 // packages whose test binary hit -timeout
	output      bytes.Buffer             // the human-readable output: go test's text without the JSON
	pkgOutput   map[string]*bytes.Buffer // the same, by package
	testTime    float64                  // seconds the test binaries ran, summed over packages
}

// An event is one line of go test -json (cmd/test2json).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string  // build-output and build-fail events
	FailedBuild string  // a package's fail event when it did not build
	Elapsed     float64 // seconds, on a package's pass, fail or skip event: how long its test binary ran
}

// A jsonSink parses go test -json output written to it line by line into
// run, copying the text to stream if that is not nil. Lines that are not
// JSON (go's own complaints on stderr) are kept as text.
type jsonSink struct {
	run    *testRun
	stream io.Writer
	buf    []byte
}

func newTestRun() *testRun {
	return &testRun{passed: map[testID]bool{}, pkgOutput: map[string]*bytes.Buffer{}}
}

// Write implements [io.Writer].
func (s *jsonSink) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		s.line(s.buf[:i+1])
		s.buf = s.buf[i+1:]
	}
}

// flush handles a final unterminated line, if any.
func (s *jsonSink) flush() {
	if len(s.buf) > 0 {
		s.line(append(s.buf, '\n'))
		s.buf = nil
	}
}

func (s *jsonSink) text(pkg, t string) {
	s.run.output.WriteString(t)
	if pkg != "" {
		b := s.run.pkgOutput[pkg]
		if b == nil {
			b = new(bytes.Buffer)
			s.run.pkgOutput[pkg] = b
		}
		b.WriteString(t)
	}
	if s.stream != nil {
		io.WriteString(s.stream, t)
	}
}

func (s *jsonSink) line(l []byte) {
	var e event
	if !bytes.HasPrefix(l, []byte("{")) || json.Unmarshal(l, &e) != nil || e.Action == "" {
		s.text("", string(l))
		return
	}
	r := s.run
	id := testID{e.Package, e.Test}
	switch e.Action {
	case "output", "build-output":
		pkg := e.Package
		if pkg == "" {
			pkg, _, _ = strings.Cut(e.ImportPath, " ") // "p [p.test]" is p's test build
		}
		s.text(pkg, e.Output)
		switch {
		case strings.HasPrefix(e.Output, "panic: test timed out after"): // not a test's log quoting one
			r.addTimedOut(pkg)
		case e.Test == "" && (strings.Contains(e.Output, "[build failed]") || strings.Contains(e.Output, "[setup failed]")):
			r.addBuildFailed(pkg)
		}
	case "build-fail":
		pkg, _, _ := strings.Cut(e.ImportPath, " ")
		r.addBuildFailed(pkg)
	case "pass":
		r.passed[id] = true
		if e.Test == "" {
			r.testTime += e.Elapsed
		}
	case "skip":
		if e.Test != "" {
			r.skipped++
		} else {
			r.passed[id] = true // no test files: nothing failed, nothing proven
		}
	case "fail":
		if e.Test == "" {
			r.testTime += e.Elapsed
		}
		switch {
		case e.FailedBuild != "":
			r.addBuildFailed(e.Package)
		case slices.Contains(r.timedOut, e.Package):
			// The test that was running when the binary timed out, and
			// the package, fail because of the time-out: not evidence.
		default:
			r.failed = append(r.failed, id)
		}
	}
}

// merge adds what the run o showed to r: o ran other packages, or the
// same packages again (a run without -failfast after one with it).
func (r *testRun) merge(o *testRun) {
	for id := range o.passed {
		r.passed[id] = true
	}
	r.skipped += o.skipped
	r.failed = append(r.failed, o.failed...)
	for _, p := range o.buildFailed {
		r.addBuildFailed(p)
	}
	for _, p := range o.timedOut {
		r.addTimedOut(p)
	}
	r.output.Write(o.output.Bytes())
	for p, b := range o.pkgOutput {
		if r.pkgOutput[p] == nil {
			r.pkgOutput[p] = new(bytes.Buffer)
		}
		r.pkgOutput[p].Write(b.Bytes())
	}
	r.testTime += o.testTime
}

func (r *testRun) addBuildFailed(pkg string) {
	if pkg != "" && !slices.Contains(r.buildFailed, pkg) {
		r.buildFailed = append(r.buildFailed, pkg)
	}
}

func (r *testRun) addTimedOut(pkg string) {
	if pkg != "" && !slices.Contains(r.timedOut, pkg) {
		r.timedOut = append(r.timedOut, pkg)
	}
}

// catching returns the tests that passed on base and failed in r, in the
// order r reported them: the innermost subtests, then packages. A parent
// test fails with any of its subtests and a package with any of its tests,
// so each is named only when it failed on its own. Subtests that did not
// pass on base (a PostgreSQL subtest that skipped without a database) and
// subtests named blind (an engine the mutant's SQL does not reach) are no
// evidence and are left out, and so are their parents and packages.
func (r *testRun) catching(base *testRun, blind string) []testID {
	var tests, pkgs []testID
	failedTests := map[string]bool{} // packages with a failed test
	for _, id := range r.failed {
		switch {
		case id.name != "":
			failedTests[id.pkg] = true
			tests = append(tests, id)
		case base.passed[id]:
			pkgs = append(pkgs, id)
		}
	}
	tests = slices.DeleteFunc(innermost(tests), func(id testID) bool {
		return !base.passed[id] || blind != "" && slices.Contains(strings.Split(id.name, "/"), blind)
	})
	for _, p := range pkgs {
		if !failedTests[p.pkg] {
			tests = append(tests, p)
		}
	}
	return tests
}

// A discount is a test that failed but is no evidence against a mutant.
type discount struct {
	id  testID
	why string
}

// discounted returns the tests that failed in r but are no evidence against
// the mutant: they did not pass on base, or they are subtests of the blind
// engine.
func (r *testRun) discounted(base *testRun, blind string) []discount {
	var out []discount
	for _, id := range r.failed {
		switch {
		case id.name == "":
		case !base.passed[id]:
			out = append(out, discount{id, "did not pass on the baseline"})
		case blind != "" && slices.Contains(strings.Split(id.name, "/"), blind):
			out = append(out, discount{id, "runs on " + blind + ", which the mutated SQL does not reach"})
		}
	}
	return out
}

// innermost returns tests without the parents of other tests in it: a
// parent fails with its subtests, so only the innermost says what broke.
func innermost(tests []testID) []testID {
	all := slices.Clone(tests)
	return slices.DeleteFunc(tests, func(parent testID) bool {
		return parent.name != "" && slices.ContainsFunc(all, func(t testID) bool {
			return t.pkg == parent.pkg && strings.HasPrefix(t.name, parent.name+"/")
		})
	})
}

// topLevel returns the sorted names of the top-level tests of pkgs that
// passed in r.
func (r *testRun) topLevel(pkgs []string) []string {
	var names []string
	for id := range r.passed {
		if id.name != "" && slices.Contains(pkgs, id.pkg) {
			top, _, _ := strings.Cut(id.name, "/")
			names = append(names, top)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
