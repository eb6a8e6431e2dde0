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
	pk, ordered, err := c.primaryKey(ctx, q, name)
	if err != nil {
		return err
	}
	rep.PrimaryKey, rep.pkOrdered = pk, ordered
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
// table does not exist. ordered reports a single-column key whose type
// has min and max aggregates (every SQLite value; on PostgreSQL the
// numbers, strings and times), which lets a check on PostgreSQL read the
// keys of two-row groups from the aggregate itself (groupQuery).
func (c *Checker) primaryKey(ctx context.Context, q querier, name Name) (cols []string, ordered bool, err error) {
	if c.engine == racefree.Postgres {
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

// orderedTypes are the PostgreSQL primary key types that have min and max
// aggregates, by regtype name.
var orderedTypes = map[string]bool{
	"smallint": true, "integer": true, "bigint": true, "numeric": true,
	"text": true, "character varying": true, "character": true,
	"date": true, "timestamp without time zone": true, "timestamp with time zone": true,
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

// groupBy returns the bare aggregate of a check: the rows the index covers
// (Spec.Where holds, no NULL key unless NullsNotDistinct) grouped by its
// keys, as columns k1…kn, with the count n of each group of more than one
// row, and the aggregates in extra (", min(x) AS lo").
//
// Written plainly, an aggregate over an expression key computes it twice
// per row on SQLite, once in the NULL filter and once for the GROUP BY
// sorter, and carries the columns it reads into the sorter beside it.
// With once, the keys are computed once per row, in a subquery that LIMIT
// -1 keeps the planner from flattening into the aggregate, and a group is
// dropped after grouping if a key is NULL (the rows of a group share their
// NULLs, so this drops exactly the rows the plain filter drops). It is for
// SQLite only, when the engine sorts to group (planOnce), and extra must
// then be empty: the subquery selects only the keys.
func groupBy(table string, spec Spec, extra string, once bool) string {
	var sel, alias, rowFilter, groupFilter []string
	for i, k := range spec.Keys {
		a := fmt.Sprintf("k%d", i+1)
		sel = append(sel, wrap(k)+" AS "+a)
		alias = append(alias, a)
		if !spec.NullsNotDistinct {
			// NULLS DISTINCT: a row with a NULL in any key conflicts with nothing.
			rowFilter = append(rowFilter, wrap(k)+" IS NOT NULL")
			groupFilter = append(groupFilter, a+" IS NOT NULL")
		}
	}
	var pred []string // the partial index's predicate
	if spec.Where != "" {
		pred = append(pred, wrap(spec.Where))
	}
	groupCols := make([]string, len(spec.Keys))
	for i := range groupCols {
		groupCols[i] = fmt.Sprint(i + 1)
	}
	group := "\nGROUP BY " + strings.Join(groupCols, ", ") + "\nHAVING count(*) > 1"
	if once {
		// The NULL filter goes to HAVING: the rows of a group share their NULLs.
		return `SELECT ` + strings.Join(alias, ", ") + `, count(*) AS n
FROM (SELECT ` + strings.Join(sel, ", ") + `
FROM ` + table + whereClause(pred) + `
LIMIT -1)` + group + strings.Join(append([]string{""}, groupFilter...), "\n  AND ")
	}
	return `SELECT ` + strings.Join(sel, ", ") + `, count(*) AS n` + extra + `
FROM ` + table + whereClause(append(rowFilter, pred...)) + group
}

func whereClause(conds []string) string {
	if len(conds) == 0 {
		return ""
	}
	return "\nWHERE " + strings.Join(conds, "\n  AND ")
}

// planOnce reports whether a check on SQLite should compute the keys once
// per row (groupBy with once): when a key is an expression, not a column
// name, and the engine sorts the rows to group them. When an index gives
// the keys' order, the plain aggregate reads it in that order without a
// sort, which a subquery would prevent, so the engine's own plan decides.
func (c *Checker) planOnce(ctx context.Context, q querier, table string, spec Spec) (bool, error) {
	if c.engine != racefree.SQLite {
		return false, nil
	}
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

// groupQuery returns the query of a check, in four steps, each run once
// (MATERIALIZED on both engines, so that hits is never inlined into the
// per-group subquery, which would read the table once per listed group):
//
//   - d: the bare aggregate (groupBy), the only step that reads every row.
//     With named (PostgreSQL, a single-column primary key with min and
//     max) it also keeps the lowest and highest key of each group, which
//     name both rows of a pair: PostgreSQL's hash aggregate keeps them at
//     almost no cost. SQLite's GROUP BY sorts every row, and there the two
//     aggregates cost more than reading the listed groups again, so d only
//     counts;
//   - top: the groups to list, largest first (a top-N sort of d);
//   - hits: the rows of the listed groups that d could not name (all of
//     them without named; with it, those of more than two rows): a second
//     read of the table, which keeps the rows whose keys are in top,
//     through an index on the keys when there is one, numbered per group
//     in primary key order. When no listed group needs it, its EXISTS
//     test is false and the engine does not read the table again;
//   - the totals over all groups, by a scan of d.
//
// The result has one row per listed group: the keys as text, the count,
// the first maxKeys primary keys as a JSON array, and the totals. Its
// parameters are ?1, the group limit, and ?2, maxKeys.
func (c *Checker) groupQuery(table string, spec Spec, pk []string, named, once bool) (string, error) {
	pg := c.engine == racefree.Postgres
	var sel, keys, outer, order, topOrder, match []string
	for i, k := range spec.Keys {
		alias := fmt.Sprintf("k%d", i+1)
		sel = append(sel, wrap(k)+" AS "+alias)
		keys = append(keys, wrap(k))
		outer = append(outer, "CAST(top."+alias+" AS TEXT)")
		order = append(order, alias)
		topOrder = append(topOrder, "top."+alias)
		if pg {
			match = append(match, "hits."+alias+" IS NOT DISTINCT FROM top."+alias)
		} else {
			match = append(match, "hits."+alias+" IS top."+alias) // SQLite's IS NOT DISTINCT FROM
		}
	}
	pkSel := make([]string, len(pk))
	pkCols := make([]string, len(pk))
	pkOrder := make([]string, len(pk))
	for i, col := range pk {
		q := col
		if col != "rowid" && col != "ctid" {
			var err error
			if q, err = quoteIdent(col); err != nil {
				return "", err
			}
		}
		pkCols[i] = fmt.Sprintf("p%d", i+1)
		pkOrder[i] = q
		if col == "ctid" {
			q += "::text"
		}
		pkSel[i] = q + " AS " + pkCols[i]
	}
	jsonArray, agg := "json_array", "json_group_array"
	if pg {
		jsonArray, agg = "json_build_array", "json_agg"
	}
	row := pkCols[0]
	if len(pkCols) > 1 {
		row = jsonArray + "(" + strings.Join(pkCols, ", ") + ")"
	}
	aggRows := agg + "(" + row + " ORDER BY r)"
	if pg {
		aggRows += "::text"
	}
	// needsHits selects the listed groups whose keys d cannot name.
	needsHits, minMax, nameRows := "n > 0", "", "NULL"
	if named {
		needsHits = "n > 2"
		minMax = ", min(" + pkOrder[0] + ") AS lo, max(" + pkOrder[0] + ") AS hi"
		nameRows = "CASE WHEN CAST(?2 AS BIGINT) >= 2 THEN " + jsonArray + "(top.lo, top.hi) ELSE " + jsonArray + "(top.lo) END"
		if pg {
			nameRows = "(" + nameRows + ")::text"
		}
	}
	// The rows of the listed groups. No NULL filter: the listed keys hold
	// no NULL unless NullsNotDistinct, and a row with a NULL key is then
	// never IN them.
	var hitsFilter []string
	if spec.Where != "" {
		hitsFilter = append(hitsFilter, wrap(spec.Where))
	}
	if spec.NullsNotDistinct {
		// IN never matches a NULL key: compare key by key, NULLs equal.
		cond := make([]string, len(keys))
		for i, k := range keys {
			cond[i] = k + " IS NOT DISTINCT FROM t." + order[i]
		}
		hitsFilter = append(hitsFilter, "EXISTS (SELECT 1 FROM top AS t WHERE "+needsHits+" AND "+strings.Join(cond, " AND ")+")")
	} else {
		hitsFilter = append(hitsFilter, "("+strings.Join(keys, ", ")+") IN (SELECT "+strings.Join(order, ", ")+" FROM top WHERE "+needsHits+")")
	}
	// Tested once, before the scan: no listed group needs it, no scan.
	hitsFilter = append(hitsFilter, "EXISTS (SELECT 1 FROM top WHERE "+needsHits+")")
	return `WITH d AS MATERIALIZED (
` + groupBy(table, spec, minMax, once) + `
), top AS MATERIALIZED (
SELECT * FROM d
ORDER BY n DESC, ` + strings.Join(order, ", ") + `
LIMIT ?1
), hits AS MATERIALIZED (
SELECT ` + strings.Join(sel, ", ") + `, ` + strings.Join(pkSel, ", ") + `,
  row_number() OVER (PARTITION BY ` + strings.Join(keys, ", ") + ` ORDER BY ` + strings.Join(pkOrder, ", ") + `) AS r
FROM ` + table + whereClause(hitsFilter) + `
)
SELECT ` + strings.Join(outer, ", ") + `, top.n,
  CASE WHEN top.` + needsHits + ` THEN (SELECT ` + aggRows + ` FROM hits WHERE ` + strings.Join(match, " AND ") + ` AND hits.r <= CAST(?2 AS BIGINT))
  ELSE ` + nameRows + ` END,
  tot.groups, tot.surplus
FROM top CROSS JOIN (SELECT count(*) AS groups, CAST(sum(n - 1) AS BIGINT) AS surplus FROM d) AS tot
ORDER BY top.n DESC, ` + strings.Join(topOrder, ", "), nil
}

func (c *Checker) scan(ctx context.Context, q querier, table string, spec Spec, limit, maxKeys int, rep *Report) error {
	once, err := c.planOnce(ctx, q, table, spec)
	if err != nil {
		return err
	}
	// Only PostgreSQL names the rows of a pair from the aggregate.
	named := rep.pkOrdered && c.engine == racefree.Postgres
	query, err := c.groupQuery(table, spec, rep.PrimaryKey, named, once)
	if err != nil {
		return err
	}
	// ?1 is the group limit, ?2 maxKeys, wherever they appear.
	if c.engine == racefree.Postgres {
		query = strings.NewReplacer("?1", "$1", "?2", "$2").Replace(query)
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

// Rows returns how many rows table holds, for a progress line: the
// planner's estimate on PostgreSQL (pg_class.reltuples, which ANALYZE and
// autovacuum keep; exact false), an exact count on SQLite (exact true,
// a scan of the smallest index). A table never analyzed on PostgreSQL is
// 0, false. It reads only, in a read-only transaction like Check.
func (c *Checker) Rows(ctx context.Context, table string) (n int64, exact bool, err error) {
	name, err := ParseName(table)
	if err != nil {
		return 0, false, err
	}
	quoted, err := name.Quoted()
	if err != nil {
		return 0, false, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = c.readOnly(ctx, timeout, func(q querier) error {
		if c.engine == racefree.Postgres {
			var est float64
			if err := q.QueryRowContext(ctx, `SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)`, name.String()).Scan(&est); err != nil {
				return err
			}
			n = max(0, int64(est)) // -1: never analyzed
			return nil
		}
		exact = true
		return q.QueryRowContext(ctx, `SELECT count(*) FROM `+quoted).Scan(&n)
	})
	if err != nil {
		return 0, false, fmt.Errorf("unique-check %s: rows: %w", name, err)
	}
	return n, exact, nil
}
