package uniquecheck

import (
	"errors"
	"strings"

	"github.com/racefree/racefree/internal/sqllex"
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

// tokens returns the tokens of the statement, read as PostgreSQL reads
// it (internal/sqllex), with their offsets into s.text and their depth.
func (s stmt) tokens() []token {
	var out []token
	depth := 0
	for _, t := range sqllex.Tokens(sqllex.Postgres, s.text[s.start:s.end]) {
		tok := token{s.start + t.Start, s.start + t.End, depth, t.Text}
		if t.Kind == sqllex.Punct && t.Text == "(" {
			depth++
		}
		if t.Kind == sqllex.Punct && t.Text == ")" {
			depth--
			tok.depth = depth
		}
		out = append(out, tok)
	}
	return out
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
