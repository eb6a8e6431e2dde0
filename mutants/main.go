// Command mutants is the mutation-testing runner: it checks that the test
// suite catches every bug in a catalogue of known mutants.
//
// Each file mutants/catalogue/*.patch is one mutant, a unified diff that
// re-creates a real bug (see mutants/README.md for the format). For every
// mutant the runner copies the repository's files into a scratch directory,
// applies the patch there with git apply, and runs go test on the packages
// the patch touches. The mutant is
//
//   - caught when the tests fail,
//   - SURVIVED when they pass (the suite has a hole), and
//   - BROKEN when the patch no longer applies or the mutated code does not
//     build (the catalogue is stale).
//
// Usage, from anywhere inside the repository:
//
//	go run ./mutants [-run REGEX] [-j N] [-v] [-list]
//
// The exit status is 0 when every mutant was caught and 1 otherwise. The
// environment is passed through unchanged, so TEST_DATABASE_URL,
// RACEFREE_REQUIRE_POSTGRES and GOFLAGS apply to the mutants' tests too.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// catalogueDir is the catalogue's location relative to the repository root.
const catalogueDir = "mutants/catalogue"

// tailLines is how many lines of output are shown for a mutant that
// survived or broke.
const tailLines = 30

// stdout serialises writes to standard output between parallel mutants.
var stdout sync.Mutex

func main() {
	log.SetFlags(0)
	log.SetPrefix("mutants: ")
	runFilter := flag.String("run", "", "run only the mutants whose file name matches `regexp`")
	jobs := flag.Int("j", 1, "run `N` mutants in parallel")
	verbose := flag.Bool("v", false, "stream the output of go test while it runs")
	list := flag.Bool("list", false, "list the mutants with their descriptions and packages; run nothing")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./mutants [-run regexp] [-j N] [-v] [-list]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 || *jobs < 1 {
		flag.Usage()
		os.Exit(2)
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
		for _, m := range selected {
			pkgs, err := m.packagesIn(root)
			fmt.Printf("%s  %s\n", m.file, m.desc)
			if err != nil {
				fmt.Printf("    packages: ? (%v)\n", err)
			} else {
				fmt.Printf("    packages: %s\n", strings.Join(pkgs, " "))
			}
		}
		return
	}
	os.Exit(runAll(root, selected, *jobs, *verbose))
}

// runAll runs the mutants on jobs workers, reports each as it finishes and
// returns the exit status. An interrupt stops the run; every scratch copy is
// removed before runAll returns.
func runAll(root string, mutants []*mutant, jobs int, verbose bool) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second interrupt kills the runner outright
	}()

	files, err := listFiles(root)
	if err != nil {
		log.Fatal(err)
	}

	work := make(chan *mutant)
	results := make(chan result)
	go func() {
		defer close(work)
		for _, m := range mutants {
			select {
			case work <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range min(jobs, len(mutants)) {
		wg.Go(func() {
			for m := range work {
				var stream io.Writer
				if verbose {
					prefix := ""
					if jobs > 1 {
						prefix = m.file + ": "
					}
					stream = &lineWriter{prefix: prefix}
				}
				results <- runMutant(ctx, root, files, m, stream)
			}
		})
	}
	go func() {
		wg.Wait()
		close(results)
	}()

	var counts [interrupted + 1]int
	for r := range results {
		counts[r.outcome]++
		if r.outcome != interrupted {
			r.report()
		}
	}
	fmt.Printf("mutants: %d caught, %d survived, %d broken\n", counts[caught], counts[survived], counts[broken])
	switch {
	case ctx.Err() != nil:
		fmt.Println("mutants: interrupted")
		return 130
	case counts[survived] > 0 || counts[broken] > 0:
		return 1
	}
	return 0
}

// A mutant is one catalogue entry.
type mutant struct {
	file     string   // base name of the patch file
	path     string   // absolute path of the patch file
	desc     string   // one-line description of the bug it re-creates
	packages []string // from the Packages: header; nil if there is none
	touched  []string // slash-separated, repository-relative paths the diff changes
}

// loadCatalogue parses every *.patch file in dir, sorted by file name. A
// missing directory is an empty catalogue.
func loadCatalogue(dir string) ([]*mutant, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.patch"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	var mutants []*mutant
	for _, p := range paths {
		m, err := parseMutant(p)
		if err != nil {
			return nil, err
		}
		mutants = append(mutants, m)
	}
	return mutants, nil
}

// parseMutant reads a patch file: the free-text header before the diff gives
// the description and the optional Packages: line, and the file headers of
// the diff give the paths it touches.
func parseMutant(file string) (*mutant, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	m := &mutant{file: filepath.Base(file), path: file}
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	inHeader := true
	for i, line := range lines {
		// A "--- " line is a file header only when "+++ " follows it; inside
		// a hunk it may be a removed line such as an SQL comment.
		fileHeader := strings.HasPrefix(line, "--- ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "+++ ")
		if strings.HasPrefix(line, "diff ") || fileHeader {
			inHeader = false
		}
		switch {
		case inHeader:
			if v, ok := strings.CutPrefix(line, "Packages:"); ok {
				m.packages = strings.Fields(v)
			} else if m.desc == "" {
				m.desc = strings.TrimSpace(line)
			}
		case fileHeader:
			p := diffPath(lines[i+1][4:], "b/")
			if p == "" { // a deleted file
				p = diffPath(line[4:], "a/")
			}
			if p != "" && !slices.Contains(m.touched, p) {
				m.touched = append(m.touched, p)
			}
		}
	}
	if m.desc == "" {
		m.desc = "(no description)"
	}
	if len(m.touched) == 0 {
		return nil, fmt.Errorf("%s: no diff found", file)
	}
	return m, nil
}

// diffPath returns the path named in a ---/+++ file header with prefix
// removed, or "" for /dev/null.
func diffPath(s, prefix string) string {
	s, _, _ = strings.Cut(s, "\t") // drop a timestamp
	if u, err := strconv.Unquote(s); err == nil {
		s = u // git quotes unusual names C-style
	}
	if s == "/dev/null" {
		return ""
	}
	return strings.TrimPrefix(s, prefix)
}

// packagesIn returns the packages whose tests judge the mutant: the
// Packages: header, or else, for each touched file, the nearest enclosing
// directory of root that holds a non-test .go file.
func (m *mutant) packagesIn(root string) ([]string, error) {
	if len(m.packages) > 0 {
		return m.packages, nil
	}
	var pkgs []string
	for _, p := range m.touched {
		for dir := path.Dir(p); ; dir = path.Dir(dir) {
			if hasGoSource(filepath.Join(root, filepath.FromSlash(dir))) {
				pkg := "./" + dir
				if dir == "." {
					pkg = "."
				}
				if !slices.Contains(pkgs, pkg) {
					pkgs = append(pkgs, pkg)
				}
				break
			}
			if dir == "." || dir == "/" || dir == ".." {
				break
			}
		}
	}
	if len(pkgs) == 0 {
		return nil, errors.New("no Go package encloses the files the diff touches; add a Packages: header")
	}
	return pkgs, nil
}

// hasGoSource reports whether dir directly holds a non-test .go file.
func hasGoSource(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		name := e.Name()
		if e.Type().IsRegular() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			return true
		}
	}
	return false
}

// outcome is the verdict on one mutant.
type outcome int

const (
	caught      outcome = iota // the tests failed: good
	survived                   // the tests passed: the suite misses the bug
	broken                     // the patch does not apply or does not build
	interrupted                // the run was interrupted; no verdict
)

// A result is the verdict on one mutant and the evidence for it.
type result struct {
	m       *mutant
	outcome outcome
	reason  string // why the mutant is broken
	output  []byte // output of git apply or go test
	elapsed time.Duration
}

// runMutant applies m to a scratch copy of the repository's files and runs
// its packages' tests there. Output is copied to stream if it is not nil.
func runMutant(ctx context.Context, root string, files []string, m *mutant, stream io.Writer) (r result) {
	start := time.Now()
	r = result{m: m, outcome: broken}
	defer func() {
		r.elapsed = time.Since(start)
		if ctx.Err() != nil {
			r.outcome = interrupted
		}
	}()

	scratch, err := os.MkdirTemp("", "mutant-*")
	if err != nil {
		r.reason = err.Error()
		return r
	}
	defer os.RemoveAll(scratch)
	if err := copyFiles(root, scratch, files); err != nil {
		r.reason = "copying the repository: " + err.Error()
		return r
	}

	r.output, err = command(ctx, scratch, stream, "git", "apply", "--whitespace=nowarn", m.path)
	if err != nil {
		r.reason = "the patch does not apply: " + err.Error()
		return r
	}
	pkgs, err := m.packagesIn(scratch)
	if err != nil {
		r.reason = err.Error()
		return r
	}
	args := append([]string{"test", "-count=1", "-timeout", "10m"}, pkgs...)
	r.output, err = command(ctx, scratch, stream, "go", args...)
	var exit *exec.ExitError
	switch {
	case bytes.Contains(r.output, []byte("[build failed]")) || bytes.Contains(r.output, []byte("setup failed")):
		r.reason = "go test could not build or load the packages"
	case err == nil:
		r.outcome = survived
	case errors.As(err, &exit):
		r.outcome = caught
	default:
		r.reason = err.Error()
	}
	return r
}

// command runs name with args in dir and returns its combined output, which
// is also copied to stream if that is not nil. On cancellation the process
// and its children are interrupted, and killed once the process has exited
// or ten seconds later.
func command(ctx context.Context, dir string, stream io.Writer, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	// Keep git from finding a repository above the scratch directory, in
	// which git apply would silently skip paths outside the current one.
	cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir))
	newGroup(cmd)
	cmd.Cancel = func() error { return signalGroup(cmd, syscall.SIGINT) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	var w io.Writer = &out
	if stream != nil {
		w = io.MultiWriter(&out, stream)
	}
	cmd.Stdout, cmd.Stderr = w, w
	err := cmd.Run()
	if ctx.Err() != nil && cmd.Process != nil {
		signalGroup(cmd, syscall.SIGKILL) // leave no test binary behind
	}
	if lw, ok := stream.(*lineWriter); ok {
		lw.flush()
	}
	return out.Bytes(), err
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

// report prints the verdict line for r and, unless the mutant was caught,
// the tail of the output that explains it.
func (r result) report() {
	stdout.Lock()
	defer stdout.Unlock()
	secs := fmt.Sprintf("(%.1fs)", r.elapsed.Seconds())
	switch r.outcome {
	case caught:
		fmt.Printf("caught   %s  %s  %s\n", r.m.file, secs, r.m.desc)
		return
	case survived:
		fmt.Printf("SURVIVED %s  %s  %s\n", r.m.file, secs, r.m.desc)
	case broken:
		fmt.Printf("BROKEN   %s  %s  %s: %s\n", r.m.file, secs, r.m.desc, r.reason)
	}
	lines := strings.Split(strings.TrimRight(string(r.output), "\n"), "\n")
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	for _, line := range lines {
		if line != "" {
			fmt.Printf("    %s\n", line)
		}
	}
}

// A lineWriter copies output to standard output a whole line at a time,
// each line behind a prefix, so that parallel mutants' output interleaves
// only at line boundaries.
type lineWriter struct {
	prefix string
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
		stdout.Lock()
		fmt.Printf("%s%s\n", w.prefix, w.buf[:i])
		stdout.Unlock()
		w.buf = w.buf[i+1:]
	}
}

// flush writes out a final unterminated line, if any.
func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.Write([]byte("\n"))
	}
}
