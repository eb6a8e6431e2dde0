package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// A mutant that changes only .sql files needs no build of its own. The
// module passes every embedded SQL text through a hook
// (internal/query.Embedded) that, in a test binary built with the tag
// overlayTag, replaces a text whose SHA-256 the file named by overlayEnv
// lists with the mutant's version of it. So each package's test binary is
// built once, with the tag, from an unmutated copy of the repository, and
// each SQL mutant runs in it with its own overlay. A text that two .sql
// files share is never overlaid (the mutant would change both), and a
// module without the hook, or a test that reads its SQL another way, merely
// lets the mutant survive there: the runner then judges it again by
// building the mutated tree, so the overlay can save time but never change
// a verdict.
const (
	overlayTag = "racefree_mutants"
	overlayEnv = "RACEFREE_MUTANT_SQL"
	binDir     = ".mutants-bin" // in the unmutated copy: the prebuilt test binaries
)

// overlays holds the prebuilt test binaries.
type overlays struct {
	rn     *runner
	base   string          // an unmutated copy of the repository: where the binaries are built and run
	shared map[string]bool // digests of the texts that more than one .sql file holds
	digest map[string]string

	woven *weaving // the Go mutants woven into base (see weave.go)

	mu     sync.Mutex
	builds map[string]*prebuilt // package → its test binary
	clean  map[testID]*cleanRun // top-level test → its run with no mutant switched on
}

// A cleanRun is one test's run in the prebuilt binaries with no mutant
// switched on, run on first use: whether a woven mutant's catch holds up.
type cleanRun struct {
	once   sync.Once
	passed bool
}

// A prebuilt is one package's test binary, built on first use.
type prebuilt struct {
	once sync.Once
	path string
	err  error
}

// newOverlays copies the repository, reads the digests of its .sql files
// and weaves the Go mutants among ms into the copy.
func newOverlays(ctx context.Context, rn *runner, ms []*mutant) (*overlays, error) {
	base, err := rn.scratch(ctx, "")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(base, binDir), 0o755); err != nil {
		os.RemoveAll(base)
		return nil, err
	}
	o := &overlays{rn: rn, base: base, shared: map[string]bool{}, digest: map[string]string{}, builds: map[string]*prebuilt{}, clean: map[testID]*cleanRun{}}
	seen := map[string]bool{}
	for _, f := range rn.files {
		if !strings.HasSuffix(f, ".sql") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(rn.root, filepath.FromSlash(f)))
		if err != nil {
			continue
		}
		d := sqlDigest(data)
		o.digest[f] = d
		o.shared[d] = seen[d]
		seen[d] = true
	}
	if o.woven, err = weave(ctx, rn, base, ms); err != nil {
		os.RemoveAll(base)
		return nil, err
	}
	return o, nil
}

// close removes the copy and the binaries.
func (o *overlays) close() { os.RemoveAll(o.base) }

// applies reports whether m changes only .sql files of the repository,
// each with a text no other .sql file holds, or is a woven Go mutant.
func (o *overlays) applies(m *mutant) bool {
	if o.woven.ids[m] != "" {
		return true
	}
	for _, f := range m.touched {
		d, ok := o.digest[f]
		if !ok || o.shared[d] {
			return false
		}
	}
	return len(m.touched) > 0
}

// binary returns the path of pkg's test binary, building it the first time.
func (o *overlays) binary(ctx context.Context, pkg string) (string, error) {
	o.mu.Lock()
	b := o.builds[pkg]
	if b == nil {
		b = &prebuilt{}
		o.builds[pkg] = b
	}
	o.mu.Unlock()
	b.once.Do(func() {
		b.path = filepath.Join(o.base, binDir, strings.ReplaceAll(pkg, "/", "_")+".test")
		var out bytes.Buffer
		b.err = command(ctx, o.base, &out, o.rn.env, "go", "test", "-c", "-tags", overlayTag, "-trimpath", "-vet=off", "-ldflags=-w", "-o", b.path, pkg)
		if b.err == nil {
			if _, err := os.Stat(b.path); err != nil {
				b.err = fmt.Errorf("no test binary (no test files?)")
			}
		}
		if b.err != nil {
			b.err = fmt.Errorf("building %s's tests with -tags %s: %v\n%s", pkg, overlayTag, b.err, out.Bytes())
		}
	})
	return b.path, b.err
}

// An overlayRun runs one mutant in the prebuilt binaries.
type overlayRun struct {
	o    *overlays
	ctx  context.Context
	dir  string // holds the overlay; "" for none
	file string // the overlay: digest of the original text → the mutant's text; "" for none
	goID string // the woven mutant to switch on; "" for none
}

// tester writes m's overlay: the texts of the .sql files it changes, as m
// leaves them. A woven mutant needs none (its files are Go).
func (o *overlays) tester(ctx context.Context, m *mutant) (*overlayRun, error) {
	r := &overlayRun{o: o, ctx: ctx, goID: o.woven.ids[m]}
	if r.goID != "" {
		return r, nil
	}
	texts, err := patched(ctx, o.rn.root, m)
	if err != nil {
		return nil, err
	}
	swap := map[string]string{}
	for f, text := range texts {
		swap[o.digest[f]] = string(text)
	}
	if r.dir, err = os.MkdirTemp("", "mutant-sql-*"); err != nil {
		return nil, err
	}
	r.file = filepath.Join(r.dir, "overlay.json")
	data, err := json.Marshal(swap)
	if err == nil {
		err = os.WriteFile(r.file, data, 0o644)
	}
	if err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *overlayRun) close() {
	if r.dir != "" {
		os.RemoveAll(r.dir)
	}
}

// test runs pkg's prebuilt test binary with the overlay, in the package's
// directory of the unmutated copy, translating go test's flags extra (-run,
// -failfast) into the binary's, and its output into go test -json's.
func (r *overlayRun) test(pkg string, stream io.Writer, extra ...string) (*testRun, error) {
	rn := r.o.rn
	bin, err := r.o.binary(r.ctx, pkg)
	if err != nil {
		return newTestRun(), err
	}
	ctx, cancel := context.WithTimeout(r.ctx, rn.timeout+2*time.Minute)
	defer cancel()
	args := []string{"tool", "test2json", "-t", "-p", pkg, bin, "-test.v=test2json", "-test.count=1", "-test.timeout=" + rn.timeout.String()}
	for i := 0; i < len(extra); i++ {
		switch extra[i] {
		case "-run":
			i++
			args = append(args, "-test.run="+extra[i])
		case "-failfast":
			args = append(args, "-test.failfast")
		default:
			return newTestRun(), fmt.Errorf("no test binary flag for go test's %s", extra[i])
		}
	}
	run := newTestRun()
	sink := &jsonSink{run: run, stream: stream}
	env := append(append([]string{}, rn.env...), overlayEnv+"="+r.file, weaveEnv+"="+r.goID)
	err = command(ctx, filepath.Join(r.o.base, filepath.FromSlash(rn.mod.dir(pkg))), sink, env, "go", args...)
	sink.flush()
	if lw, ok := stream.(*lineWriter); ok {
		lw.flush()
	}
	if ctx.Err() != nil && err != nil {
		err = fmt.Errorf("%w: %v", ctx.Err(), err)
	}
	return run, err
}

// confirm returns the tests of ids (named by their top-level tests) that
// pass in the prebuilt binaries with no mutant switched on: the catches of
// a woven mutant that hold up. Each test runs once per runner.
func (r *overlayRun) confirm(ids []testID) []testID {
	var held []testID
	for _, id := range ids {
		top := testID{id.pkg, strings.SplitN(id.name, "/", 2)[0]}
		r.o.mu.Lock()
		c := r.o.clean[top]
		if c == nil {
			c = &cleanRun{}
			r.o.clean[top] = c
		}
		r.o.mu.Unlock()
		c.once.Do(func() {
			clean := &overlayRun{o: r.o, ctx: r.ctx} // no SQL overlay, no Go mutant
			run, err := clean.test(top.pkg, nil, "-run", runRegexp([]string{regexp.QuoteMeta(top.name)}))
			c.passed = err == nil && len(run.failed) == 0 && run.passed[testID{top.pkg, ""}]
		})
		if c.passed {
			held = append(held, id)
		}
	}
	return held
}

// sqlDigest is internal/query's digest of an embedded text: its SHA-256 in hex.
func sqlDigest(text []byte) string {
	sum := sha256.Sum256(text)
	return hex.EncodeToString(sum[:])
}
