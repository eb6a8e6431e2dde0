package racefree_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	// mdLink is a Markdown link or image: [text](target) or ![alt](target).
	mdLink = regexp.MustCompile(`!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)\)`)
	// codeSpan is an inline code span, whose brackets are no link.
	codeSpan = regexp.MustCompile("`[^`]*`")
	// mdHeading is an ATX heading.
	mdHeading = regexp.MustCompile(`^#{1,6} (.*\S)\s*$`)
	// urlScheme starts a link that leaves the repository (https:, mailto:).
	urlScheme = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
)

// TestDocsLinksResolve checks that every relative link of README.md,
// GUARANTEES.md and docs/*.md names a file of the repository and, with a
// #fragment, a heading of that file (GitHub's anchors); and that every docs
// page is linked from README.md, so that a newcomer can find it.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{"README.md", "GUARANTEES.md"}, pages...)
	anchors := map[string]map[string]bool{}
	fromREADME := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range proseLines(string(data)) {
			if line == "" {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if urlScheme.MatchString(target) {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				dest := f
				if path != "" {
					dest = filepath.Join(filepath.Dir(f), filepath.FromSlash(path))
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: %s: no file %s", f, i+1, target, dest)
					continue
				}
				if f == "README.md" {
					fromREADME[filepath.ToSlash(dest)] = true
				}
				if frag == "" {
					continue
				}
				if anchors[dest] == nil {
					anchors[dest] = headingAnchors(t, dest)
				}
				if !anchors[dest][frag] {
					t.Errorf("%s:%d: %s: %s has no heading #%s", f, i+1, target, dest, frag)
				}
			}
		}
	}
	for _, p := range pages {
		if !fromREADME[filepath.ToSlash(p)] {
			t.Errorf("README.md links to no %s", filepath.ToSlash(p))
		}
	}
}

// proseLines returns the lines of a Markdown text with those of fenced code
// blocks (fences included) blanked, so that a line's index is its line
// number less one.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	code := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			code = !code
			lines[i] = ""
			continue
		}
		if code {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives the headings of the
// Markdown file at path: lower case, punctuation dropped, spaces as
// hyphens, and -1, -2 … after a repeated one.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	if !strings.HasSuffix(path, ".md") {
		return out
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, line := range proseLines(string(data)) {
		m := mdHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := anchor(m[1])
		if n, ok := seen[a]; ok {
			seen[a] = n + 1
			a += "-" + strconv.Itoa(n+1)
		} else {
			seen[a] = 0
		}
		out[a] = true
	}
	return out
}

// anchor is GitHub's anchor of a heading's text.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestAnchor checks anchor against anchors GitHub gives.
func TestAnchor(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Claims: one holder at a time, with a fencing token": "claims-one-holder-at-a-time-with-a-fencing-token",
		"Fences across a failover (PostgreSQL)":              "fences-across-a-failover-postgresql",
		"The outbox over HTTP, and relays inside serve":      "the-outbox-over-http-and-relays-inside-serve",
		"Client: Go and command line":                        "client-go-and-command-line",
		"`racefree_` tables and `Config.Combine`":            "racefree_-tables-and-configcombine",
		"What is guaranteed":                                 "what-is-guaranteed",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}
