package uniquecheck

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
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

// groupQuery returns the query of a check, in three steps, so that only
// the rows of the listed groups are ever sorted:
//
//   - d: the bare aggregate, the rows the index covers grouped by its keys,
//     keeping the groups of more than one row (one hash aggregate, no sort
//     of the table);
//   - top: the groups to list, largest first, with the totals over all
//     groups as window columns (a sort of the duplicate groups only);
//   - hits: the rows of the listed groups (a second scan that keeps only
//     the rows whose keys are in top), numbered per group in primary key
//     order.
//
// The result has one row per listed group: the keys as text, the count,
// the totals, and the first maxKeys primary keys as a JSON array. Its
// parameters are the group limit and maxKeys.
func (c *Checker) groupQuery(table string, spec Spec, pk []string) (string, error) {
	pg := c.engine == racefree.Postgres
	var sel, filter, keys, outer, order, topKeys, match []string
	for i, k := range spec.Keys {
		alias := fmt.Sprintf("k%d", i+1)
		sel = append(sel, wrap(k)+" AS "+alias)
		if !spec.NullsNotDistinct {
			// NULLS DISTINCT: a row with a NULL in any key conflicts with nothing.
			filter = append(filter, wrap(k)+" IS NOT NULL")
		}
		keys = append(keys, wrap(k))
		outer = append(outer, "CAST(top."+alias+" AS TEXT)")
		order = append(order, alias)
		topKeys = append(topKeys, "top."+alias)
		match = append(match, "hits."+alias+" IS NOT DISTINCT FROM top."+alias)
	}
	if spec.Where != "" {
		filter = append(filter, wrap(spec.Where))
	}
	pkSel := make([]string, len(pk))
	pkCols := make([]string, len(pk))
	pkExprs := make([]string, len(pk))
	for i, col := range pk {
		q := col
		switch {
		case col == "ctid":
			q = "ctid::text"
		case col != "rowid":
			var err error
			if q, err = quoteIdent(col); err != nil {
				return "", err
			}
		}
		pkCols[i] = fmt.Sprintf("p%d", i+1)
		pkExprs[i] = q
		pkSel[i] = q + " AS " + pkCols[i]
	}
	row := pkCols[0]
	if len(pkCols) > 1 {
		if pg {
			row = "json_build_array(" + strings.Join(pkCols, ", ") + ")"
		} else {
			row = "json_array(" + strings.Join(pkCols, ", ") + ")"
		}
	}
	agg := "json_group_array(" + row + " ORDER BY r)"
	if pg {
		agg = "json_agg(" + row + " ORDER BY r)::text"
	} else {
		// SQLite spells IS NOT DISTINCT FROM as IS.
		for i := range match {
			match[i] = strings.Replace(match[i], "IS NOT DISTINCT FROM", "IS", 1)
		}
	}
	where := ""
	if len(filter) > 0 {
		where = "\nWHERE " + strings.Join(filter, "\n  AND ")
	}
	hitsFilter := append([]string{}, filter...)
	if spec.NullsNotDistinct {
		// IN never matches a NULL key: compare key by key, NULLs equal.
		cond := make([]string, len(keys))
		for i, k := range keys {
			cond[i] = k + " IS NOT DISTINCT FROM t." + order[i]
		}
		hitsFilter = append(hitsFilter, "EXISTS (SELECT 1 FROM top AS t WHERE "+strings.Join(cond, " AND ")+")")
	} else {
		hitsFilter = append(hitsFilter, "("+strings.Join(keys, ", ")+") IN (SELECT "+strings.Join(order, ", ")+" FROM top)")
	}
	groupBy := make([]string, len(spec.Keys))
	for i := range groupBy {
		groupBy[i] = fmt.Sprint(i + 1)
	}
	// MATERIALIZED on both engines: each step runs once, and hits is never
	// inlined into the per-group subquery, which would scan the table once
	// per listed group.
	const materialized = " MATERIALIZED"
	return `WITH d AS` + materialized + ` (
SELECT ` + strings.Join(sel, ", ") + `, count(*) AS n
FROM ` + table + where + `
GROUP BY ` + strings.Join(groupBy, ", ") + `
HAVING count(*) > 1
), top AS` + materialized + ` (
SELECT ` + strings.Join(order, ", ") + `, n, row_number() OVER (ORDER BY n DESC, ` + strings.Join(order, ", ") + `) AS g,
  count(*) OVER () AS groups, CAST(sum(n - 1) OVER () AS BIGINT) AS surplus
FROM d
ORDER BY n DESC, ` + strings.Join(order, ", ") + `
LIMIT ?
), hits AS` + materialized + ` (
SELECT ` + strings.Join(sel, ", ") + `, ` + strings.Join(pkSel, ", ") + `,
  row_number() OVER (PARTITION BY ` + strings.Join(keys, ", ") + ` ORDER BY ` + strings.Join(pkExprs, ", ") + `) AS r
FROM ` + table + `
WHERE ` + strings.Join(hitsFilter, "\n  AND ") + `
)
SELECT ` + strings.Join(outer, ", ") + `, top.n,
  (SELECT ` + agg + ` FROM hits WHERE ` + strings.Join(match, " AND ") + ` AND hits.r <= ?),
  top.groups, top.surplus
FROM top
ORDER BY top.g`, nil
}

func (c *Checker) scan(ctx context.Context, q querier, table string, spec Spec, limit, maxKeys int, rep *Report) error {
	query, err := c.groupQuery(table, spec, rep.PrimaryKey)
	if err != nil {
		return err
	}
	if c.engine == racefree.Postgres {
		query = strings.Replace(query, "LIMIT ?", "LIMIT $1", 1)
		query = strings.Replace(query, "hits.r <= ?", "hits.r <= $2", 1)
	}
	var lim any = limit
	if limit < 0 {
		lim = nil // LIMIT NULL: all groups (PostgreSQL); SQLite reads a negative limit as none
		if c.engine == racefree.SQLite {
			lim = -1
		}
	}
	var keysPerGroup int64 = math.MaxInt64
	if maxKeys > 0 {
		keysPerGroup = int64(maxKeys)
	}
	rows, err := q.QueryContext(ctx, query, lim, keysPerGroup)
	if err != nil {
		return err
	}
	defer rows.Close()
	nk := len(spec.Keys)
	for rows.Next() {
		vals := make([]sql.NullString, nk)
		var g Group
		var pks sql.NullString
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
		g.PrimaryKeys = []json.RawMessage{}
		if pks.Valid {
			if err := json.Unmarshal([]byte(pks.String), &g.PrimaryKeys); err != nil {
				return fmt.Errorf("primary keys: %w", err)
			}
		}
		rep.Groups = append(rep.Groups, g)
	}
	return rows.Err()
}
