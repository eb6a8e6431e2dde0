package uniquecheck

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// The tests of this file try the migration lexer (stmt.tokens) and the
// helpers built on it at their edges: a statement that ends inside a
// word, an operator, a comment or a string; words made of the first and
// last letters and digits and of non-ASCII bytes; parentheses nested and
// unclosed; a key list, a WHERE, a DEFAULT or a GENERATED expression that
// is missing, empty or runs to the end of the statement. Each must give
// the text the file wrote, or nothing, and never read past the statement.

// toks renders tokens as text@depth, one a field.
func toks(s stmt) string {
	var out []string
	for _, t := range s.tokens() {
		if t.text != s.text[t.start:t.end] {
			return fmt.Sprintf("token %q at %d:%d is not the text there", t.text, t.start, t.end)
		}
		out = append(out, fmt.Sprintf("%s@%d", t.text, t.depth))
	}
	return strings.Join(out, " ")
}

// whole is the statement of all of text.
func whole(text string) stmt { return stmt{text: text, start: 0, end: len(text)} }

func TestEdgesLexerTokens(t *testing.T) {
	t.Parallel()
	cases := []struct {
		s    stmt
		want string
	}{
		// The statement ends inside a word or an operator: the token ends
		// there too, never past it into the next statement.
		{stmt{text: "ab", start: 0, end: 1}, "a@0"},
		{stmt{text: "x y;z", start: 2, end: 3}, "y@0"},
		{stmt{text: "a<=", start: 0, end: 2}, "a@0 <@0"},
		{whole("x"), "x@0"},
		{whole("a <="), "a@0 <=@0"},
		// Operators are runs of operator characters, the first and the
		// last of the set too.
		{whole("x=+1"), "x@0 =+@0 1@0"},
		{whole("a<=b"), "a@0 <=@0 b@0"},
		{whole("a?|b"), "a@0 ?|@0 b@0"},
		// Words of the first and last letters and digits, underscores,
		// and the bytes of non-ASCII letters (Ā is C4 80) are one token.
		{whole("az AZ a09 _x aĀb za Zb"), "az@0 AZ@0 a09@0 _x@0 aĀb@0 za@0 Zb@0"},
		{whole("a$1 $1 $12+1"), "a$1@0 $1@0 $12@0 +@0 1@0"},
		// Parentheses: the depth before each token.
		{whole("f((a), b)"), "f@0 (@0 (@1 a@2 )@1 ,@1 b@1 )@0"},
		{whole("(a"), "(@0 a@1"},
		// Comments are skipped, to the end of the line or of the comment,
		// or of the statement when they do not end.
		{whole("a -- x, (y\nb"), "a@0 b@0"},
		{whole("a /* x, (y */ b"), "a@0 b@0"},
		{whole("a /* x, (y"), "a@0"},
		{whole("a -- x, (y"), "a@0"},
		{stmt{text: "a /* x */ b", start: 0, end: 6}, "a@0"},
		// Strings and quoted identifiers: a doubled quote stands for one,
		// and a semicolon, comma or parenthesis in them is text.
		{whole("'it''s (;' b"), "'it''s (;'@0 b@0"},
		{whole(`"a""b(" c`), `"a""b("@0 c@0`},
		{whole("'a;b';"), "'a;b'@0 ;@0"},
		{whole("'abc"), "'abc@0"},
		{whole("''"), "''@0"},
		// A word of three letters just before a quote is no string prefix.
		{whole("abc'x'"), "abc@0 'x'@0"},
		// Dollar quotes, with and without a tag; $1 is a parameter.
		{whole("$q$ ( ' $q$ x"), "$q$ ( ' $q$@0 x@0"},
		{whole("$$ ), $$ x"), "$$ ), $$@0 x@0"},
	}
	for _, c := range cases {
		if got := toks(c.s); got != c.want {
			t.Errorf("tokens of %q[%d:%d]:\n got %s\nwant %s", c.s.text, c.s.start, c.s.end, got, c.want)
		}
	}
}

func TestEdgesIndexParts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		text  string
		keys  string // each key's text, joined by " | "
		where string
		err   bool
	}{
		{"CREATE UNIQUE INDEX i ON t (a, (b + c), f(d, e)) WHERE x > 0", "a | (b + c) | f(d, e)", "x > 0", false},
		{"CREATE UNIQUE INDEX i ON t (a)", "a", "", false},
		// The key list is the first parenthesised group after ON.
		{"CREATE UNIQUE INDEX i (x) ON t (a)", "a", "", false},
		{"CREATE UNIQUE INDEX i ON t USING btree (a) WHERE b", "a", "b", false},
		// A WHERE with nothing after it, a key list that does not close,
		// or none at all.
		{"CREATE UNIQUE INDEX i ON t (a) WHERE", "a", "", false},
		{"CREATE UNIQUE INDEX i ON t (a, b", "a", "", false},
		{"CREATE UNIQUE INDEX i ON t", "", "", true},
		{"CREATE UNIQUE INDEX i", "", "", true},
		{"", "", "", true},
	}
	for _, c := range cases {
		s := whole(c.text)
		elems, where, err := s.indexParts()
		if (err != nil) != c.err {
			t.Errorf("%q: err %v, want an error: %v", c.text, err, c.err)
			continue
		}
		var keys []string
		for _, e := range elems {
			keys = append(keys, c.text[e[0].start:e[len(e)-1].end])
		}
		if got := strings.Join(keys, " | "); got != c.keys || where != c.where {
			t.Errorf("%q: keys %q where %q; want %q where %q", c.text, got, where, c.keys, c.where)
		}
	}
}

func TestEdgesDefaultAndGeneratedExpr(t *testing.T) {
	t.Parallel()
	// at is the offset of the first occurrence of the keyword in text
	// (or -1 for none there), bounds those of the constraints named.
	at := func(text, word string) int {
		if word == "" {
			return -1
		}
		return strings.Index(text, word)
	}
	defaults := []struct {
		text, kw string
		bounds   []string
		want     string
	}{
		{"c int DEFAULT 7 UNIQUE", "DEFAULT", []string{"DEFAULT", "UNIQUE"}, "7"},
		{"c int UNIQUE DEFAULT 7", "DEFAULT", []string{"UNIQUE", "DEFAULT"}, "7"},
		{"c text UNIQUE DEFAULT coalesce(NULL, 'x'), ADD d int", "DEFAULT", []string{"UNIQUE", "DEFAULT"}, "coalesce(NULL, 'x')"},
		{"c text DEFAULT (1 + 2) NOT NULL", "DEFAULT", []string{"DEFAULT", "NOT"}, "(1 + 2)"},
		{"(c text DEFAULT f(1)), d", "DEFAULT", []string{"DEFAULT"}, "f(1)"},
		{"DEFAULT , x", "DEFAULT", []string{"DEFAULT"}, ""},
		{"DEFAULT", "DEFAULT", []string{"DEFAULT"}, ""},
		{"c int DEFAULT 7", "EFAULT", nil, ""},
		{"c int DEFAULT 7", "", nil, ""},
	}
	for _, c := range defaults {
		var bounds []int
		for _, b := range c.bounds {
			bounds = append(bounds, at(c.text, b))
		}
		if got := whole(c.text).defaultExpr(at(c.text, c.kw), bounds); got != c.want {
			t.Errorf("defaultExpr of %q at %q: got %q, want %q", c.text, c.kw, got, c.want)
		}
	}
	generated := []struct{ text, kw, want string }{
		{"c int GENERATED ALWAYS AS (a * 2) STORED", "GENERATED", "a * 2"},
		{"c numeric(10,2) GENERATED ALWAYS AS (a * (b + 1)) STORED", "GENERATED", "a * (b + 1)"},
		{"(a)", "(", "a"},
		{"c int GENERATED ALWAYS AS", "GENERATED", ""},
		{"c int GENERATED ALWAYS AS (", "GENERATED", ""},
		{"c int GENERATED ALWAYS AS (a + 1", "GENERATED", ""},
		{"c int GENERATED ALWAYS AS ( )", "GENERATED", ""},
		{"c int GENERATED ALWAYS AS ()", "GENERATED", ""},
		{"c numeric(10,2) GENERATED ALWAYS AS (a)", "ENERATED", ""},
		{"c numeric(10,2)", "", ""},
	}
	for _, c := range generated {
		if got := whole(c.text).generatedExpr(at(c.text, c.kw)); got != c.want {
			t.Errorf("generatedExpr of %q at %q: got %q, want %q", c.text, c.kw, got, c.want)
		}
	}
}

// TestEdgesColumnRefsAndLines: a column reference with no name adds
// nothing, and a statement location past its last semicolon is on the
// last line.
func TestEdgesColumnRefsAndLines(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		`{"ColumnRef":{"fields":[]}}`: "",
		`{"ColumnRef":{"fields":[{"String":{"sval":"t"}},{"String":{"sval":"a"}}]}}`: "a",
		`[{"A_Expr":{"lexpr":{"ColumnRef":{"fields":[{"String":{"sval":"b"}}]}}}}]`:  "b",
		`not json`: "",
	} {
		out := map[string]bool{}
		columnRefs(json.RawMessage(raw), out)
		var got []string
		for k := range out {
			got = append(got, k)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("columnRefs(%s) = %v, want %q", raw, got, want)
		}
	}
	for _, c := range []struct {
		text   string
		offset int
		want   string
	}{
		{"a;\n;", 2, "line 2"},
		{"a;\n; \n", 2, "line 3"},
		{"a;\n-- x\nb", 2, "line 3"},
		{"a;\n/* x\n*/ b", 2, "line 3"},
		{"a; -- x", 2, "line 1"},
		{"a", 5, "line 1"},
	} {
		if got := lineOf(c.text, c.offset); got != c.want {
			t.Errorf("lineOf(%q, %d) = %q, want %q", c.text, c.offset, got, c.want)
		}
	}
}
