package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// guaranteesFile is the file, relative to the repository root, whose rows
// name the tests that prove each promise and the mutants that break it;
// the pages under docsDir hold more rows, each in its section headed
// guaranteedHeading (up to the next "## " heading).
const (
	guaranteesFile    = "GUARANTEES.md"
	docsDir           = "docs"
	guaranteedHeading = "## What is guaranteed"
)

var (
	// listedTest is a test named in a row's tests column: dir:TestName,
	// optionally with /subtests.
	listedTest = regexp.MustCompile(`^([^\s:]+):((?:Test|Example|Fuzz)[\p{L}\p{N}_]*)(?:/\S*)?$`)
	// listedMutant is a catalogue number in a row's mutants column.
	listedMutant = regexp.MustCompile(`^[0-9]{3,4}$`)
	// catalogueNumber is the number a catalogue file's name starts with.
	catalogueNumber = regexp.MustCompile(`^([0-9]{3,4})-`)
)

// A proof is what the guarantees tables say proves the promises a mutant
// breaks: for each directory (as rows name it: "." for the root package),
// the top-level tests that its rows list. A row that names a subtest
// (claim:TestAcquire/postgres) lists its top-level test.
type proof map[string][]string

// readGuarantees reads root/GUARANTEES.md (every table) and the "What is
// guaranteed" sections of root/docs/*.md, and returns, for each catalogue
// number that a row names, the tests of all the rows that name it. A
// missing file or directory names no test.
func readGuarantees(root string) (map[string]proof, error) {
	out := map[string]proof{}
	data, err := os.ReadFile(filepath.Join(root, guaranteesFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	addGuarantees(out, string(data), false)
	pages, err := filepath.Glob(filepath.Join(root, docsDir, "*.md"))
	if err != nil {
		return nil, err
	}
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			return nil, err
		}
		addGuarantees(out, string(data), true)
	}
	return out, nil
}

// parseGuarantees reads the table rows of a GUARANTEES.md:
// | promise | `dir:TestName`, … | NNN, … or — | engines |.
func parseGuarantees(text string) map[string]proof {
	out := map[string]proof{}
	addGuarantees(out, text, false)
	return out
}

// addGuarantees adds to out the rows of text: every table row of it, or,
// for a docs page (page), only those of its "What is guaranteed" section.
func addGuarantees(out map[string]proof, text string, page bool) {
	inTables := !page
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if page && strings.HasPrefix(line, "## ") {
			inTables = line == guaranteedHeading
			continue
		}
		if !inTables || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := splitRow(line)
		if len(cells) != 4 && len(cells) != 5 {
			continue
		}
		// The tests column, and the edges column of a table that has
		// one: the tests that try the promise at its edges judge its
		// mutants too.
		listed := cells[1]
		if len(cells) == 5 {
			listed += " " + cells[4]
		}
		type test struct{ dir, name string }
		var tests []test
		for _, span := range strings.Split(listed, "`")[1:] {
			if m := listedTest.FindStringSubmatch(strings.TrimSpace(span)); m != nil {
				tests = append(tests, test{m[1], m[2]})
			}
		}
		for _, n := range strings.FieldsFunc(cells[2], func(r rune) bool { return r == ',' || r == ' ' }) {
			if !listedMutant.MatchString(n) {
				continue
			}
			p := out[n]
			if p == nil {
				p = proof{}
				out[n] = p
			}
			for _, t := range tests {
				if !slices.Contains(p[t.dir], t.name) {
					p[t.dir] = append(p[t.dir], t.name)
				}
			}
		}
	}
	for _, p := range out {
		for _, names := range p {
			slices.Sort(names)
		}
	}
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

// number returns the catalogue number a mutant's file name starts with, or
// "" if it has none.
func (m *mutant) number() string {
	if s := catalogueNumber.FindStringSubmatch(m.file); s != nil {
		return s[1]
	}
	return ""
}
