package getorcreate

import (
	"strings"
)

// changesData reports the first word of sel, a select that starts with
// SELECT or WITH, by which it would change data or run a second statement
// ("DELETE", "UPDATE", "INSERT", "MERGE", "REPLACE INTO", ";"), or "" when
// it has none. Do runs the select when the key exists, in the caller's
// transaction or on the pool, so a data-changing common table expression
// (WITH gone AS (DELETE … RETURNING …) SELECT …, or WITH … DELETE …
// RETURNING …) would run as a side effect of reading.
//
// It reads words outside string literals ('…', E'…', PostgreSQL's
// $tag$…$tag$), quoted identifiers ("…", and SQLite's `…` and […]) and
// comments, so a literal or a quoted identifier spelled like a keyword
// passes. UPDATE after FOR or KEY is a locking clause (FOR UPDATE, FOR NO
// KEY UPDATE), and REPLACE not followed by INTO is the replace() function.
// An unquoted identifier spelled like one of the keywords is refused: the
// error names it, and quoting it passes.
func changesData(sel string) string {
	var prev string // the previous word, upper-cased
	words := sqlWords(sel)
	for i, w := range words {
		switch w {
		case "INSERT", "DELETE", "MERGE":
			return w
		case "UPDATE":
			if prev != "FOR" && prev != "KEY" {
				return w
			}
		case "REPLACE":
			if i+1 < len(words) && words[i+1] == "INTO" {
				return "REPLACE INTO"
			}
		case ";":
			if i+1 < len(words) {
				return w
			}
		}
		prev = w
	}
	return ""
}

// sqlWords returns the bare words of s, upper-cased, and each ";", in
// order, skipping literals, quoted identifiers, comments and other
// punctuation.
func sqlWords(s string) []string {
	var words []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '-' && strings.HasPrefix(s[i:], "--"):
			i = skipTo(s, i+2, "\n")
		case c == '/' && strings.HasPrefix(s[i:], "/*"):
			i = skipTo(s, i+2, "*/")
		case c == '\'':
			escapes := i > 0 && (s[i-1] == 'E' || s[i-1] == 'e') && (i == 1 || !isWordByte(s[i-2]))
			i = skipQuoted(s, i+1, '\'', escapes)
		case c == '"' || c == '`':
			i = skipQuoted(s, i+1, c, false)
		case c == '[':
			i = skipTo(s, i+1, "]")
		case c == '$' && i+1 < len(s) && !isDigit(s[i+1]):
			// $tag$…$tag$ or $$…$$; $1 is a placeholder.
			j := i + 1
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			if j < len(s) && s[j] == '$' {
				i = skipTo(s, j+1, s[i:j+1])
			} else {
				i = j
			}
		case c == ';':
			words = append(words, ";")
			i++
		case isWordByte(c) && !isDigit(c):
			j := i
			for j < len(s) && (isWordByte(s[j]) || s[j] == '$') {
				j++
			}
			w := strings.ToUpper(s[i:j])
			if w == "E" && j < len(s) && s[j] == '\'' {
				i = j // E'…': the literal is next
				continue
			}
			words = append(words, w)
			i = j
		default:
			i++
		}
	}
	return words
}

// skipTo returns the index after the first end in s at or after i, or
// len(s).
func skipTo(s string, i int, end string) int {
	if k := strings.Index(s[i:], end); k >= 0 {
		return i + k + len(end)
	}
	return len(s)
}

// skipQuoted returns the index after the quote q that closes a literal or
// identifier starting at i, where a doubled q stands for itself and, with
// escapes (E'…'), a backslash escapes the next byte.
func skipQuoted(s string, i int, q byte, escapes bool) int {
	for i < len(s) {
		switch {
		case escapes && s[i] == '\\':
			i += 2
		case s[i] == q && i+1 < len(s) && s[i+1] == q:
			i += 2
		case s[i] == q:
			return i + 1
		default:
			i++
		}
	}
	return len(s)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isWordByte(c byte) bool {
	return c == '_' || isDigit(c) || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || c >= 0x80
}
