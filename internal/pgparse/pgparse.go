// Package pgparse parses SQL with PostgreSQL's own parser (libpg_query,
// compiled to WebAssembly by github.com/wasilibs/go-pgquery), one parse at
// a time.
//
// go-pgquery keeps a pool of WebAssembly instances of the parser and makes
// a new one, compiling the whole module again (seconds of CPU, a minute
// under the race detector), whenever a parse finds the pool empty, so
// concurrent parses would each pay for a compilation. A parse takes
// microseconds; taking turns keeps it to one instance and one compilation
// per process, for every package that parses.
package pgparse

import (
	"sync"

	"github.com/wasilibs/go-pgquery/parser"
)

var mu sync.Mutex

// ToJSON returns the parse tree of text in libpg_query's JSON form, or the
// parser's error for text that does not parse.
func ToJSON(text string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	return parser.ParseToJSON(text)
}

// PlPgSQLToJSON returns the parse tree of a PL/pgSQL function, given as the
// whole CREATE FUNCTION statement (pg_get_functiondef prints one), in
// libpg_query's JSON form: a list of PLpgSQL_function trees whose SQL
// statements and expressions are left as text (PLpgSQL_expr.query) for
// ToJSON.
func PlPgSQLToJSON(createFunction string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	return parser.ParsePlPgSqlToJSON(createFunction)
}
