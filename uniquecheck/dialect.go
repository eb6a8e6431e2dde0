package uniquecheck

import (
	"context"
	"database/sql"
	"time"

	"github.com/racefree/racefree"
)

// dialect is everything a check does differently on each engine: its
// read-only transaction, the catalog it reads (primary keys, existing
// indexes, row counts), what the engine refuses outright, and the
// spelling of the SQL that scan.go assembles. New, Open, DedupeSQL and
// FromMigration choose it once, by the engine's name (dialectFor); the
// rest of the package never asks which engine it runs on. The two
// implementations are sqliteDialect (sqlite.go) and postgresDialect
// (postgres.go).
type dialect interface {
	// name is racefree.SQLite or racefree.Postgres.
	name() string

	// readOnly runs fn in a read-only transaction on db (a consistent
	// snapshot that can write nothing), ended after timeout.
	readOnly(ctx context.Context, db *sql.DB, timeout time.Duration, fn func(querier) error) error
	// refuse returns an *racefree.InputError when the engine cannot build
	// spec's index at all, before anything is read; nil otherwise.
	refuse(spec Spec) error
	// primaryKey returns the names of the table's primary key columns,
	// "rowid" or "ctid" when it has none, or an InputError when the
	// table does not exist. ordered reports a single-column key whose
	// values have min and max aggregates.
	primaryKey(ctx context.Context, q querier, name Name) (cols []string, ordered bool, err error)
	// preflight adds the engine's own warnings and refusals, once the
	// primary key is in rep.
	preflight(ctx context.Context, q querier, name Name, spec Spec, rep *Report) error
	// existingIndex returns a warning when an index named idx exists, ""
	// when none does.
	existingIndex(ctx context.Context, q querier, idx Name) (string, error)
	// indexRows returns what a unique index on the table covers, as a
	// FROM item: quoted, or ONLY quoted where the index covers the
	// table's own rows and not its children's (a PostgreSQL table that
	// others INHERITS from; a partitioned table's index covers its
	// partitions).
	indexRows(ctx context.Context, q querier, name Name, quoted string) (string, error)
	// planOnce reports whether the check's aggregate should compute the
	// keys once per row (groupBy with once).
	planOnce(ctx context.Context, q querier, table string, spec Spec) (bool, error)
	// rows returns how many rows the table holds, exactly or as the
	// planner estimates it.
	rows(ctx context.Context, q querier, name Name, quoted string) (n int64, exact bool, err error)

	// namesPairs reports whether a check's aggregate keeps the lowest and
	// highest key of each group (a single-column primary key with min and
	// max), which then name both rows of a pair without a second read.
	namesPairs() bool
	// notDistinct is the operator that compares two values, NULLs equal.
	notDistinct() string
	// jsonArray is the function that builds a JSON array of its
	// arguments; jsonAgg(expr) the aggregate of expr's values as a JSON
	// array, as text; asText(expr) expr as text.
	jsonArray() string
	jsonAgg(expr string) string
	asText(expr string) string
	// placeholders rewrites the ?1 and ?2 of an assembled query into the
	// engine's parameters.
	placeholders(query string) string
	// allGroups is the LIMIT parameter that lists every group.
	allGroups() any

	// rowID is what names one row of the table in DedupeSQL's script,
	// from the primary key's columns (or rowid, ctid): on PostgreSQL the
	// row's table too (tableoid), since a primary key or ctid names a row
	// of one table only, and a partitioned or inherited table's rows lie
	// in several.
	rowID(pk []string) []string
	// beginExclusive is the start of DedupeSQL's script: a transaction
	// that takes the write lock on table before it reads anything.
	beginExclusive(table string) string
	// migrationTable names a table for matching a migration's statements
	// on it.
	migrationTable(table string) string
	// reparse reports whether a migration that the parser (PostgreSQL's
	// own) refuses as a whole is parsed again one statement at a time,
	// each rewritten for it (sqliteToPostgres): the SQL of an engine the
	// parser reads only in part.
	reparse() bool
}

// dialectFor returns the dialect of engine, or an *racefree.InputError
// naming it when it is neither [racefree.SQLite] nor [racefree.Postgres].
func dialectFor(engine string) (dialect, error) {
	switch engine {
	case racefree.SQLite:
		return sqliteDialect{}, nil
	case racefree.Postgres:
		return postgresDialect{}, nil
	}
	return nil, racefree.Invalid("engine", "unknown engine %q", engine)
}
