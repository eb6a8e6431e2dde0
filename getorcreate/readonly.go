package getorcreate

import (
	"strings"

	"github.com/racefree/racefree/internal/sqllex"
)

// readings are the ways changesData reads a select, one per way an engine
// can read it: PostgreSQL (with standard_conforming_strings on, its
// default, and off, which a server, database, role or session may set)
// and SQLite. Do judges the select before it knows the engine (a *sql.Tx
// names none until the insert ran in it), and the engines split one text
// differently: on PostgreSQL [ is an array subscript and block comments
// nest, on SQLite […] is an identifier, $q$ a parameter and E'\' a word
// and a string. A select passes only when every reading finds it changes
// nothing.
var readings = []sqllex.Dialect{sqllex.Postgres, sqllex.PostgresNonConforming, sqllex.SQLite}

// changesData reports the first word of sel, a select that starts with
// SELECT or WITH, by which it would change data or run a second statement
// ("DELETE", "UPDATE", "INSERT", "MERGE", "REPLACE INTO", "INTO", ";"), and the
// reading that finds it, or "" when no reading (see readings) finds one.
// Do runs the select when the key exists, in the caller's transaction or
// on the pool, so a data-changing common table expression (WITH gone AS
// (DELETE … RETURNING …) SELECT …, or WITH … DELETE … RETURNING …) would
// run as a side effect of reading.
//
// It reads the tokens internal/sqllex finds outside strings, quoted
// identifiers and comments, as each engine delimits them, so a literal or
// a quoted identifier spelled like a keyword passes. UPDATE after FOR or
// KEY is a locking clause (FOR UPDATE, FOR NO KEY UPDATE), and REPLACE
// not followed by INTO is the replace() function. A semicolon followed by
// any token is a second statement. An unquoted identifier spelled like
// one of the keywords is refused: the error names it, and quoting it
// passes. A select that holds such a word only in one engine's reading
// (a literal that ends in a backslash, read as PostgreSQL with
// standard_conforming_strings off) is refused too: pass the value as an
// argument instead.
func changesData(sel string) (string, sqllex.Dialect) {
	for _, d := range readings {
		if w := changesDataAs(d, sel); w != "" {
			return w, d
		}
	}
	return "", 0
}

// changesDataAs is changesData in the one reading d.
func changesDataAs(d sqllex.Dialect, sel string) string {
	var prev string // the previous token, a word upper-cased
	words := sqlWords(d, sel)
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
		case "INTO":
			// SELECT … INTO t creates the table t on PostgreSQL; every
			// other INTO follows a word refused above.
			return w
		case ";":
			if i+1 < len(words) {
				return w
			}
		}
		prev = w
	}
	return ""
}

// sqlWords returns the tokens of s read in d, in order, skipping white
// space and comments: words upper-cased, every other token as written (a
// string or quoted identifier with its quotes, so never spelled like a
// keyword).
func sqlWords(d sqllex.Dialect, s string) []string {
	toks := sqllex.Tokens(d, s)
	words := make([]string, len(toks))
	for i, t := range toks {
		words[i] = t.Text
		if t.Kind == sqllex.Word {
			words[i] = strings.ToUpper(t.Text)
		}
	}
	return words
}
