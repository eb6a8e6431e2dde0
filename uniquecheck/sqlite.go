package uniquecheck

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"time"

	"github.com/racefree/racefree"
)

// sqliteDialect is the dialect of SQLite.
type sqliteDialect struct{}

func (sqliteDialect) name() string { return racefree.SQLite }

// readOnly: a dedicated connection with PRAGMA query_only=1 and a deferred
// BEGIN (never IMMEDIATE, which would take the write lock); the context's
// deadline interrupts it. The connection goes back to the pool only once
// both the ROLLBACK and query_only=0 succeeded.
func (sqliteDialect) readOnly(ctx context.Context, db *sql.DB, _ time.Duration, fn func(querier) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	clean := false
	defer func() {
		if !clean { // never hand a query_only or mid-transaction connection back to the pool
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	if _, err := conn.ExecContext(ctx, `PRAGMA query_only = 1`); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, `BEGIN DEFERRED`); err != nil {
		return err
	}
	ferr := fn(conn)
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, rerr := conn.ExecContext(bg, `ROLLBACK`)
	_, perr := conn.ExecContext(bg, `PRAGMA query_only = 0`)
	clean = rerr == nil && perr == nil
	return ferr
}

// refuse: SQLite's unique indexes always treat NULLs as distinct.
func (sqliteDialect) refuse(spec Spec) error {
	if spec.NullsNotDistinct {
		return racefree.Invalid("nulls-not-distinct", "SQLite unique indexes always treat NULLs as distinct")
	}
	return nil
}

// primaryKey: every SQLite value has min and max, so a single-column key
// is ordered.
func (sqliteDialect) primaryKey(ctx context.Context, q querier, name Name) (cols []string, ordered bool, err error) {
	schema := name.Schema
	if schema == "" {
		schema = "main"
	}
	rows, err := q.QueryContext(ctx, `SELECT name, pk FROM pragma_table_info(?, ?) ORDER BY pk`, name.Table, schema)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var col string
		var pk int
		if err := rows.Scan(&col, &pk); err != nil {
			return nil, false, err
		}
		n++
		if pk > 0 {
			cols = append(cols, col)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	if n == 0 {
		return nil, false, racefree.Invalid("table", "%s does not exist", name)
	}
	if len(cols) == 0 {
		cols = []string{"rowid"}
	}
	return cols, len(cols) == 1, nil
}

// preflight: nothing of SQLite's own (a table without a primary key has a
// stable rowid).
func (sqliteDialect) preflight(context.Context, querier, Name, Spec, *Report) error { return nil }

// existingIndex: SQLite's names are case-insensitive (ASCII), so an index
// Users_Email is the index users_email.
func (sqliteDialect) existingIndex(ctx context.Context, q querier, idx Name) (string, error) {
	master := "sqlite_master"
	if idx.Schema != "" {
		s, err := quoteIdent(idx.Schema)
		if err != nil {
			return "", err
		}
		master = s + ".sqlite_master"
	}
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM `+master+` WHERE type = 'index' AND name = ? COLLATE NOCASE`, idx.Table).Scan(&n); err != nil {
		return "", err
	}
	if n > 0 {
		return fmt.Sprintf("index %s already exists: the migration will fail, or do nothing with IF NOT EXISTS", idx), nil
	}
	return "", nil
}

// rowID: a SQLite table's rows are its own.
func (sqliteDialect) rowID(pk []string) []string { return pk }

// indexRows: SQLite has no table inheritance.
func (sqliteDialect) indexRows(_ context.Context, _ querier, _ Name, quoted string) (string, error) {
	return quoted, nil
}

// planOnce: when a key is an expression, not a column name, and the
// engine sorts the rows to group them. When an index gives the keys'
// order, the plain aggregate reads it in that order without a sort, which
// a subquery would prevent, so the engine's own plan decides.
func (sqliteDialect) planOnce(ctx context.Context, q querier, table string, spec Spec) (bool, error) {
	expr := false
	for _, k := range spec.Keys {
		if n, err := ParseName(k); err != nil || n.Schema != "" {
			expr = true
		}
	}
	if !expr {
		return false, nil
	}
	rows, err := q.QueryContext(ctx, `EXPLAIN QUERY PLAN `+groupBy(table, spec, "", false))
	if err != nil {
		return false, err
	}
	defer rows.Close()
	sorts := false
	for rows.Next() {
		var id, parent, unused int64
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			return false, err
		}
		if strings.Contains(detail, "TEMP B-TREE FOR GROUP BY") {
			sorts = true
		}
	}
	return sorts, rows.Err()
}

// rows is an exact count (a scan of the smallest index).
func (sqliteDialect) rows(ctx context.Context, q querier, _ Name, quoted string) (n int64, exact bool, err error) {
	err = q.QueryRowContext(ctx, `SELECT count(*) FROM `+quoted).Scan(&n)
	return n, true, err
}

// namesPairs: SQLite's GROUP BY sorts every row, and there the two
// aggregates cost more than reading the listed groups again.
func (sqliteDialect) namesPairs() bool             { return false }
func (sqliteDialect) notDistinct() string          { return "IS" }
func (sqliteDialect) jsonArray() string            { return "json_array" }
func (sqliteDialect) jsonAgg(expr string) string   { return "json_group_array(" + expr + ")" }
func (sqliteDialect) asText(expr string) string    { return expr }
func (sqliteDialect) placeholders(q string) string { return q }

// allGroups: SQLite reads a negative LIMIT as none.
func (sqliteDialect) allGroups() any { return -1 }

func (sqliteDialect) beginExclusive(string) string { return "BEGIN IMMEDIATE;\n" }

// reparse: the parser reads SQLite's SQL only in part; each statement is
// parsed again alone, rewritten for it.
func (sqliteDialect) reparse() bool { return true }

// migrationTable: SQLite's main schema is the default one.
func (sqliteDialect) migrationTable(table string) string {
	return strings.TrimPrefix(table, `"main".`)
}
