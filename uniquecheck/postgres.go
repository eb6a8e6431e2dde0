package uniquecheck

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/snapshot"
)

// postgresDialect is the dialect of PostgreSQL.
type postgresDialect struct{}

func (postgresDialect) name() string { return racefree.Postgres }

// readOnly: one read-only snapshot bounded by statement_timeout
// ([snapshot.ReadOnly]), with row_security off for the transaction: a
// query that row-level security would filter for this role then fails
// instead of counting only the rows the policies show (preflight names
// the checked table's case first, as ErrRowsHidden; this catches any
// other table an expression reads).
func (postgresDialect) readOnly(ctx context.Context, db *sql.DB, timeout time.Duration, fn func(querier) error) error {
	return snapshot.ReadOnly(ctx, db, timeout, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `SELECT set_config('row_security', 'off', true)`); err != nil {
			return fmt.Errorf("row security: %w", err)
		}
		return fn(tx)
	})
}

// refuse: NULLS NOT DISTINCT depends on the server's version, which
// preflight checks inside the transaction.
func (postgresDialect) refuse(Spec) error { return nil }

func (postgresDialect) primaryKey(ctx context.Context, q querier, name Name) (cols []string, ordered bool, err error) {
	var exists bool
	if err := q.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, name.String()).Scan(&exists); err != nil {
		return nil, false, err
	}
	if !exists {
		return nil, false, racefree.Invalid("table", "%s does not exist", name)
	}
	rows, err := q.QueryContext(ctx, `
SELECT a.attname, a.atttypid::regtype::text
FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
WHERE i.indrelid = to_regclass($1) AND i.indisprimary
ORDER BY array_position(i.indkey::int2[], a.attnum)`, name.String())
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var types []string
	for rows.Next() {
		var col, typ string
		if err := rows.Scan(&col, &typ); err != nil {
			return nil, false, err
		}
		cols, types = append(cols, col), append(types, typ)
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	if len(cols) == 0 {
		return []string{"ctid"}, false, nil
	}
	return cols, len(cols) == 1 && orderedTypes[types[0]], nil
}

// orderedTypes are the PostgreSQL primary key types that have min and max
// aggregates, by regtype name.
var orderedTypes = map[string]bool{
	"smallint": true, "integer": true, "bigint": true, "numeric": true,
	"text": true, "character varying": true, "character": true,
	"date": true, "timestamp without time zone": true, "timestamp with time zone": true,
}

// preflight refuses a table whose rows row-level security would filter
// for this role (ErrRowsHidden), warns about a table without a primary
// key (its rows are named by ctid) and refuses NULLS NOT DISTINCT before
// PostgreSQL 15.
func (postgresDialect) preflight(ctx context.Context, q querier, name Name, spec Spec, rep *Report) error {
	var hidden bool
	if err := q.QueryRowContext(ctx, `SELECT row_security_active(to_regclass($1))`, name.String()).Scan(&hidden); err != nil {
		return err
	}
	if hidden {
		return fmt.Errorf("%w: %s has row-level security on for this role, so the check would see only the rows its policies show; run it as a role that bypasses row-level security (BYPASSRLS or a superuser), or as the table's owner when the table does not FORCE ROW LEVEL SECURITY", ErrRowsHidden, name)
	}
	if len(rep.PrimaryKey) == 1 && rep.PrimaryKey[0] == "ctid" {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s has no primary key: rows are identified by ctid, which changes when a row is updated", name))
	}
	if spec.NullsNotDistinct {
		var v int
		if err := q.QueryRowContext(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
			return err
		}
		if v < 150000 {
			return racefree.Invalid("nulls-not-distinct", "needs PostgreSQL 15 or later; this server is %d", v)
		}
	}
	return nil
}

func (postgresDialect) existingIndex(ctx context.Context, q querier, idx Name) (string, error) {
	var valid bool
	err := q.QueryRowContext(ctx, `SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass($1)`, idx.String()).Scan(&valid)
	switch {
	case err == sql.ErrNoRows:
		return "", nil
	case err != nil:
		return "", err
	case !valid:
		return fmt.Sprintf("index %s exists but is INVALID (left by a failed CREATE INDEX CONCURRENTLY): it enforces nothing; DROP INDEX CONCURRENTLY it before the migration, which IF NOT EXISTS would otherwise skip", idx), nil
	}
	return fmt.Sprintf("index %s already exists: the migration will fail, or do nothing with IF NOT EXISTS", idx), nil
}

// indexRows: an ordinary table's unique index covers its own rows alone,
// not those of the tables that INHERITS from it, which a query on it reads
// unless it says ONLY; a partitioned table's covers every partition.
func (postgresDialect) indexRows(ctx context.Context, q querier, name Name, quoted string) (string, error) {
	var ordinary bool
	if err := q.QueryRowContext(ctx, `SELECT relkind = 'r' FROM pg_class WHERE oid = to_regclass($1)`, name.String()).Scan(&ordinary); err != nil {
		return "", err
	}
	if ordinary {
		return "ONLY " + quoted, nil
	}
	return quoted, nil
}

// rowID: tableoid beside the key, since two partitions (or a parent and
// the table that inherits from it) hold rows of the same ctid, or of the
// same primary key value.
func (postgresDialect) rowID(pk []string) []string { return append([]string{"tableoid"}, pk...) }

// planOnce: PostgreSQL's hash aggregate computes each key once already.
func (postgresDialect) planOnce(context.Context, querier, string, Spec) (bool, error) {
	return false, nil
}

// rows is the planner's estimate (pg_class.reltuples, which ANALYZE and
// autovacuum keep): 0 for a table never analyzed.
func (postgresDialect) rows(ctx context.Context, q querier, name Name, _ string) (int64, bool, error) {
	var est float64
	if err := q.QueryRowContext(ctx, `SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)`, name.String()).Scan(&est); err != nil {
		return 0, false, err
	}
	return max(0, int64(est)), false, nil // -1: never analyzed
}

// namesPairs: PostgreSQL's hash aggregate keeps min and max at almost no
// cost.
func (postgresDialect) namesPairs() bool             { return true }
func (postgresDialect) notDistinct() string          { return "IS NOT DISTINCT FROM" }
func (postgresDialect) jsonArray() string            { return "json_build_array" }
func (postgresDialect) jsonAgg(expr string) string   { return "json_agg(" + expr + ")::text" }
func (postgresDialect) asText(expr string) string    { return "(" + expr + ")::text" }
func (postgresDialect) placeholders(q string) string { return pgPlaceholders.Replace(q) }

var pgPlaceholders = strings.NewReplacer("?1", "$1", "?2", "$2")

// allGroups: LIMIT NULL is no limit.
func (postgresDialect) allGroups() any { return nil }

func (postgresDialect) beginExclusive(table string) string {
	return "BEGIN;\nLOCK TABLE " + table + " IN SHARE ROW EXCLUSIVE MODE;\n"
}

func (postgresDialect) migrationTable(table string) string { return table }

// reparse: the parser is PostgreSQL's own, and its refusal is final.
func (postgresDialect) reparse() bool { return false }
