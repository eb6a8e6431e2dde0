package problem_test

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/racefree/racefree/internal/problem"
)

func TestEveryKindHasOneTitleAndOneStatus(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, k := range problem.Kinds() {
		if seen[k.Name] {
			t.Errorf("%s registered twice", k.Name)
		}
		seen[k.Name] = true
		if k.Title == "" || k.Status < 400 || k.Status > 599 || http.StatusText(k.Status) == "" {
			t.Errorf("%+v: want a title and a 4xx or 5xx status", k)
		}
		if got, ok := problem.Lookup(k.Name); !ok || got != k {
			t.Errorf("Lookup(%q) = %+v, %v", k.Name, got, ok)
		}
		// New keeps the registered title and status whatever its caller says.
		if p := problem.New(299, k.Name, "other", "d"); p.Status != k.Status || p.Title != k.Title || p.Type != "urn:racefree:problem:"+k.Name {
			t.Errorf("New(%q) = %+v, want %+v", k.Name, p, k)
		}
	}
}

// TestCallSitesUseRegisteredKinds reads every handler that writes a
// problem by name and checks that the name is registered with the status
// the call site gives.
func TestCallSitesUseRegisteredKinds(t *testing.T) {
	t.Parallel()
	call := regexp.MustCompile(`(?:writeProblem\(w|problem\.New\()\s*,?\s*http\.(Status\w+),\s*"([a-z-]+)"`)
	status := map[string]int{}
	for code := 100; code < 600; code++ {
		if text := http.StatusText(code); text != "" {
			status["Status"+strings.NewReplacer(" ", "", "-", "", "'", "").Replace(text)] = code
		}
	}
	status["StatusRequestEntityTooLarge"] = http.StatusRequestEntityTooLarge
	root := filepath.Join("..", "..")
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == ".git" || d.Name() == "mutants") {
			return fs.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			n++
			k, ok := problem.Lookup(m[2])
			if !ok {
				t.Errorf("%s: problem %q is not registered", path, m[2])
				continue
			}
			if got, known := status[m[1]]; !known || got != k.Status {
				t.Errorf("%s: problem %q written with %s, registered with %d", path, m[2], m[1], k.Status)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no call site found: the pattern is out of date")
	}
}

func TestUnavailableCarriesRetryAfter(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	problem.Write(rec, problem.Unavailable.New(""))
	if got, want := rec.Header().Get("Retry-After"), problem.RetryAfterSeconds; got != want {
		t.Fatalf("Retry-After %q, want %q", got, want)
	}
	if got, want := rec.Header().Get("Content-Type"), "application/problem+json"; got != want {
		t.Fatalf("Content-Type %q, want %q", got, want)
	}
}

// TestREADMEListsEveryKind keeps the documentation's table of problem
// types (docs/server.md, or wherever README.md and docs/*.md hold it) equal
// to the registry.
func TestREADMEListsEveryKind(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var readme []byte
	for _, f := range append([]string{filepath.Join("..", "..", "README.md")}, pages...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		readme = append(append(readme, data...), '\n')
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\| ([0-9]{3}) \\| ([^|(]+?) (?:\\(.*\\) )?\\|$")
	documented := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		k, ok := problem.Lookup(m[1])
		if !ok || k.Name != m[1] {
			t.Errorf("README lists %q, which is not registered", m[1])
			continue
		}
		documented[m[1]] = true
		if got := strconv.Itoa(k.Status) + " " + k.Title; got != m[2]+" "+m[3] {
			t.Errorf("README: %s is %s %s, registered as %s", m[1], m[2], m[3], got)
		}
	}
	for _, k := range problem.Kinds() {
		if !documented[k.Name] {
			t.Errorf("README does not list %s", k.Name)
		}
	}
}
