package racefree_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestImportsPointDown checks the layers docs/contributing.md draws ("Where
// the code lives"): every package of the library, the binary and its
// server sits in one row of the table, and imports only packages of its
// own row or of rows below it. The test harnesses and tools (the first
// table's audiences) are not layered. A package missing from the table
// fails, so that a new one is placed before it grows.
func TestImportsPointDown(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/contributing.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "| layer | packages | what it may import |")
	if !ok {
		t.Fatal(`docs/contributing.md has no "| layer | packages | what it may import |" table`)
	}
	// Rows from the top (the highest layer) down; a row's rank is its
	// distance from the bottom.
	var rows [][]string
	for _, line := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(line, "|")
		pkgs, _, _ := strings.Cut(cells[2], " (") // tenant's row lists its functions in parentheses
		var row []string
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(pkgs, -1) {
			row = append(row, m[1])
		}
		rows = append(rows, row)
	}
	const module = "github.com/racefree/racefree"
	rank := map[string]int{}
	for i, pkgs := range rows {
		for _, p := range pkgs {
			path := module
			if p != "." {
				path += "/" + p
			}
			rank[path] = len(rows) - i
		}
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	unlayered := regexp.MustCompile(`^` + regexp.QuoteMeta(module) + `/(internal/testing|tools|bench|browser|clients|deploy)(/|$)`)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := fields[0]
		if unlayered.MatchString(pkg) {
			continue
		}
		r, ok := rank[pkg]
		if !ok {
			t.Errorf("%s is in no row of docs/contributing.md's layer table", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if ri, ok := rank[imp]; ok && ri > r {
				t.Errorf("%s imports %s, a layer above its own", pkg, imp)
			}
		}
	}
}
