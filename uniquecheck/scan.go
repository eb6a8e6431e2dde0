package uniquecheck

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/racefree/racefree"
)

// The SQL of a check is assembled here and nowhere else. Table and column
// names reach it only through quoteIdent; key expressions and the predicate
// are the operator's own SQL, which checkExpr has kept to one expression and
// which run only inside the read-only transaction of Checker.readOnly. Each
// is wrapped in parentheses, on lines of its own when it holds "--", so that
// a trailing line comment ends before the closing parenthesis.

func wrap(expr string) string {
	if strings.Contains(expr, "--") {
		return "(\n" + expr + "\n)"
	}
	return "(" + expr + ")"
}

// preflight finds the table and its primary key, checks the engine supports
// the spec, has the engine prepare each expression, and collects warnings.
func (c *Checker) preflight(ctx context.Context, q querier, name Name, spec Spec, rep *Report) error {
	pk, err := c.primaryKey(ctx, q, name)
	if err != nil {
		return err
	}
	rep.PrimaryKey = pk
	if c.engine == racefree.Postgres {
		if len(pk) == 1 && pk[0] == "ctid" {
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
	}
	table := name.String()
	for _, k := range spec.Keys {
		if err := prepare(ctx, q, `SELECT `+wrap(k)+` FROM `+table+` WHERE 1 = 0`); err != nil {
			return fmt.Errorf("key %q: %w", k, err)
		}
	}
	if spec.Where != "" {
		if err := prepare(ctx, q, `SELECT 1 FROM `+table+` WHERE `+wrap(spec.Where)+` AND 1 = 0`); err != nil {
			return fmt.Errorf("where %q: %w", spec.Where, err)
		}
	}
	if spec.IfNotExists {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("IF NOT EXISTS: if an index named %q already exists (even an INVALID one), the migration succeeds without building this index", spec.IndexName))
	}
	if spec.IndexName != "" {
		w, err := c.existingIndex(ctx, q, Name{Schema: name.Schema, Table: spec.IndexName})
		if err != nil {
			return err
		}
		if w != "" {
			rep.Warnings = append(rep.Warnings, w)
		}
	}
	return nil
}

func prepare(ctx context.Context, q querier, query string) error {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	return rows.Close()
}

// primaryKey returns the quoted-ready names of the table's primary key
// columns, "rowid" or "ctid" when it has none, or an InputError when the
// table does not exist.
func (c *Checker) primaryKey(ctx context.Context, q querier, name Name) ([]string, error) {
	var cols []string
	if c.engine == racefree.Postgres {
		var exists bool
		if err := q.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, name.String()).Scan(&exists); err != nil {
			return nil, err
		}
		if !exists {
			return nil, racefree.Invalid("table", "%s does not exist", name)
		}
		rows, err := q.QueryContext(ctx, `
SELECT a.attname
FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
WHERE i.indrelid = to_regclass($1) AND i.indisprimary
ORDER BY array_position(i.indkey::int2[], a.attnum)`, name.String())
		if err != nil {
			return nil, err
		}
		if cols, err = scanStrings(rows); err != nil {
			return nil, err
		}
		if len(cols) == 0 {
			cols = []string{"ctid"}
		}
		return cols, nil
	}
	schema := name.Schema
	if schema == "" {
		schema = "main"
	}
	rows, err := q.QueryContext(ctx, `SELECT name, pk FROM pragma_table_info(?, ?) ORDER BY pk`, name.Table, schema)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var col string
		var pk int
		if err := rows.Scan(&col, &pk); err != nil {
			return nil, err
		}
		n++
		if pk > 0 {
			cols = append(cols, col)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, racefree.Invalid("table", "%s does not exist", name)
	}
	if len(cols) == 0 {
		cols = []string{"rowid"}
	}
	return cols, nil
}

// existingIndex warns when an index named idx already exists.
func (c *Checker) existingIndex(ctx context.Context, q querier, idx Name) (string, error) {
	if c.engine == racefree.Postgres {
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
	master := "sqlite_master"
	if idx.Schema != "" {
		s, err := quoteIdent(idx.Schema)
		if err != nil {
			return "", err
		}
		master = s + ".sqlite_master"
	}
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM `+master+` WHERE type = 'index' AND name = ?`, idx.Table).Scan(&n); err != nil {
		return "", err
	}
	if n > 0 {
		return fmt.Sprintf("index %s already exists: the migration will fail, or do nothing with IF NOT EXISTS", idx), nil
	}
	return "", nil
}

func scanStrings(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// groupQuery returns the query that groups the rows the index covers by its
// keys and keeps the groups of more than one row, with the totals over all
// groups as window columns, largest groups first.
func (c *Checker) groupQuery(table string, spec Spec, pk []string) (string, error) {
	var sel, filter, outer, order []string
	for i, k := range spec.Keys {
		alias := fmt.Sprintf("k%d", i+1)
		sel = append(sel, wrap(k)+" AS "+alias)
		if !spec.NullsNotDistinct {
			// NULLS DISTINCT: a row with a NULL in any key conflicts with nothing.
			filter = append(filter, wrap(k)+" IS NOT NULL")
		}
		outer = append(outer, "CAST("+alias+" AS TEXT)")
		order = append(order, alias)
	}
	if spec.Where != "" {
		filter = append(filter, wrap(spec.Where))
	}
	pkq := make([]string, len(pk))
	for i, col := range pk {
		if col == "rowid" || col == "ctid" {
			pkq[i] = col
			if col == "ctid" {
				pkq[i] = "ctid::text"
			}
			continue
		}
		q, err := quoteIdent(col)
		if err != nil {
			return "", err
		}
		pkq[i] = q
	}
	row := pkq[0]
	if len(pkq) > 1 {
		if c.engine == racefree.Postgres {
			row = "json_build_array(" + strings.Join(pkq, ", ") + ")"
		} else {
			row = "json_array(" + strings.Join(pkq, ", ") + ")"
		}
	}
	agg := "json_group_array(" + row + " ORDER BY " + strings.Join(pkq, ", ") + ")"
	if c.engine == racefree.Postgres {
		agg = "json_agg(" + row + " ORDER BY " + strings.Join(pkq, ", ") + ")::text"
	}
	where := ""
	if len(filter) > 0 {
		where = "\nWHERE " + strings.Join(filter, "\n  AND ")
	}
	groupBy := make([]string, len(spec.Keys))
	for i := range groupBy {
		groupBy[i] = fmt.Sprint(i + 1)
	}
	return `SELECT ` + strings.Join(outer, ", ") + `, n, pks, count(*) OVER (), CAST(sum(n - 1) OVER () AS BIGINT)
FROM (
SELECT ` + strings.Join(sel, ", ") + `, count(*) AS n, ` + agg + ` AS pks
FROM ` + table + where + `
GROUP BY ` + strings.Join(groupBy, ", ") + `
HAVING count(*) > 1
) AS d
ORDER BY n DESC, ` + strings.Join(order, ", ") + `
LIMIT ?`, nil
}

func (c *Checker) scan(ctx context.Context, q querier, table string, spec Spec, limit int, rep *Report) error {
	query, err := c.groupQuery(table, spec, rep.PrimaryKey)
	if err != nil {
		return err
	}
	if c.engine == racefree.Postgres {
		query = strings.Replace(query, "LIMIT ?", "LIMIT $1", 1)
	}
	var lim any = limit
	if limit < 0 {
		lim = nil // LIMIT NULL: all groups (PostgreSQL); SQLite reads a negative limit as none
		if c.engine == racefree.SQLite {
			lim = -1
		}
	}
	rows, err := q.QueryContext(ctx, query, lim)
	if err != nil {
		return err
	}
	defer rows.Close()
	nk := len(spec.Keys)
	for rows.Next() {
		vals := make([]sql.NullString, nk)
		var g Group
		var pks string
		dest := make([]any, 0, nk+4)
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		dest = append(dest, &g.Count, &pks, &rep.DuplicateGroups, &rep.SurplusRows)
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		for _, v := range vals {
			if v.Valid {
				s := v.String
				g.Values = append(g.Values, &s)
			} else {
				g.Values = append(g.Values, nil)
			}
		}
		if err := json.Unmarshal([]byte(pks), &g.PrimaryKeys); err != nil {
			return fmt.Errorf("primary keys: %w", err)
		}
		rep.Groups = append(rep.Groups, g)
	}
	return rows.Err()
}
