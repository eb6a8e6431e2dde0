package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryMutantAppliesToTheTree: every patch of the catalogue applies to
// the repository as it is (git apply --check), and every directory its
// Packages: header names holds a Go package, so that a change to the
// code that moves a mutant's lines, or a package, fails here, in seconds, with the names
// of the mutants to re-make, rather than as a broken mutant at the end of
// a full run.
func TestEveryMutantAppliesToTheTree(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	all, err := loadCatalogue(filepath.Join(root, filepath.FromSlash(catalogueDir)))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("the catalogue is empty")
	}
	args := []string{"apply", "--check"}
	for _, m := range all {
		cmd := exec.Command("git", append(args, m.path)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s does not apply: %s", m.file, strings.TrimSpace(string(out)))
		}
		for _, p := range m.packages {
			if !hasGoSource(filepath.Join(root, filepath.FromSlash(p))) {
				t.Errorf("%s: its Packages: header names %s, which holds no Go package", m.file, p)
			}
		}
	}
}
