package main

import "testing"

func TestHasPackage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-race"}, false},
		{[]string{"-run", "TestX"}, false},
		{[]string{"-run=TestX", "-count", "1"}, false},
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
