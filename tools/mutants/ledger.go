package main

// The ledger: which mutants were caught, on what.
//
// A mutant's verdict depends on a bounded set of inputs: its patch, the
// tests its rows select, the files of its test packages (sources, tests,
// testdata, SQL), the files compiled or embedded into every package of
// the module those test binaries link (and those of a package a test
// builds at run time, such as cmd/racefree, named in its test files), the
// files the patch touches, go.mod, go.sum, the Go toolchain and this
// runner's keyVersion. Its key is the SHA-256 of all of them. The ledger
// (tools/mutants/ledger.tsv) records, for each mutant last judged caught,
// the key it was caught on and the test that caught it.
//
// With -ledger, a mutant whose key is the one recorded is not run again:
// nothing its verdict depends on has changed since it was caught. Every
// other mutant runs, and so does a sample of the up-to-date ones (-sample,
// chosen anew for each commit), so that what a key cannot see (the
// database server, a test that depends on timing) is tried again over time.
// With -update the ledger is written anew: every mutant caught in this run
// with its key, the up-to-date ones kept, and none that was not caught.
// This is CI's short mode; a run without -ledger judges every mutant.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
)

// keyVersion changes whenever a change to the runner could change a
// verdict (how tests are selected, judged or built): every key changes with
// it, so every mutant is judged again.
const keyVersion = "1"

// ledgerFile is the ledger's location relative to the repository root.
const ledgerFile = "tools/mutants/ledger.tsv"

// A ledgerEntry is one caught mutant.
type ledgerEntry struct {
	key string // hex SHA-256 of its inputs when it was caught
	by  string // the test that caught it, dir:TestName/subtest
}

// readLedger reads a ledger; a missing file is an empty ledger.
func readLedger(file string) (map[string]ledgerEntry, error) {
	entries := map[string]ledgerEntry{}
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return entries, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) != 3 || len(fields[1]) != 64 {
			return nil, fmt.Errorf("%s:%d: want patch<TAB>key<TAB>caught-by", file, n)
		}
		entries[fields[0]] = ledgerEntry{key: fields[1], by: fields[2]}
	}
	return entries, sc.Err()
}

// writeLedger writes entries to file, sorted by patch name.
func writeLedger(file string, entries map[string]ledgerEntry) error {
	var b strings.Builder
	b.WriteString("# The mutants last judged caught: patch, the SHA-256 of everything its verdict depends on, the test that caught it.\n")
	b.WriteString("# Written by go run ./tools/mutants -ledger " + ledgerFile + " -update; read by CI's short mode (see README.md).\n")
	names := make([]string, 0, len(entries))
	for name := range entries {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		e := entries[name]
		fmt.Fprintf(&b, "%s\t%s\t%s\n", name, e.key, e.by)
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// A keyer computes mutants' keys for one tree.
type keyer struct {
	rn     *runner
	base   []byte                // go version, keyVersion, go.mod, go.sum
	pkgs   map[string]*listedPkg // import path → the package, test variants folded in
	owned  map[string][]string   // package directory (repository-relative) → the files it owns
	hashes map[string]string     // repository-relative file → hex SHA-256 of its content
}

// A listedPkg is what go list says of one package of the module.
type listedPkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	CgoFiles   []string
	EmbedFiles []string
	Deps       []string
	ForTest    string
	Module     *struct{ Path string }
}

func newKeyer(rn *runner) (*keyer, error) {
	k := &keyer{rn: rn, pkgs: map[string]*listedPkg{}, owned: map[string][]string{}, hashes: map[string]string{}}
	k.base = fmt.Appendf(nil, "racefree mutant key %s\n%s\n", keyVersion, runtime.Version())
	for _, f := range []string{"go.mod", "go.sum"} {
		k.base = fmt.Appendf(k.base, "%s %s\n", f, k.hash(f))
	}

	cmd := exec.Command("go", "list", "-e", "-test", "-deps",
		"-json=ImportPath,Dir,GoFiles,CgoFiles,EmbedFiles,Deps,ForTest,Module", "./...")
	cmd.Dir = rn.root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		if p.Module == nil || p.Module.Path != rn.mod.path {
			continue
		}
		id := p.ImportPath
		if p.ForTest != "" {
			continue // "q [p.test]": q's own files, compiled again for p's test
		}
		k.pkgs[id] = &p
	}

	// Each file belongs to the nearest enclosing directory that holds
	// non-test Go source: its package's directory (testdata, sql/…).
	isPkgDir := map[string]bool{}
	for _, p := range k.pkgs {
		if rel, err := filepath.Rel(rn.root, p.Dir); err == nil && !strings.HasSuffix(p.ImportPath, ".test") {
			isPkgDir[filepath.ToSlash(rel)] = true
		}
	}
	for _, f := range rn.files {
		if f == ledgerFile {
			continue // the ledger is the record of the keys, never an input to one
		}
		for dir := path.Dir(f); ; dir = path.Dir(dir) {
			if isPkgDir[dir] {
				k.owned[dir] = append(k.owned[dir], f)
				break
			}
			if dir == "." {
				break
			}
		}
	}
	return k, nil
}

// hash returns the hex SHA-256 of a repository file's content, or "-" for
// a file that cannot be read.
func (k *keyer) hash(rel string) string {
	if h, ok := k.hashes[rel]; ok {
		return h
	}
	h := "-"
	if data, err := os.ReadFile(filepath.Join(k.rn.root, filepath.FromSlash(rel))); err == nil {
		sum := sha256.Sum256(data)
		h = hex.EncodeToString(sum[:])
	}
	k.hashes[rel] = h
	return h
}

// builtAtRunTime matches a quoted import path of the module in a test
// file: a package the test builds (go build …/cmd/racefree), whose files
// its verdicts then depend on though its binary does not link them.
func (k *keyer) builtAtRunTime(dir string) []string {
	re := regexp.MustCompile(`"(` + regexp.QuoteMeta(k.rn.mod.path) + `(/[A-Za-z0-9_./-]+)?)"`)
	var found []string
	for _, f := range k.owned[dir] {
		if !strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(k.rn.root, filepath.FromSlash(f)))
		if err != nil {
			continue
		}
		for _, m := range re.FindAllStringSubmatch(string(data), -1) {
			if _, ok := k.pkgs[m[1]]; ok {
				found = append(found, m[1])
			}
		}
	}
	return found
}

// relDir returns a package's directory relative to the repository root.
func (k *keyer) relDir(p *listedPkg) string {
	rel, err := filepath.Rel(k.rn.root, p.Dir)
	if err != nil {
		return p.Dir
	}
	return filepath.ToSlash(rel)
}

// key returns m's key: the SHA-256 of everything its verdict depends on.
func (k *keyer) key(m *mutant, pkgs []string) (string, error) {
	patch, err := os.ReadFile(m.path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(k.base)
	fmt.Fprintf(h, "patch %x\n", sha256.Sum256(patch))
	for _, f := range m.touched {
		fmt.Fprintf(h, "touched %s %s\n", f, k.hash(f))
	}

	// The tests that judge it.
	sel := k.rn.selection(m, pkgs)
	for _, pkg := range pkgs {
		fmt.Fprintf(h, "selects %s %q\n", pkg, sel[pkg])
	}

	// Every file of its test packages; the built files of what they link
	// or build.
	files := map[string]bool{}
	linked := map[string]bool{}
	addLinked := func(ip string) {
		linked[ip] = true
		if p := k.pkgs[ip]; p != nil {
			for _, d := range p.Deps {
				d, _, _ = strings.Cut(d, " ")
				linked[d] = true
			}
		}
	}
	for _, ip := range pkgs {
		p := k.pkgs[ip]
		if p == nil {
			return "", fmt.Errorf("go list does not know %s", ip)
		}
		dir := k.relDir(p)
		for _, f := range k.owned[dir] {
			files[f] = true
		}
		addLinked(ip)
		addLinked(ip + ".test")
		for _, q := range k.builtAtRunTime(dir) {
			addLinked(q)
		}
	}
	for ip := range linked {
		p := k.pkgs[ip]
		if p == nil || strings.HasSuffix(ip, ".test") {
			continue // outside the module, or the generated test main
		}
		dir := k.relDir(p)
		for _, group := range [][]string{p.GoFiles, p.CgoFiles, p.EmbedFiles} {
			for _, f := range group {
				files[path.Join(dir, f)] = true
			}
		}
	}
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	slices.Sort(names)
	for _, f := range names {
		fmt.Fprintf(h, "file %s %s\n", f, k.hash(f))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sampled returns up to n of names, chosen by seed: the same seed (a
// commit) always samples the same ones, another seed others.
func sampled(names []string, seed string, n int) []string {
	type ranked struct{ name, rank string }
	var rs []ranked
	for _, name := range names {
		sum := sha256.Sum256([]byte(seed + "\x00" + name))
		rs = append(rs, ranked{name, hex.EncodeToString(sum[:])})
	}
	slices.SortFunc(rs, func(a, b ranked) int { return strings.Compare(a.rank, b.rank) })
	var out []string
	for _, r := range rs[:min(n, len(rs))] {
		out = append(out, r.name)
	}
	slices.Sort(out)
	return out
}

// headCommit returns the commit the work tree is on, or "" outside git.
func headCommit(root string) string {
	cmd := exec.Command("git", "rev-parse", "HEAD")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// A ledgerRun is the ledger of one run: what it found, and what the run
// judged.
type ledgerRun struct {
	file     string
	root     string                 // the repository's top directory
	entries  map[string]ledgerEntry // starts as the ledger read; becomes the one written
	keys     map[string]string      // patch name → key on today's inputs
	upToDate int                    // mutants not run: caught on today's inputs
	todo     []*mutant
}

// consultLedger computes the key of each of todo and returns the mutants
// to run: those the ledger does not record as caught on that key, and a
// sample of those it does.
func (rn *runner) consultLedger(todo []*mutant, pkgsOf map[*mutant][]string) (*ledgerRun, []*mutant, error) {
	file := rn.ledger
	if !filepath.IsAbs(file) {
		if wd, err := os.Getwd(); err == nil {
			file = filepath.Join(wd, file)
		}
	}
	entries, err := readLedger(file)
	if err != nil {
		return nil, nil, err
	}
	k, err := newKeyer(rn)
	if err != nil {
		return nil, nil, err
	}
	lr := &ledgerRun{file: file, root: rn.root, entries: entries, keys: map[string]string{}, todo: todo}
	var run []*mutant
	var current []string
	changed, unrecorded := 0, 0
	for _, m := range todo {
		key, err := k.key(m, pkgsOf[m])
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", m.file, err)
		}
		lr.keys[m.file] = key
		switch e, ok := entries[m.file]; {
		case !ok:
			unrecorded++
			run = append(run, m)
		case e.key != key:
			changed++
			run = append(run, m)
		default:
			current = append(current, m.file)
		}
	}
	again := sampled(current, headCommit(rn.root), rn.sample)
	for _, m := range todo {
		if slices.Contains(again, m.file) {
			run = append(run, m)
		}
	}
	lr.upToDate = len(current) - len(again)
	if rn.fromLog == "" {
		rn.out.printf("mutants: ledger %s: %d caught on today's inputs (%d of them sampled to run again), %d whose inputs changed, %d not recorded: running %d\n",
			rn.ledger, len(current), len(again), changed, unrecorded, len(run))
	}
	return lr, run, nil
}

// judged records the verdict on one mutant of the run.
func (lr *ledgerRun) judged(rn *runner, r result) {
	switch r.outcome {
	case caught:
		lr.entries[r.m.file] = ledgerEntry{key: lr.keys[r.m.file], by: rn.testName(r.catching[0])}
	case interrupted:
	default:
		delete(lr.entries, r.m.file)
	}
}

// write writes the ledger, without the mutants the catalogue no longer
// holds.
func (lr *ledgerRun) write() error {
	dir := filepath.Join(lr.root, filepath.FromSlash(catalogueDir))
	for name := range lr.entries {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			delete(lr.entries, name)
		}
	}
	return writeLedger(lr.file, lr.entries)
}

// caughtLine is a verdict line of a runner's output, as report prints it,
// perhaps quoted ("> "); notCaughtLine is any other verdict line.
var (
	caughtLine    = regexp.MustCompile(`^(?:> )?caught +(\S+\.patch) +\([0-9.]+s\) +by (\S+)`)
	notCaughtLine = regexp.MustCompile(`^(?:> )?(?:SURVIVED|BROKEN|TIMEOUT|BASELINE FAILED) +(\S+\.patch) `)
)

// seed merges a runner's output on this same tree into the ledger: every
// mutant it reports caught is recorded with today's key, every mutant it
// reports otherwise is dropped, and the entries of mutants the output does
// not mention stay as they were (a CI run judges only those the ledger
// does not record as caught).
func (lr *ledgerRun) seed(rn *runner) int {
	data, err := os.ReadFile(rn.fromLog)
	if err != nil {
		rn.out.printf("mutants: ledger: %v\n", err)
		return 1
	}
	for line := range strings.Lines(string(data)) {
		if m := caughtLine.FindStringSubmatch(line); m != nil {
			if key, ok := lr.keys[m[1]]; ok {
				lr.entries[m[1]] = ledgerEntry{key: key, by: m[2]}
			}
		} else if m := notCaughtLine.FindStringSubmatch(line); m != nil {
			delete(lr.entries, m[1])
		}
	}
	if err := lr.write(); err != nil {
		rn.out.printf("mutants: ledger: %v\n", err)
		return 1
	}
	current := 0
	for name, e := range lr.entries {
		if e.key == lr.keys[name] {
			current++
		}
	}
	rn.out.printf("mutants: ledger: wrote %s from %s: %d of %d mutants caught on today's inputs\n", rn.ledger, rn.fromLog, current, len(lr.todo))
	return 0
}
