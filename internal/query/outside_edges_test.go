package query_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/racefree/racefree/internal/query"
)

// queries holds one engine's queries, a file that is not one beside them,
// and nothing for the other engine.
var queries = fstest.MapFS{
	"sql/sqlite/acquire.sql": {Data: []byte("SELECT 1")},
	"sql/sqlite/empty.sql":   {Data: []byte("")},
	"sql/sqlite/README.md":   {Data: []byte("not a query")},
	"sql/sqlite/acquire.bak": {Data: []byte("SELECT 0")},
}

// TestEdgesLoadRefusesAnEngineWithoutQueries: Load reads the engine's .sql
// files (by name without .sql, an empty one included) and nothing else;
// an engine or directory that holds none is an error, of Load as of
// MustLoad (a panic), never an empty set.
func TestEdgesLoadRefusesAnEngineWithoutQueries(t *testing.T) {
	t.Parallel()
	set, err := query.Load(queries, "sql", "sqlite")
	if want := (query.Set{"acquire": "SELECT 1", "empty": ""}); err != nil || !reflect.DeepEqual(set, want) {
		t.Fatalf("Load of sqlite: %v, %v; want %v, nil", set, err, want)
	}
	for _, c := range []struct{ dir, engine string }{{"sql", "postgres"}, {"sql", "sqlite3"}, {"sq", "sqlite"}, {"", "sqlite"}} {
		if set, err := query.Load(queries, c.dir, c.engine); err == nil || set != nil {
			t.Errorf("Load of %s under %q: %v, %v; want nil and an error", c.engine, c.dir, set, err)
		}
		if p := panicked(func() { query.MustLoad(queries, c.dir, c.engine) }); p == "" {
			t.Errorf("MustLoad of %s under %q did not panic", c.engine, c.dir)
		}
	}
}

// TestEdgesGetPanicsOnAMissingQuery: Get returns a query the set holds,
// an empty one included, and panics, naming it, on one it does not.
func TestEdgesGetPanicsOnAMissingQuery(t *testing.T) {
	t.Parallel()
	set := query.MustLoad(queries, "sql", "sqlite")
	if q := set.Get("acquire"); q != "SELECT 1" {
		t.Errorf("Get(acquire) = %q", q)
	}
	if p := panicked(func() { _ = set.Get("empty") }); p != "" {
		t.Errorf("Get of an empty query panicked: %s", p)
	}
	for _, name := range []string{"release", "acquire.sql", "README", ""} {
		p := panicked(func() { _ = set.Get(name) })
		if p == "" || !strings.Contains(p, fmt.Sprintf("%q", name)) {
			t.Errorf("Get(%q): panic %q, want one naming the query", name, p)
		}
	}
}

// panicked runs f and returns what it panicked with, "" if it did not.
func panicked(f func()) (p string) {
	defer func() {
		if r := recover(); r != nil {
			p = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}
