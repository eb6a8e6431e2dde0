// Package query loads a primitive's named SQL queries for one engine.
//
// A primitive keeps its SQL beside its code, one file per operation and
// engine: sql/sqlite/acquire.sql and sql/postgres/acquire.sql. Nothing is
// assembled from input; callers bind arguments.
package query

import (
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// Set represents one engine's queries, by name (the file name without .sql).
type Set map[string]string

// Load reads every .sql file under dir/engine in fsys.
func Load(fsys fs.FS, dir, engine string) (Set, error) {
	root := path.Join(dir, engine)
	entries, err := fs.ReadDir(fsys, root)
	if err != nil {
		return nil, fmt.Errorf("queries for %s: %w", engine, err)
	}
	set := Set{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".sql")
		if !ok {
			continue
		}
		b, err := fs.ReadFile(fsys, path.Join(root, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", name, err)
		}
		set[name] = Embedded(string(b))
	}
	return set, nil
}

// MustLoad is Load for embedded files, which cannot fail at run time once
// the package's tests have loaded them for every engine.
func MustLoad(fsys fs.FS, dir, engine string) Set {
	s, err := Load(fsys, dir, engine)
	if err != nil {
		panic(err)
	}
	return s
}

// Get returns the query called name. A missing query is a programming
// error, caught by the package's tests on each engine, so Get panics.
func (s Set) Get(name string) string {
	q, ok := s[name]
	if !ok {
		panic(fmt.Sprintf("query %q not found", name))
	}
	return q
}
