package uniquecheck

import (
	"errors"
	"strings"
)

// token is one lexical token of a statement the parser has already
// accepted: the lexer only has to find boundaries, not judge syntax.
type token struct {
	start, end int // byte offsets into stmt.text
	depth      int // parenthesis depth before the token
	text       string
}

// stmt is one statement of a migration: text[start:end].
type stmt struct {
	text       string
	start, end int
}

func (s stmt) tokens() []token {
	var out []token
	t := s.text
	depth := 0
	for i := s.start; i < s.end; {
		c := t[i]
		j := i + 1
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case c == '-' && j < s.end && t[j] == '-':
			for j < s.end && t[j] != '\n' {
				j++
			}
			i = j
			continue
		case c == '/' && j < s.end && t[j] == '*':
			// Block comments nest, as PostgreSQL reads them.
			i = j + 1
			for nest := 1; nest > 0 && i < s.end; i++ {
				switch {
				case strings.HasPrefix(t[i:s.end], "*/"):
					nest--
					i++
				case strings.HasPrefix(t[i:s.end], "/*"):
					nest++
					i++
				}
			}
			continue
		case c == '\'' || c == '"':
			j = s.quoted(i, false)
		case c == '$':
			tag := "$"
			if k := strings.IndexByte(t[j:s.end], '$'); k >= 0 && isTag(t[j:j+k]) {
				tag = t[i : j+k+1]
				if e := strings.Index(t[j+k+1:s.end], tag); e >= 0 {
					j = j + k + 1 + e + len(tag)
				}
			}
			for j < s.end && tag == "$" && t[j] >= '0' && t[j] <= '9' {
				j++
			}
		case isWord(c):
			for j < s.end && (isWord(t[j]) || t[j] == '$') {
				j++
			}
			// E'…', B'…', X'…', N'…': a one-letter prefix stays one token
			// with its string; only in E'…' does a backslash escape.
			if j < s.end && j-i == 1 && t[j] == '\'' {
				j = s.quoted(j, c == 'E' || c == 'e')
			}
		case c == '(':
			out = append(out, token{i, j, depth, "("})
			depth++
			i = j
			continue
		case c == ')':
			depth--
			out = append(out, token{i, j, depth, ")"})
			i = j
			continue
		case strings.IndexByte(",.;[]", c) >= 0:
		default:
			// An operator ends where a comment starts, as in PostgreSQL.
			for j < s.end && strings.IndexByte("+-*/<>=~!@#%^&|`?", t[j]) >= 0 && !strings.HasPrefix(t[j:s.end], "--") && !strings.HasPrefix(t[j:s.end], "/*") {
				j++
			}
		}
		out = append(out, token{i, j, depth, t[i:j]})
		i = j
	}
	return out
}

// quoted returns the offset just past the string or quoted identifier
// whose opening quote is at q: a doubled quote stands for one, and with
// escape (an E'…' string) a backslash takes the next byte with it.
func (s stmt) quoted(q int, escape bool) int {
	t, c := s.text, s.text[q]
	j := q + 1
	for j < s.end {
		if t[j] == c {
			if j+1 < s.end && t[j+1] == c {
				j += 2
				continue
			}
			return j + 1
		}
		if escape && t[j] == '\\' {
			j++
		}
		j++
	}
	return j
}

func isWord(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

func isTag(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isWord(s[i]) || (i == 0 && s[i] >= '0' && s[i] <= '9') {
			return false
		}
	}
	return true
}

// indexParts returns the tokens of each key of a CREATE INDEX, and the text
// of its WHERE predicate.
func (s stmt) indexParts() ([][]token, string, error) {
	toks := s.tokens()
	i := 0
	for ; i < len(toks) && !(toks[i].depth == 0 && strings.EqualFold(toks[i].text, "ON")); i++ {
	}
	for ; i < len(toks) && !(toks[i].depth == 0 && toks[i].text == "("); i++ {
	}
	if i == len(toks) {
		return nil, "", errors.New("no key list")
	}
	var elems [][]token
	var cur []token
	for i++; i < len(toks); i++ {
		t := toks[i]
		if t.depth == 0 && t.text == ")" {
			elems = append(elems, cur)
			break
		}
		if t.depth == 1 && t.text == "," {
			elems = append(elems, cur)
			cur = nil
			continue
		}
		cur = append(cur, t)
	}
	for ; i < len(toks); i++ {
		if toks[i].depth == 0 && strings.EqualFold(toks[i].text, "WHERE") && i+1 < len(toks) {
			return elems, strings.TrimSpace(s.text[toks[i+1].start:toks[len(toks)-1].end]), nil
		}
	}
	return elems, "", nil
}

// dropParens removes a trailing parenthesised group.
func dropParens(toks []token) []token {
	if len(toks) == 0 || toks[len(toks)-1].text != ")" {
		return toks
	}
	d := toks[len(toks)-1].depth
	for i := len(toks) - 2; i >= 0; i-- {
		if toks[i].text == "(" && toks[i].depth == d {
			return toks[:i]
		}
	}
	return toks
}

// defaultExpr returns the text of the DEFAULT expression whose keyword is
// at offset at, ending before the next constraint of the column (bounds) or
// at the end of the column definition.
func (s stmt) defaultExpr(at int, bounds []int) string {
	toks := s.tokens()
	i := 0
	for ; i < len(toks) && toks[i].start != at; i++ {
	}
	if i == len(toks) {
		return ""
	}
	d := toks[i].depth
	first, last := i+1, -1
	for j := first; j < len(toks); j++ {
		t := toks[j]
		stop := t.depth < d || t.depth == d && (t.text == "," || t.text == ";")
		for _, b := range bounds {
			if b == t.start && b != at {
				stop = true
			}
		}
		if stop {
			break
		}
		last = j
	}
	if last < first {
		return ""
	}
	return s.text[toks[first].start:toks[last].end]
}

// generatedExpr returns the text of the expression of the GENERATED ALWAYS
// AS (expr) constraint whose keyword is at offset at: what is inside the
// first parentheses after it.
func (s stmt) generatedExpr(at int) string {
	toks := s.tokens()
	i := 0
	for ; i < len(toks) && toks[i].start != at; i++ {
	}
	for ; i < len(toks) && toks[i].text != "("; i++ {
	}
	if i+1 >= len(toks) {
		return ""
	}
	d := toks[i].depth
	for j := i + 1; j < len(toks); j++ {
		if toks[j].text == ")" && toks[j].depth == d {
			if j == i+1 {
				return ""
			}
			return s.text[toks[i+1].start:toks[j-1].end]
		}
	}
	return ""
}
