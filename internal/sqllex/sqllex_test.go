package sqllex

import (
	"fmt"
	"strings"
	"testing"
)

// render writes tokens as kind:text, joined by " | ": w a word, q quoted,
// p a parameter, . punctuation, o an operator.
func render(t *testing.T, s string, toks []Token) string {
	t.Helper()
	var out []string
	end := 0
	for _, tok := range toks {
		if tok.Start < end || tok.End <= tok.Start || tok.End > len(s) || tok.Text != s[tok.Start:tok.End] {
			t.Fatalf("%q: token %+v overlaps the one before it, is empty, or is not the text at its offsets", s, tok)
		}
		end = tok.End
		out = append(out, fmt.Sprintf("%c:%s", " wqp.o"[tok.Kind], tok.Text))
	}
	return strings.Join(out, " | ")
}

// all is every dialect: a case that lists it reads the same in each.
var all = []Dialect{Postgres, PostgresNonConforming, SQLite}

// pg is both of PostgreSQL's readings.
var pg = []Dialect{Postgres, PostgresNonConforming}

// lexCase is a text, the dialects that read it alike, and their tokens.
type lexCase struct {
	text     string
	dialects []Dialect
	want     string
}

func check(t *testing.T, cases []lexCase) {
	t.Helper()
	for _, c := range cases {
		for _, d := range c.dialects {
			if got := render(t, c.text, Tokens(d, c.text)); got != c.want {
				t.Errorf("%v: Tokens(%q)\n got %s\nwant %s", d, c.text, got, c.want)
			}
		}
	}
}

// TestEveryDialectReadsTheCommonForms tries what both engines read alike:
// strings with a doubled quote, identifiers, comments that end and that
// run to the end, operators that end where a comment starts, blobs,
// words with a dollar, punctuation, and each form unterminated (it runs
// to the end of the text).
func TestEveryDialectReadsTheCommonForms(t *testing.T) {
	t.Parallel()
	check(t, []lexCase{
		{"a <= b", all, "w:a | o:<= | w:b"},
		{"", all, ""},
		{" \t\r\n\f\v", all, ""},
		{"a\f\vb", all, "w:a | w:b"},
		{"'it''s (;' x", all, "q:'it''s (;' | w:x"},
		{"''", all, "q:''"},
		{"''''", all, "q:''''"},
		{"'abc", all, "q:'abc"},
		{"'ab''", all, "q:'ab''"},
		{`"a""b(" c`, all, `q:"a""b(" | w:c`},
		{`"ab`, all, `q:"ab`},
		{"a -- x, (y'\nb", all, "w:a | w:b"},
		{"a -- x'", all, "w:a"},
		{"a /* x' */ b", all, "w:a | w:b"},
		{"a /**/ b /*/ c */ d /***/ e", all, "w:a | w:b | w:d | w:e"},
		{"a /* x'", all, "w:a"},
		{"x'0A' X'0a' x", all, "q:x'0A' | q:X'0a' | w:x"},
		{"f(a, b.c);", all, "w:f | .:( | w:a | .:, | w:b | .:. | w:c | .:) | .:;"},
		{"a+--c\nb", all, "w:a | o:+ | w:b"},
		{"a*/*c*/b", all, "w:a | o:* | w:b"},
		{"a<>/*c*/-b", all, "w:a | o:<> | o:- | w:b"},
		{"a$b$ _x aĀb Z9", all, "w:a$b$ | w:_x | w:aĀb | w:Z9"},
		{"abc'x'", all, "w:abc | q:'x'"},
		{"9'x'", all, "w:9 | q:'x'"},
		{"e 'x'", all, "w:e | q:'x'"},
		{"1e5 1.5 0x1F", all, "w:1e5 | w:1 | .:. | w:5 | w:0x1F"},
	})
}

// TestPostgresReadsAsPostgres tries PostgreSQL's own forms: nested
// comments, [ as punctuation, -- ended by a carriage return, E'…' and its
// continuations, dollar quotes against $1 parameters, a number before a
// dollar quote, and PostgreSQL's operator characters.
func TestPostgresReadsAsPostgres(t *testing.T) {
	t.Parallel()
	check(t, []lexCase{
		{"/* a /* b */ c' */ d", pg, "w:d"},
		{"/* /* */ x", pg, ""},
		{"/*", pg, ""},
		{"ARRAY['a]', 'b'][1]", pg, "w:ARRAY | .:[ | q:'a]' | .:, | q:'b' | .:] | .:[ | w:1 | .:]"},
		{"[a b]", pg, ".:[ | w:a | w:b | .:]"},
		{"a -- x\rb", pg, "w:a | w:b"},
		{`E'a\'b' e'\\' c`, pg, `q:E'a\'b' | q:e'\\' | w:c`},
		{`E'a\`, pg, `q:E'a\`},
		{`N'C:\' B'1\' x`, Postgres.only(), `q:N'C:\' | q:B'1\' | w:x`},
		{"E'a'\n'\\' x'", pg, "q:E'a'\n'\\' x'"},
		{"'a' -- c'\n 'b' c", pg, "q:'a' -- c'\n 'b' | w:c"},
		{"'a'\r\n\t'b'\n'c'", pg, "q:'a'\r\n\t'b'\n'c'"},
		{"'a' 'b'", pg, "q:'a' | q:'b'"},
		{"'a' -- c\n", pg, "q:'a'"},
		{"'a'\n x", pg, "q:'a' | w:x"},
		{"$1 $12+1 a$1", pg, "p:$1 | p:$12 | o:+ | w:1 | w:a$1"},
		{"$q$ ( ' $q$ x $$ ), $$ y", pg, "q:$q$ ( ' $q$ | w:x | q:$$ ), $$ | w:y"},
		{"$Āa0_$x$Āa0_$", pg, "q:$Āa0_$x$Āa0_$"},
		{"$q$ x $Q$ y", pg, "q:$q$ x $Q$ y"},
		{"$q$x$qq$y$q$z", pg, "q:$q$x$qq$y$q$ | w:z"},
		{"$1$q$x$q$", pg, "p:$1 | q:$q$x$q$"},
		{"1$q$x$q$", pg, "w:1 | q:$q$x$q$"},
		{"1$a a1$", pg, "w:1 | o:$ | w:a | w:a1$"},
		{"$0a$ $", pg, "p:$0 | w:a$ | o:$"},
		{"$a b$", pg, "o:$ | w:a | w:b$"},
		{"a?|b @> `c` #d", pg, "w:a | o:?| | w:b | o:@> | o:` | w:c | o:` | o:# | w:d"},
		{"x=+1", pg, "w:x | o:=+ | w:1"},
		{"a::b := c", pg, "w:a | o:: | o:: | w:b | o::= | w:c"},
		{"?1 :a @b", pg, "o:? | w:1 | o:: | w:a | o:@ | w:b"},
	})
}

// TestPostgresNonConformingEscapesEveryString tries the reading of
// PostgreSQL with standard_conforming_strings off: a backslash escapes in
// '…' and N'…' as in E'…', and in continuations, but not in B'…' or X'…'.
func TestPostgresNonConformingEscapesEveryString(t *testing.T) {
	t.Parallel()
	check(t, []lexCase{
		{`'a\' b`, Postgres.only(), `q:'a\' | w:b`},
		{`'a\' b`, PostgresNonConforming.only(), `q:'a\' b`},
		{`'a\'' b`, PostgresNonConforming.only(), `q:'a\'' | w:b`},
		{`N'C:\' x'`, PostgresNonConforming.only(), `q:N'C:\' x'`},
		{`B'1\' X'2\' x`, PostgresNonConforming.only(), `q:B'1\' | q:X'2\' | w:x`},
		{"'a'\n'\\' x'", PostgresNonConforming.only(), "q:'a'\n'\\' x'"},
		{"'a'\n'\\' x'", Postgres.only(), "q:'a'\n'\\' | q:x'"},
	})
}

// TestSQLiteReadsAsSQLite tries SQLite's own forms: comments that do not
// nest, […] and `…` identifiers, no dollar quotes, no escapes, no
// continuation, -- ended by a newline only, and its parameters, Tcl's
// variables among them.
func TestSQLiteReadsAsSQLite(t *testing.T) {
	t.Parallel()
	s := SQLite.only()
	check(t, []lexCase{
		{"/* a /* b */ c */ d", s, "w:c | o:*/ | w:d"},
		{"/* /* */ x", s, "w:x"},
		{"x /*", s, "w:x | o:/*"},
		{"x /*/", s, "w:x"},
		{"[a b'] c", s, "q:[a b'] | w:c"},
		{"[a]]", s, "q:[a] | .:]"},
		{"[a", s, "q:[a"},
		{"ARRAY['a]', 'b']", s, "w:ARRAY | q:['a] | q:', ' | q:b']"},
		{"`a``b` c `d", s, "q:`a``b` | w:c | q:`d"},
		{"a -- x\rb", s, "w:a"},
		{`E'a\'bc' d`, s, `q:E'a\' | w:bc | q:' d`},
		{`'a\' b`, s, `q:'a\' | w:b`},
		{"'a'\n'b'", s, "q:'a' | q:'b'"},
		{"$1 $q$ x $q$ $$y$$ $", s, "p:$1 | p:$q$ | w:x | p:$q$ | p:$$y$$ | o:$"},
		{"1$q$x$q$", s, "w:1$q$x$q$"},
		{"1$a a1$", s, "w:1$a | w:a1$"},
		{"?1 ? ?12a :a @b #c $d::e::f", s, "p:?1 | p:? | p:?12 | w:a | p::a | p:@b | p:#c | p:$d::e::f"},
		{"$a(') ' b", s, "p:$a(') | q:' b"},
		{":a(x'y) @b(() #c()", s, "p::a(x'y) | p:@b(() | p:#c()"},
		{"$a(x y) z", s, "p:$a(x | w:y | .:) | w:z"},
		{"$a(x", s, "p:$a(x"},
		{"$(a) : @", s, "o:$ | .:( | w:a | .:) | o:: | o:@"},
		{"$::a", s, "p:$::a"},
		{"$::", s, "o:$::"},
		{"a+@b -?1", s, "w:a | o:+ | p:@b | o:- | p:?1"},
	})
}

// TestEdgesFormsAtTheirBounds tries each form where its reading turns:
// a comment at the very start of the text and right after a newline, a
// form closed at the last byte, a form's first byte as the last byte of
// the text, an empty [] identifier, "" and $$$$, a
// prefix at the first place of the non-conforming reading's list, a
// continuation through a comment right after its newline, and each
// character class at both of its ends ('0' and '9', 'a' and 'z', 'A' and
// 'Z', the first non-ASCII byte 0x80), as a word, as a parameter, and in a
// dollar quote's tag, where a leading digit makes it no tag.
func TestEdgesFormsAtTheirBounds(t *testing.T) {
	t.Parallel()
	check(t, []lexCase{
		{"--x\nb", all, "w:b"},
		{"a -", all, "w:a | o:-"},
		{"a /", all, "w:a | o:/"},
		{"a\n--x\nb", all, "w:a | w:b"},
		{`"a"`, all, `q:"a"`},
		{`"" x`, all, `q:"" | w:x`},
		{"'a'", all, "q:'a'"},
		{"az AZ _09 \x80\xff", all, "w:az | w:AZ | w:_09 | w:\x80\xff"},
		{"a`b", pg, "w:a | o:` | w:b"},
		{"0$q$x$q$ 9$q$y$q$", pg, "w:0 | q:$q$x$q$ | w:9 | q:$q$y$q$"},
		{"$0 $9", pg, "p:$0 | p:$9"},
		{"$$$$ x $q$$q$ y", pg, "q:$$$$ | w:x | q:$q$$q$ | w:y"},
		{"$a9$x$a9$ $z$x$z$ $A$x$A$ $Z$x$Z$ $_$x$_$ $\x80$x$\x80$", pg, "q:$a9$x$a9$ | q:$z$x$z$ | q:$A$x$A$ | q:$Z$x$Z$ | q:$_$x$_$ | q:$\x80$x$\x80$"},
		{"$9$x", pg, "p:$9 | o:$ | w:x"},
		{"'a'\n--c\n'b' d", pg, "q:'a'\n--c\n'b' | w:d"},
		{`b'1\' x`, PostgresNonConforming.only(), `q:b'1\' | w:x`},
		{"[] x", SQLite.only(), "q:[] | w:x"},
		{"$a:", SQLite.only(), "p:$a | o::"},
		{"'a'\n-", pg, "q:'a' | o:-"},
		{"?0 ?9 $a0(x) x", SQLite.only(), "p:?0 | p:?9 | p:$a0(x) | w:x"},
	})
}

// only is the one dialect d, for a case that reads differently in the
// others.
func (d Dialect) only() []Dialect { return []Dialect{d} }

// TestNextResumesAtAnOffset reads a text token by token with Next, from
// an offset in the middle of white space and from the end, as uniquecheck
// finds the first token of a statement.
func TestNextResumesAtAnOffset(t *testing.T) {
	t.Parallel()
	s := "a; /* x */ -- y\n b"
	for _, c := range []struct {
		at   int
		want string
		ok   bool
	}{{0, "a", true}, {1, ";", true}, {2, "b", true}, {len(s) - 1, "b", true}, {len(s), "", false}, {len(s) + 1, "", false}} {
		tok, ok := Next(Postgres, s, c.at)
		if ok != c.ok || tok.Text != c.want {
			t.Errorf("Next(%q, %d) = %+v, %v; want %q, %v", s, c.at, tok, ok, c.want, c.ok)
		}
	}
}

// TestDialectNames: each dialect names itself, an unknown one says so.
func TestDialectNames(t *testing.T) {
	t.Parallel()
	for d, want := range map[Dialect]string{Postgres: "PostgreSQL", PostgresNonConforming: "PostgreSQL (standard_conforming_strings off)", SQLite: "SQLite", 9: "unknown dialect"} {
		if got := d.String(); got != want {
			t.Errorf("%d: %q, want %q", d, got, want)
		}
	}
}

// FuzzTokens holds every text to the lexer's contract in every dialect:
// tokens in order, none empty or overlapping, each the text at its
// offsets, and Next from any token's end agreeing with Tokens.
func FuzzTokens(f *testing.F) {
	for _, s := range []string{"a <= b", "'it''s'", "E'a\\'b'\n'c'", "$q$x$q$ $1", "/* /* */ */ x", "[a] `b` ?1 $a(') :b::c", "a -- x\rb", "1$q$", "'a\\' b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, d := range all {
			toks := Tokens(d, s)
			render(t, s, toks)
			for i, tok := range toks {
				next, ok := Next(d, s, tok.End)
				if i+1 < len(toks) && (!ok || next != toks[i+1]) || i+1 == len(toks) && ok {
					t.Fatalf("%v: Next(%q, %d) = %+v, %v; Tokens has %+v", d, s, tok.End, next, ok, toks[i+1:])
				}
			}
		}
	})
}
