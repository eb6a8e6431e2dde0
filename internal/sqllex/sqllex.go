// Package sqllex splits SQL text into tokens as PostgreSQL or SQLite reads
// it: where each string, quoted identifier, comment, parameter and word
// begins and ends. It is the one lexer of racefree's packages that read
// SQL they did not write (getorcreate's judgement of a caller's select,
// uniquecheck's reading of a migration).
//
// It finds boundaries, not syntax: text an engine would refuse still comes
// back as tokens, and a token says nothing of what it means in its
// statement. Where an engine reports an error (an unterminated string,
// quoted identifier, dollar-quoted string or block comment), the lexer
// reads the construct as running to the end of the text: a caller that
// asks what lies outside strings and comments then sees nothing past the
// opening quote, which is what the engine runs of it (nothing).
//
// It departs from an engine only on text that engine refuses, or runs
// less of: a vertical tab is white space (PostgreSQL 16 reads it so;
// earlier versions and SQLite refuse it), a number runs on through the
// letters after it (PostgreSQL 15 and SQLite refuse 1abc; PostgreSQL 14
// read it as 1 labelled abc, where no statement can start), and a NUL
// byte is an ordinary byte (PostgreSQL refuses it; SQLite stops reading
// at it).
package sqllex

import "strings"

// Dialect names an engine's reading of SQL text.
type Dialect uint8

const (
	// Postgres reads as PostgreSQL does with standard_conforming_strings
	// on, its default: '…' strings where a doubled quote stands for
	// one and a backslash is an ordinary character; E'…' strings, where
	// a backslash takes the next byte with it; a string followed by
	// white space holding a newline (and -- comments) and another
	// '…' continues in that second one, escapes and all; B'…', X'…',
	// N'…' and other one-letter prefixes; "…" identifiers;
	// $tag$…$tag$ and $$…$$ strings, whose tag is a letter or underscore
	// then letters, digits and underscores (non-ASCII bytes count as
	// letters); $1 parameters; -- comments to the end of the line (a
	// newline or a carriage return); /* */ comments, which nest; words
	// of letters, digits, underscores, dollars and non-ASCII bytes (a
	// number does not take a dollar); operators, which end where a
	// comment starts; [ and ] are punctuation (array subscripts and
	// constructors), never quotes.
	Postgres Dialect = iota
	// PostgresNonConforming reads as PostgreSQL does with
	// standard_conforming_strings off (a setting a server, a database, a
	// role or a session may choose): as Postgres, but a backslash escapes
	// the next byte in every '…' string but B'…' and X'…', as in E'…'.
	PostgresNonConforming
	// SQLite reads as SQLite does: '…' strings and X'…' blobs, where a
	// doubled quote stands for one and a backslash is an ordinary
	// character (E'…' is a word and a string, with no escapes); "…"
	// and `…` identifiers (a doubled quote stands for one) and […]
	// identifiers (no escape: the first ] ends it); -- comments to the
	// end of the line (a newline only) and /* */ comments, which do not
	// nest ("/*" as the last two bytes is an operator); parameters ?,
	// ?NNN, and $, @, : or # followed by a name of letters, digits,
	// underscores, dollars and non-ASCII bytes, with "::" inside it and
	// a "(…)" suffix that runs to the first ")" or white space (Tcl's
	// variables); no dollar-quoted strings and no string continuation.
	SQLite
)

// String returns the dialect's name.
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "PostgreSQL"
	case PostgresNonConforming:
		return "PostgreSQL (standard_conforming_strings off)"
	case SQLite:
		return "SQLite"
	}
	return "unknown dialect"
}

// Kind tells what a token is.
type Kind uint8

const (
	// Word is a keyword, an unquoted identifier or a number.
	Word Kind = iota + 1
	// Quoted is a string or blob literal (with its one-letter prefix and,
	// on PostgreSQL, its continuations), a dollar-quoted string or a
	// quoted identifier.
	Quoted
	// Param is a parameter: $1 on PostgreSQL; ?, ?NNN, $name, @name,
	// :name and #name on SQLite.
	Param
	// Punct is one of ( ) , . ; [ ] (on SQLite [ opens an identifier
	// instead).
	Punct
	// Operator is a run of operator characters, or any other byte.
	Operator
)

// Token is one token of a text: Text is text[Start:End].
type Token struct {
	Start, End int
	Kind       Kind
	Text       string
}

// Tokens returns the tokens of s, read in dialect d, skipping white space
// and comments.
func Tokens(d Dialect, s string) []Token {
	var out []Token
	for i := 0; ; {
		t, ok := Next(d, s, i)
		if !ok {
			return out
		}
		out = append(out, t)
		i = t.End
	}
}

// Next returns the first token of s at or after offset i, which must be
// where a token, white space or a comment starts (0, or the End of a
// token Next returned), read in dialect d; ok is false when only white
// space and comments are left.
func Next(d Dialect, s string, i int) (t Token, ok bool) {
	for i < len(s) {
		c := s[i]
		switch {
		case isSpace(c):
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			i = lineEnd(d, s, i+2)
		case c == '/' && i+1 < len(s) && s[i+1] == '*' && (d != SQLite || i+2 < len(s)):
			i = commentEnd(d, s, i+2)
		default:
			end, kind := token(d, s, i)
			return Token{Start: i, End: end, Kind: kind, Text: s[i:end]}, true
		}
	}
	return Token{}, false
}

// token returns the end and kind of the token that starts at s[i], which
// is neither white space nor a comment.
func token(d Dialect, s string, i int) (int, Kind) {
	c := s[i]
	switch {
	case c == '\'':
		return str(d, s, i, escapes(d, 0)), Quoted
	case c == '"' || c == '`' && d == SQLite:
		return quoted(s, i), Quoted
	case c == '[' && d == SQLite:
		if k := strings.IndexByte(s[i+1:], ']'); k >= 0 {
			return i + 1 + k + 1, Quoted
		}
		return len(s), Quoted
	case c == '$' && d != SQLite:
		return dollar(s, i)
	case d == SQLite && (c == '$' || c == '@' || c == ':' || c == '#'):
		return variable(s, i)
	case d == SQLite && c == '?':
		j := i + 1
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		return j, Param
	case isWord(c):
		// A word takes a dollar, but a number does not on PostgreSQL,
		// which reads 1$q$…$q$ as 1 and a dollar-quoted string (SQLite
		// reads 1$q$ as one, illegal, token).
		takesDollar := !isDigit(c) || d == SQLite
		j := i + 1
		for j < len(s) && (isWord(s[j]) || s[j] == '$' && takesDollar) {
			j++
		}
		// E'…', B'…', X'…', N'…': a one-letter prefix stays one token
		// with its string.
		if j-i == 1 && !isDigit(c) && j < len(s) && s[j] == '\'' {
			return str(d, s, j, escapes(d, c)), Quoted
		}
		return j, Word
	case strings.IndexByte("(),.;[]", c) >= 0:
		return i + 1, Punct
	}
	ops := "+-*/<>=~!@#%^&|`?"
	if d == SQLite {
		ops = "+-*/<>=~!%^&|"
	}
	// An operator ends where a comment starts, as in PostgreSQL.
	j := i + 1
	for j < len(s) && strings.IndexByte(ops, s[j]) >= 0 && !strings.HasPrefix(s[j:], "--") && !strings.HasPrefix(s[j:], "/*") {
		j++
	}
	return j, Operator
}

// escapes reports whether a backslash escapes the next byte in a '…'
// string whose one-letter prefix is prefix (0 for none), in dialect d.
func escapes(d Dialect, prefix byte) bool {
	switch d {
	case Postgres:
		return prefix == 'E' || prefix == 'e'
	case PostgresNonConforming:
		return strings.IndexByte("bBxX", prefix) < 0
	}
	return false
}

// str returns the offset just past the string whose opening quote is at
// s[q]: a doubled quote stands for one, with esc a backslash takes the
// next byte with it, and on PostgreSQL a continuation (white space with a
// newline, then a quote) carries the string on, escapes and all.
func str(d Dialect, s string, q int, esc bool) int {
	for j := q + 1; j < len(s); j++ {
		switch {
		case esc && s[j] == '\\':
			j++
		case s[j] != '\'':
		case j+1 < len(s) && s[j+1] == '\'':
			j++
		default:
			k := -1
			if d != SQLite {
				k = continuation(s, j+1)
			}
			if k < 0 {
				return j + 1
			}
			j = k
		}
	}
	return len(s)
}

// continuation returns the offset of the quote that continues, on
// PostgreSQL, a string that closed just before s[i]: white space holding
// at least one newline, and -- comments, then a quote. It returns -1 when
// none does.
func continuation(s string, i int) int {
	newline := false
	for i < len(s) {
		switch c := s[i]; {
		case c == '\n' || c == '\r':
			newline = true
			i++
		case isSpace(c):
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			i = lineEnd(Postgres, s, i+2)
		case c == '\'' && newline:
			return i
		default:
			return -1
		}
	}
	return -1
}

// quoted returns the offset just past the identifier whose opening quote,
// " or `, is at s[q]: a doubled quote stands for one.
func quoted(s string, q int) int {
	c := s[q]
	for j := q + 1; j < len(s); j++ {
		if s[j] == c {
			if j+1 < len(s) && s[j+1] == c {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(s)
}

// dollar reads, on PostgreSQL, the token that starts with the $ at s[i]:
// a dollar-quoted string ($tag$…$tag$, $$…$$), a parameter ($1), or a
// lone $.
func dollar(s string, i int) (int, Kind) {
	j := i + 1
	if k := strings.IndexByte(s[j:], '$'); k >= 0 && isTag(s[j:j+k]) {
		tag := s[i : j+k+1]
		if e := strings.Index(s[j+k+1:], tag); e >= 0 {
			return j + k + 1 + e + len(tag), Quoted
		}
		return len(s), Quoted
	}
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	if j > i+1 {
		return j, Param
	}
	return j, Operator
}

// variable reads, on SQLite, the parameter that starts with the $, @, :
// or # at s[i]: a name, with "::" in it and a "(…)" suffix that runs to
// the first ")" (taken) or white space (not taken, and the token is
// illegal). With no name it is the one byte, which SQLite refuses.
func variable(s string, i int) (int, Kind) {
	j, n := i+1, 0
	for j < len(s) {
		switch c := s[j]; {
		case isWord(c) || c == '$':
			n++
			j++
		case c == '(' && n > 0:
			for j++; j < len(s) && !isSpace(s[j]) && s[j] != ')'; j++ {
			}
			if j < len(s) && s[j] == ')' {
				j++
			}
			return j, Param
		case c == ':' && j+1 < len(s) && s[j+1] == ':':
			j += 2
		default:
			if n == 0 {
				return j, Operator
			}
			return j, Param
		}
	}
	if n == 0 {
		return j, Operator
	}
	return j, Param
}

// lineEnd returns the offset of the newline that ends a -- comment whose
// text starts at s[i], or len(s): on PostgreSQL a carriage return ends it
// too.
func lineEnd(d Dialect, s string, i int) int {
	for ; i < len(s); i++ {
		if s[i] == '\n' || s[i] == '\r' && d != SQLite {
			return i
		}
	}
	return i
}

// commentEnd returns the offset just past the */ that ends a block comment
// whose text starts at s[i], or len(s): on PostgreSQL a /* inside opens a
// comment nested in it.
func commentEnd(d Dialect, s string, i int) int {
	for depth := 1; i+1 < len(s); {
		switch {
		case s[i] == '*' && s[i+1] == '/':
			i += 2
			if depth--; depth == 0 {
				return i
			}
		case s[i] == '/' && s[i+1] == '*' && d != SQLite:
			i += 2
			depth++
		default:
			i++
		}
	}
	return len(s)
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isWord reports whether c may stand in a word: a letter, a digit, an
// underscore, or a byte of a non-ASCII character.
func isWord(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) || c >= 0x80
}

// isTag reports whether s is the tag of a dollar quote: empty, or a
// letter or underscore then letters, digits and underscores.
func isTag(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isWord(s[i]) || i == 0 && isDigit(s[i]) {
			return false
		}
	}
	return true
}
