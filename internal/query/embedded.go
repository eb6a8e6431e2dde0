package query

// Embedded returns SQL text embedded in the program as the program runs it:
// the text itself. Every embedded statement and migration passes through
// it, so that the mutation runner (tools/mutants/) can run a mutant of a .sql
// file without building a test binary for it: in a test binary built with
// the racefree_mutants tag, and only there, a mutant's text replaces the
// text it mutates (see mutated.go).
func Embedded(text string) string {
	if mutated != nil {
		if m, ok := mutated[digest(text)]; ok {
			return m
		}
	}
	return text
}

// mutated maps the digest of an embedded text to the mutant's text that
// replaces it; nil outside a racefree_mutants build.
var mutated map[string]string
