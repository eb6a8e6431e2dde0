package dsn

import (
	"context"
	"fmt"
	"strings"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/postgres"
	"github.com/racefree/racefree/sqlite"
)

// Default is the DSN used when none is given: a SQLite file in the current
// directory.
const Default = "sqlite:racefree.db"

// Parse splits dsn into the engine name and the engine's own address: the
// file path for SQLite, the URL for PostgreSQL. It does no I/O.
func Parse(dsn string) (engine, addr string, err error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
		if path == "" {
			return "", "", racefree.Invalid("dsn", "sqlite: needs a file path, as in sqlite:racefree.db")
		}
		return racefree.SQLite, path, nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return racefree.Postgres, dsn, nil
	}
	scheme, _, ok := strings.Cut(dsn, ":")
	if !ok || scheme == "" {
		return "", "", racefree.Invalid("dsn", "%q has no scheme: use sqlite:PATH or postgres://…", dsn)
	}
	return "", "", racefree.Invalid("dsn", "unknown scheme %q: use sqlite:PATH or postgres://…", scheme)
}

// Engine returns the engine for dsn without connecting.
func Engine(dsn string) (racefree.Engine, error) {
	name, addr, err := Parse(dsn)
	if err != nil {
		return nil, err
	}
	if name == racefree.Postgres {
		return postgres.NewEngine(addr)
	}
	return sqlite.NewEngine(addr)
}

// Open opens the database named by dsn: sqlite:PATH or postgres://….
func Open(ctx context.Context, dsn string, cfg *racefree.Config) (*racefree.DB, error) {
	name, addr, err := Parse(dsn)
	if err != nil {
		return nil, err
	}
	switch name {
	case racefree.Postgres:
		return postgres.Open(ctx, addr, cfg)
	case racefree.SQLite:
		return sqlite.Open(ctx, addr, cfg)
	}
	return nil, fmt.Errorf("dsn: unreachable engine %q", name)
}

// OpenExisting opens the database dsn names like Open, except that a
// SQLite file is never created: a path that names no file is an error
// matching [sqlite.ErrNoDatabase] (and fs.ErrNotExist), and leaves no file
// behind ([sqlite.OpenExisting]). A PostgreSQL database is opened as by
// Open: connecting creates nothing.
func OpenExisting(ctx context.Context, dsn string, cfg *racefree.Config) (*racefree.DB, error) {
	name, addr, err := Parse(dsn)
	if err != nil {
		return nil, err
	}
	if name == racefree.SQLite {
		return sqlite.OpenExisting(ctx, addr, cfg)
	}
	return Open(ctx, dsn, cfg)
}
