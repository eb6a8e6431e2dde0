package main

import (
	"path"
	"slices"
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

func TestRedact(t *testing.T) {
	if got, want := redact("postgres://u:secret@h/db"), "postgres://u:xxxxx@h/db"; got != want {
		t.Fatalf("redact = %q, want %q", got, want)
	}
	if got, want := redact(localURL), localURL; got != want {
		t.Fatalf("redact = %q, want %q", got, want)
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
