package racefree_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A guarantee is one row of a guarantees table: of GUARANTEES.md, or of
// the "What is guaranteed" section of a docs/*.md page.
type guarantee struct {
	file    string // GUARANTEES.md or docs/<page>.md
	line    int    // 1-based line number in file
	section string // the ## (or, on a docs page, ###) heading above the table
	promise string
	tests   []string // dir:TestName[/subtest], as written
	mutants []string // three-digit catalogue numbers
	engines string
	// edges is the row's boundary matrix, when its table has a fifth
	// column "edges": each applicable dimension (edgeDimensions) with the
	// tests that try the promise at that edge; empty when none applies ("—").
	edges []edgeCell
}

// edgeCell is one cell of a row's boundary matrix: a dimension and the
// tests (dir:TestName) that try the promise at its edge.
type edgeCell struct {
	dimension string
	tests     []string
}

// edgeDimensions are the dimensions of a boundary matrix, as
// docs/contributing.md ("The boundary matrix") defines them.
var edgeDimensions = []string{"bounds", "isolation", "mac", "retry", "tx", "cancel", "optional"}

var (
	// testRef is a test named in the tests column: dir:TestName, where
	// dir is relative to the repository root, optionally with /subtests.
	testRef = regexp.MustCompile(`^([^\s:]+):((?:Test|Example|Fuzz)[\p{L}\p{N}_]*)(/\S*)?$`)
	// backticked finds the `…` spans of a cell.
	backticked = regexp.MustCompile("`([^`]*)`")
	// mutantNumber is a catalogue number in the mutants column.
	mutantNumber = regexp.MustCompile(`^[0-9]{3,4}$`)
	// indexEntry is a page's entry in GUARANTEES.md's index, with the
	// count of its rows.
	indexEntry = regexp.MustCompile(`(?m)^- \[(docs/[a-z]+\.md)\]\(docs/[a-z]+\.md#what-is-guaranteed\):.*\((\d+) rows\)$`)
	// patchNumber is the number a catalogue file name starts with.
	patchNumber = regexp.MustCompile(`^([0-9]{3,4})-.*\.patch$`)
)

// guaranteedHeading heads the section of a docs page that holds its
// guarantees tables, up to the next "## " heading.
const guaranteedHeading = "## What is guaranteed"

// engineValues are the values the engines column may take.
var engineValues = []string{"both", "sqlite", "postgres", "—"}

// TestGuaranteesAreProven checks the guarantees tables (GUARANTEES.md and
// the "What is guaranteed" sections of docs/*.md) against the code: every row
// names at least one test, every named test function exists in its
// directory's _test.go files, every named mutant exists in
// tools/mutants/catalogue, and every engines value is one of the documented ones.
// The subtest every_catalogue_mutant_has_a_row checks the converse: no
// mutant in the catalogue is left without a promise it re-creates the
// breach of.
func TestGuaranteesAreProven(t *testing.T) {
	t.Parallel()
	rows, problems := loadGuarantees(".")
	for _, p := range problems {
		t.Error(p)
	}
	if len(rows) == 0 {
		t.Fatal("GUARANTEES.md and docs/*.md have no rows")
	}
	patches, err := filepath.Glob(filepath.Join("tools", "mutants", "catalogue", "*.patch"))
	if err != nil {
		t.Fatal(err)
	}
	catalogue := map[string][]string{} // number → file names
	for _, p := range patches {
		base := filepath.Base(p)
		m := patchNumber.FindStringSubmatch(base)
		if m == nil {
			t.Errorf("tools/mutants/catalogue/%s: the name does not start with a three-digit number and a dash", base)
			continue
		}
		catalogue[m[1]] = append(catalogue[m[1]], base)
	}

	t.Run("rows", func(t *testing.T) {
		for _, p := range checkRows(rows, catalogue) {
			t.Error(p)
		}
	})

	// The index of GUARANTEES.md says how many rows each page holds: a
	// reader judges a page's coverage by it, so it must be the count.
	t.Run("the_index_counts_each_pages_rows", func(t *testing.T) {
		data, err := os.ReadFile("GUARANTEES.md")
		if err != nil {
			t.Fatal(err)
		}
		count := map[string]int{}
		for _, g := range rows {
			if g.file != "GUARANTEES.md" {
				count[g.file]++
			}
		}
		listed := map[string]bool{}
		for _, m := range indexEntry.FindAllStringSubmatch(string(data), -1) {
			listed[m[1]] = true
			if n, _ := strconv.Atoi(m[2]); n != count[m[1]] {
				t.Errorf("GUARANTEES.md says %s holds %d rows; it holds %d", m[1], n, count[m[1]])
			}
		}
		for page := range count {
			if !listed[page] {
				t.Errorf("GUARANTEES.md lists no count of %s's rows", page)
			}
		}
	})

	// Other branches add mutants and rows at once; until they merge this
	// subtest is the one that says which mutant still lacks its promise.
	t.Run("every_catalogue_mutant_has_a_row", func(t *testing.T) {
		listed := map[string]bool{}
		for _, g := range rows {
			for _, n := range g.mutants {
				listed[n] = true
			}
		}
		for _, p := range patches {
			base := filepath.Base(p)
			if m := patchNumber.FindStringSubmatch(base); m != nil && !listed[m[1]] {
				t.Errorf("tools/mutants/catalogue/%s is in no row of GUARANTEES.md or docs/*.md", base)
			}
		}
	})
}

// checkRows returns what is wrong with rows: a row without a test, a test
// that is not dir:TestName or whose function does not exist, a mutant
// number without a patch in catalogue (number → file names), an engines
// value that is not one of engineValues.
func checkRows(rows []guarantee, catalogue map[string][]string) []string {
	var problems []string
	funcs := testFuncs{}
	for _, g := range rows {
		at := fmt.Sprintf("%s:%d (%s)", g.file, g.line, g.section)
		if len(g.tests) == 0 {
			problems = append(problems, fmt.Sprintf("%s: %q names no test", at, g.promise))
		}
		for _, ref := range g.tests {
			m := testRef.FindStringSubmatch(ref)
			if m == nil {
				problems = append(problems, fmt.Sprintf("%s: %q is not dir:TestName", at, ref))
				continue
			}
			if err := funcs.check(m[1], m[2]); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %s: %v", at, ref, err))
			}
		}
		for _, e := range g.edges {
			for _, ref := range e.tests {
				m := testRef.FindStringSubmatch(ref)
				if m == nil {
					problems = append(problems, fmt.Sprintf("%s: edges %s: %q is not dir:TestName", at, e.dimension, ref))
					continue
				}
				if err := funcs.check(m[1], m[2]); err != nil {
					problems = append(problems, fmt.Sprintf("%s: edges %s: %s: %v", at, e.dimension, ref, err))
				}
			}
		}
		for _, n := range g.mutants {
			if len(catalogue[n]) == 0 {
				problems = append(problems, fmt.Sprintf("%s: mutant %s: no tools/mutants/catalogue/%s-*.patch", at, n, n))
			}
		}
		if !validEngines(g.engines) {
			problems = append(problems, fmt.Sprintf("%s: engines %q, want one of %s, optionally with a (note)", at, g.engines, strings.Join(engineValues, ", ")))
		}
	}
	return problems
}

// validEngines reports whether an engines cell is one of engineValues,
// optionally followed by a note in parentheses: "both (the lock race is
// PostgreSQL's)".
func validEngines(cell string) bool {
	value, note, _ := strings.Cut(cell, " ")
	note = strings.TrimSpace(note)
	return slices.Contains(engineValues, value) &&
		(note == "" || strings.HasPrefix(note, "(") && strings.HasSuffix(note, ")"))
}

// loadGuarantees reads the rows of root/GUARANTEES.md and of the "What is
// guaranteed" sections of root/docs/*.md, and returns them with the
// problems found in their form.
func loadGuarantees(root string) ([]guarantee, []string) {
	rows, problems := parseGuarantees(filepath.Join(root, "GUARANTEES.md"), "GUARANTEES.md", false)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return rows, append(problems, err.Error())
	}
	for _, p := range pages {
		r, pr := parseGuarantees(p, "docs/"+filepath.Base(p), true)
		rows, problems = append(rows, r...), append(problems, pr...)
	}
	return rows, problems
}

// parseGuarantees reads the table rows of the file at path, named name in
// the problems, and returns them with the problems found in their form:
// every table of a GUARANTEES.md, or, of a docs page (page), the tables of
// its "What is guaranteed" section alone.
func parseGuarantees(path, name string, page bool) ([]guarantee, []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, []string{err.Error()}
	}
	var (
		rows     []guarantee
		problems []string
		section  string
		inTables = !page
		columns  = 4 // of the current table: 5 with the edges column
	)
	if page {
		section = strings.TrimSuffix(filepath.Base(path), ".md")
	}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if h, ok := strings.CutPrefix(line, "## "); ok {
			if page {
				inTables = line == guaranteedHeading
			} else {
				section = h
			}
			continue
		}
		if h, ok := strings.CutPrefix(line, "### "); ok && page && inTables {
			section = h
			continue
		}
		if !inTables || !strings.HasPrefix(line, "|") {
			continue
		}
		at := fmt.Sprintf("%s:%d", name, i+1)
		cells := splitRow(line)
		if cells[0] == "promise" { // a table's header: with or without the edges column
			columns = 4
			if len(cells) == 5 && cells[4] == "edges" {
				columns = 5
			}
		}
		if len(cells) != columns {
			problems = append(problems, fmt.Sprintf("%s: %d cells, want %d (| promise | tests | mutants | engines |%s)", at, len(cells), columns, map[bool]string{true: " edges |"}[columns == 5]))
			continue
		}
		if cells[0] == "promise" || isSeparator(cells) {
			continue
		}
		g := guarantee{file: name, line: i + 1, section: section, promise: cells[0], engines: cells[3]}
		if columns == 5 {
			var pr []string
			g.edges, pr = parseEdges(cells[4])
			for _, p := range pr {
				problems = append(problems, at+": "+p)
			}
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			g.tests = append(g.tests, strings.TrimSpace(m[1]))
		}
		for _, n := range strings.FieldsFunc(cells[2], func(r rune) bool { return r == ',' || r == ' ' }) {
			switch {
			case mutantNumber.MatchString(n):
				g.mutants = append(g.mutants, n)
			case n != "—":
				problems = append(problems, fmt.Sprintf("%s: mutant %q is not a three-digit catalogue number or —", at, n))
			}
		}
		rows = append(rows, g)
	}
	return rows, problems
}

// parseEdges reads a row's edges cell: "— (why)" when no dimension
// applies, saying why, or cells separated by ";", each a dimension of
// edgeDimensions, a colon and the backticked tests that try it ("bounds:
// `seq:TestKeyedEdges`; isolation: `seq:TestTenantsAreIsolated`"). It
// returns the cells and the problems of its form: a bare "—" (a matrix
// nobody can tell judged from skipped), an unknown or repeated dimension,
// a dimension that names no test (a missing cell of the matrix).
func parseEdges(cell string) ([]edgeCell, []string) {
	if cell == "—" {
		return nil, []string{"edges —: say why no dimension applies, as — (why)"}
	}
	if why, ok := strings.CutPrefix(cell, "— ("); ok {
		if !strings.HasSuffix(why, ")") || strings.TrimSpace(strings.TrimSuffix(why, ")")) == "" {
			return nil, []string{fmt.Sprintf("edges %q: want — (why no dimension applies)", cell)}
		}
		return nil, nil
	}
	var (
		cells    []edgeCell
		problems []string
		seen     = map[string]bool{}
	)
	for _, part := range strings.Split(cell, ";") {
		dim, refs, ok := strings.Cut(part, ":")
		dim = strings.TrimSpace(dim)
		if !ok || !slices.Contains(edgeDimensions, dim) {
			problems = append(problems, fmt.Sprintf("edges %q: want a dimension (%s), a colon and its tests", strings.TrimSpace(part), strings.Join(edgeDimensions, ", ")))
			continue
		}
		if seen[dim] {
			problems = append(problems, fmt.Sprintf("edges %s: named twice", dim))
		}
		seen[dim] = true
		e := edgeCell{dimension: dim}
		for _, m := range backticked.FindAllStringSubmatch(refs, -1) {
			e.tests = append(e.tests, strings.TrimSpace(m[1]))
		}
		if len(e.tests) == 0 {
			problems = append(problems, fmt.Sprintf("edges %s: names no test (a missing cell of the matrix)", dim))
		}
		cells = append(cells, e)
	}
	return cells, problems
}

// splitRow splits a Markdown table row into its trimmed cells; a | inside
// backticks belongs to the cell.
func splitRow(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var cells []string
	var cell strings.Builder
	code := false
	for _, r := range line {
		switch {
		case r == '`':
			code = !code
		case r == '|' && !code:
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
			continue
		}
		cell.WriteRune(r)
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

// isSeparator reports whether cells are a table's |---|---| line.
func isSeparator(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(c, ":-") != "" || c == "" {
			return false
		}
	}
	return true
}

// testFuncs caches, per directory, the names of the top-level functions
// declared in its _test.go files.
type testFuncs map[string]map[string]bool

// check returns an error unless dir, relative to the repository root, has a
// _test.go file that declares func name(.
func (tf testFuncs) check(dir, name string) error {
	clean := filepath.Clean(filepath.FromSlash(dir))
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%s is not a directory inside the repository", dir)
	}
	funcs, ok := tf[clean]
	if !ok {
		files, err := filepath.Glob(filepath.Join(clean, "*_test.go"))
		if err != nil {
			return err
		}
		if len(files) == 0 {
			return fmt.Errorf("%s has no _test.go files", dir)
		}
		funcs = map[string]bool{}
		fset := token.NewFileSet()
		for _, f := range files {
			file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, d := range file.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
					funcs[fd.Name.Name] = true
				}
			}
		}
		tf[clean] = funcs
	}
	if !funcs[name] {
		return fmt.Errorf("no func %s( in %s/*_test.go", name, dir)
	}
	return nil
}

// TestGuaranteesCheckerRejects feeds the checker a table with one fault per
// row and checks that it names each.
func TestGuaranteesCheckerRejects(t *testing.T) {
	t.Parallel()
	page := strings.Join([]string{
		"## claim",
		"| promise | tests | mutants | engines |",
		"|---|---|---|---|",
		"| fine, a subtest named | `tools/mutants:TestRunnerVerdicts/postgres`, `.:TestGuaranteesAreProven` | 010 | both |",
		"| fine, engines with a note | `.:TestGuaranteesAreProven` | — | both (the race is PostgreSQL's) |",
		"| no test | — | 010 | both |",
		"| no such test | `tools/mutants:TestNoSuchThing` | — | both |",
		"| no such directory | `nowhere:TestGuaranteesAreProven` | — | — |",
		"| outside the repository | `../x:TestGuaranteesAreProven` | — | — |",
		"| not dir:TestName | `TestGuaranteesAreProven` | — | — |",
		"| no such mutant | `.:TestGuaranteesAreProven` | 999 | — |",
		"| not a mutant number | `.:TestGuaranteesAreProven` | 10 | — |",
		"| bad engines | `.:TestGuaranteesAreProven` | — | mysql |",
		"| engines with a note not in parentheses | `.:TestGuaranteesAreProven` | — | both, mostly |",
		"| three cells | `.:TestGuaranteesAreProven` | — |",
	}, "\n")
	path := filepath.Join(t.TempDir(), "GUARANTEES.md")
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, problems := parseGuarantees(path, "GUARANTEES.md", false)
	problems = append(problems, checkRows(rows, map[string][]string{"010": {"010-claim-do-nothing.patch"}})...)
	for _, want := range []string{
		`:6 (claim): "no test" names no test`,
		`:7 (claim): tools/mutants:TestNoSuchThing: no func TestNoSuchThing( in tools/mutants/*_test.go`,
		`:8 (claim): nowhere:TestGuaranteesAreProven: nowhere has no _test.go files`,
		`:9 (claim): ../x:TestGuaranteesAreProven: ../x is not a directory inside the repository`,
		`:10 (claim): "TestGuaranteesAreProven" is not dir:TestName`,
		`:11 (claim): mutant 999: no tools/mutants/catalogue/999-*.patch`,
		`:12: mutant "10" is not a three-digit catalogue number or —`,
		`:13 (claim): engines "mysql", want one of`,
		`:14 (claim): engines "both, mostly", want one of`,
		`:15: 3 cells, want 4`,
	} {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no problem reported containing %q", want)
		}
	}
	if got, want := len(problems), 10; got != want {
		t.Errorf("%d problems, want %d:\n%s", got, want, strings.Join(problems, "\n"))
	}
}

// TestGuaranteesOnDocsPages checks that the checker reads a docs page's
// tables in its "What is guaranteed" section, and only there, and names
// the page, its line and the package heading of a faulty row.
func TestGuaranteesOnDocsPages(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for name, text := range map[string]string{
		"GUARANTEES.md": "# Guarantees\n\nThe tables are on the docs pages.\n",
		"docs/claims.md": strings.Join([]string{
			"# Claims",
			"| figure | SQLite | PostgreSQL |",
			"|---|---|---|",
			"| a table of figures, not of guarantees | 1 | 2 |",
			"## What is guaranteed",
			"| promise | tests | mutants | engines |",
			"|---|---|---|---|",
			"| fine | `.:TestGuaranteesAreProven` | 010 | both |",
			"| no such mutant | `.:TestGuaranteesAreProven` | 999 | both |",
			"### server",
			"| promise | tests | mutants | engines |",
			"|---|---|---|---|",
			"| bad engines | `.:TestGuaranteesAreProven` | — | mysql |",
			"## Afterwards",
			"| another table | of | three |",
		}, "\n"),
	} {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rows, problems := loadGuarantees(root)
	if got, want := len(rows), 3; got != want {
		t.Errorf("%d rows, want %d: %v", got, want, rows)
	}
	problems = append(problems, checkRows(rows, map[string][]string{"010": {"010-claim-do-nothing.patch"}})...)
	for _, want := range []string{
		`docs/claims.md:9 (claims): mutant 999: no tools/mutants/catalogue/999-*.patch`,
		`docs/claims.md:13 (server): engines "mysql", want one of`,
	} {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no problem reported containing %q", want)
		}
	}
	if got, want := len(problems), 2; got != want {
		t.Errorf("%d problems, want %d:\n%s", got, want, strings.Join(problems, "\n"))
	}
}

// TestGuaranteesEdgesColumn checks the boundary matrix: a table whose
// header has a fifth column "edges" needs it on every row, each of its
// dimensions must be a known one and name tests that exist, and a table
// without it keeps four cells.
func TestGuaranteesEdgesColumn(t *testing.T) {
	t.Parallel()
	page := strings.Join([]string{
		"## What is guaranteed",
		"| promise | tests | mutants | engines | edges |",
		"|---|---|---|---|---|",
		"| fine | `.:TestGuaranteesAreProven` | — | both | bounds: `.:TestGuaranteesAreProven`; isolation: `.:TestGuaranteesCheckerRejects`, `.:TestGuaranteesAreProven` |",
		"| fine, no dimension applies | `.:TestGuaranteesAreProven` | — | both | — (a static list) |",
		"| no dimension, no reason | `.:TestGuaranteesAreProven` | — | both | — |",
		"| no dimension, an empty reason | `.:TestGuaranteesAreProven` | — | both | — ( ) |",
		"| unknown dimension | `.:TestGuaranteesAreProven` | — | both | speed: `.:TestGuaranteesAreProven` |",
		"| a dimension without a test | `.:TestGuaranteesAreProven` | — | both | bounds: `.:TestGuaranteesAreProven`; tx: — |",
		"| no such test | `.:TestGuaranteesAreProven` | — | both | cancel: `.:TestNoSuchEdge` |",
		"| twice | `.:TestGuaranteesAreProven` | — | both | mac: `.:TestGuaranteesAreProven`; mac: `.:TestGuaranteesAreProven` |",
		"| four cells in a table of five | `.:TestGuaranteesAreProven` | — | both |",
		"### another table",
		"| promise | tests | mutants | engines |",
		"|---|---|---|---|",
		"| fine, four cells again | `.:TestGuaranteesAreProven` | — | both |",
	}, "\n")
	path := filepath.Join(t.TempDir(), "edges.md")
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, problems := parseGuarantees(path, "docs/edges.md", true)
	problems = append(problems, checkRows(rows, nil)...)
	for _, want := range []string{
		`docs/edges.md:6: edges —: say why no dimension applies`,
		`docs/edges.md:7: edges "— ( )": want — (why no dimension applies)`,
		`docs/edges.md:8: edges "speed: ` + "`.:TestGuaranteesAreProven`" + `": want a dimension`,
		`docs/edges.md:9: edges tx: names no test`,
		`docs/edges.md:10 (edges): edges cancel: .:TestNoSuchEdge: no func TestNoSuchEdge(`,
		`docs/edges.md:11: edges mac: named twice`,
		`docs/edges.md:12: 4 cells, want 5`,
	} {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no problem reported containing %q", want)
		}
	}
	if got, want := len(problems), 7; got != want {
		t.Errorf("%d problems, want %d:\n%s", got, want, strings.Join(problems, "\n"))
	}
	if got := rows[0].edges; len(got) != 2 || got[1].dimension != "isolation" || len(got[1].tests) != 2 {
		t.Errorf("the first row's edges = %+v; want bounds and isolation (two tests)", got)
	}
	if got, want := len(rows), 9; got != want {
		t.Errorf("%d rows, want %d", got, want)
	}
}
