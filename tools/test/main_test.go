package main

import (
	"path"
	"slices"
	"strings"
	"testing"
)

func TestHasPackage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-race"}, false},
		{[]string{"-run", "TestX"}, false},
		{[]string{"-run=TestX", "-count", "1"}, false},
		{[]string{"-skip", "TestSlow"}, false},
		{[]string{"-race", "./claim"}, true},
		{[]string{"-timeout", "30m", "./..."}, true},
		{[]string{"github.com/racefree/racefree/claim"}, true},
	} {
		if got := hasPackage(c.args); got != c.want {
			t.Errorf("hasPackage(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// TestRedact: the password is hidden in each place the driver reads one
// (the URL's user part, its query, a keyword/value string, quoted or not,
// a URL that does not parse), and a DSN without one is printed as given.
func TestRedact(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://u:secret@h/db", "postgres://u:xxxxx@h/db"},
		{localURL, localURL},
		{"postgres://u@h/db?sslmode=disable&password=secret", "postgres://u@h/db?password=xxxxx&sslmode=disable"},
		{"postgresql://u:one@h/db?PASSWORD=x&password=two", "postgresql://u:xxxxx@h/db?PASSWORD=x&password=xxxxx"},
		{"host=h user=u password=secret dbname=db", "host=h user=u password=xxxxx dbname=db"},
		{"host=h password = 'se cr\\'et' dbname=db", "host=h password = xxxxx dbname=db"},
		{"postgres://u:secret@h:port/db", "postgres://u:xxxxx@h:port/db"},
		{"postgres://u@h:port/db?password=secret&x=1", "postgres://u@h:port/db?password=xxxxx&x=1"},
	} {
		got := redact(c.in)
		if got != c.want {
			t.Errorf("redact(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(got, "secret") || strings.Contains(got, "one") || strings.Contains(got, "two") {
			t.Errorf("redact(%q) = %q shows the password", c.in, got)
		}
	}
}

// TestSlowestFirst: "./..." becomes every package of the module, those of
// slowest first and in its order, the flags around it kept; each entry of
// slowest names a package that exists, so that a renamed one is noticed.
func TestSlowestFirst(t *testing.T) {
	t.Chdir("../..")
	got := slowestFirst([]string{"-race", "./...", "-count=1"})
	if got[0] != "-race" || got[len(got)-1] != "-count=1" {
		t.Fatalf("flags around ./... moved: %q", got)
	}
	pkgs := got[1 : len(got)-1]
	for i, s := range slowest {
		if want := path.Join(modulePath, s); pkgs[i] != want {
			t.Errorf("package %d: %s, want %s (slowest[%d]): not in the module?", i, pkgs[i], want, i)
		}
	}
	seen := map[string]bool{}
	for _, p := range pkgs {
		if seen[p] {
			t.Errorf("%s listed twice", p)
		}
		seen[p] = true
	}
	if !seen[modulePath] || len(pkgs) < 30 {
		t.Errorf("%d packages, the root among them %v: want every package of the module", len(pkgs), seen[modulePath])
	}
	if got := slowestFirst([]string{"-race", "./claim"}); !slices.Equal(got, []string{"-race", "./claim"}) {
		t.Errorf("a package named by the caller: %q, want it unchanged", got)
	}
}
