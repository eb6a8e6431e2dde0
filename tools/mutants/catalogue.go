package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A mutant is one catalogue entry.
type mutant struct {
	file     string   // base name of the patch file
	path     string   // absolute path of the patch file
	desc     string   // one-line description of the bug it re-creates
	packages []string // from the Packages: header; nil if there is none
	touched  []string // slash-separated, repository-relative paths the diff changes
}

// engines are the names of the engines: the directories of their SQL
// (claim/sql/postgres/…) and the subtests that testdb.Each runs.
var engines = []string{"sqlite", "postgres"}

// otherEngine returns the engine whose subtests cannot see the mutant: when
// every file the diff changes is one engine's SQL (…/sql/postgres/…), the
// other engine never runs that SQL, so a failure of its subtests is no
// evidence. Otherwise it returns "".
func (m *mutant) otherEngine() string {
	only := ""
	for _, p := range m.touched {
		parts := strings.Split(p, "/")
		engine := ""
		for i := 0; i+1 < len(parts); i++ {
			if parts[i] == "sql" && slices.Contains(engines, parts[i+1]) {
				engine = parts[i+1]
			}
		}
		if engine == "" || (only != "" && engine != only) {
			return ""
		}
		only = engine
	}
	for _, e := range engines {
		if only != "" && e != only {
			return e
		}
	}
	return ""
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

// packagesIn returns the packages whose tests judge the mutant, as go test
// patterns: the Packages: header, or else, for each touched file, the
// nearest enclosing directory of root that holds a non-test .go file.
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

// A module names the main module of the repository, to turn package
// patterns into import paths and import paths into directories.
type module struct {
	root string // absolute directory of go.mod
	path string // module path
}

// readModule reads the module path from root/go.mod.
func readModule(root string) (module, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return module{}, err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			v = strings.TrimSpace(v)
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
			return module{root: root, path: v}, nil
		}
	}
	return module{}, errors.New("go.mod has no module line")
}

// importPaths resolves go test patterns to import paths. "." and "./dir"
// are resolved directly; anything else (a pattern with "...", an import
// path) is asked of go list.
func (mod module) importPaths(patterns []string) ([]string, error) {
	var out []string
	for _, p := range patterns {
		if (p == "." || strings.HasPrefix(p, "./")) && !strings.Contains(p, "...") {
			rel := path.Clean(p)
			ip := mod.path
			if rel != "." {
				ip += "/" + rel
			}
			out = append(out, ip)
			continue
		}
		cmd := exec.Command("go", "list", "-e", "-f", "{{.ImportPath}}", p)
		cmd.Dir = mod.root
		got, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go list %s: %w", p, err)
		}
		out = append(out, strings.Fields(string(got))...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// dir returns the directory of importPath relative to the module root, as
// GUARANTEES.md names it: "." for the root package.
func (mod module) dir(importPath string) string {
	if importPath == mod.path {
		return "."
	}
	if rel, ok := strings.CutPrefix(importPath, mod.path+"/"); ok {
		return rel
	}
	return importPath
}
