package server

import (
	"regexp"
	"testing"
)

// pathValueCorpus are path parameters at the pattern's edges: segments
// empty, ".", "..", "..." and dotted text, a NUL byte in each place, a
// leading, trailing and doubled "/", multi-byte and invalid UTF-8.
var pathValueCorpus = []string{"", "a", "k-1", ".", "..", "...", ".a", "..a", "a.", "a..", ".a.", "a/b", "a/b/c", "/a", "a/", "/", "//",
	"a//b", "a/./b", "a/../b", "a/.../b", "a/.b/..c", "./a", "../a", "a/.", "a/..", "\x00", "a\x00", "\x00a", "a/\x00", ".\x00",
	"..\x00", "é/😀", ".é", "..é", "%2F", "a b", "\xff", ".\xff", "..\xff/\xff", "a/b/", "a/b//c"}

// TestPathValueMatchesItsPattern checks that validPathValue, which judges
// every key in a path, says what pathValuePattern, which /openapi.json
// publishes, says.
func TestPathValueMatchesItsPattern(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(pathValuePattern)
	for _, v := range pathValueCorpus {
		if got, want := validPathValue(v), re.MatchString(v); got != want {
			t.Errorf("validPathValue(%q) = %v, the pattern says %v", v, got, want)
		}
	}
}

// FuzzPathValue checks validPathValue against pathValuePattern on any text.
func FuzzPathValue(f *testing.F) {
	re := regexp.MustCompile(pathValuePattern)
	for _, v := range pathValueCorpus {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if got, want := validPathValue(v), re.MatchString(v); got != want {
			t.Errorf("validPathValue(%q) = %v, the pattern says %v", v, got, want)
		}
	})
}
