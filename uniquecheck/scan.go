package uniquecheck

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// The SQL of a check is assembled here and in the dialects (postgres.go,
// sqlite.go), which only add a quoted name. Table and column names reach it
// only through quoteIdent; key expressions and the predicate are the
// operator's own SQL, which checkExpr has kept to one expression and which
// run only inside the read-only transaction of dialect.readOnly. Each
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
	pk, ordered, err := c.d.primaryKey(ctx, q, name)
	if err != nil {
		return err
	}
	rep.PrimaryKey, rep.pkOrdered = pk, ordered
	if err := c.d.preflight(ctx, q, name, spec, rep); err != nil {
		return err
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
		w, err := c.d.existingIndex(ctx, q, Name{Schema: name.Schema, Table: spec.IndexName})
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
	d := c.d
	var sel, keys, outer, order, topOrder, match []string
	for i, k := range spec.Keys {
		alias := fmt.Sprintf("k%d", i+1)
		sel = append(sel, wrap(k)+" AS "+alias)
		keys = append(keys, wrap(k))
		outer = append(outer, "CAST(top."+alias+" AS TEXT)")
		order = append(order, alias)
		topOrder = append(topOrder, "top."+alias)
		match = append(match, "hits."+alias+" "+d.notDistinct()+" top."+alias)
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
	jsonArray := d.jsonArray()
	row := pkCols[0]
	if len(pkCols) > 1 {
		row = jsonArray + "(" + strings.Join(pkCols, ", ") + ")"
	}
	aggRows := d.jsonAgg(row + " ORDER BY r")
	// needsHits selects the listed groups whose keys d cannot name.
	needsHits, minMax, nameRows := "n > 0", "", "NULL"
	if named {
		needsHits = "n > 2"
		minMax = ", min(" + pkOrder[0] + ") AS lo, max(" + pkOrder[0] + ") AS hi"
		nameRows = d.asText("CASE WHEN CAST(?2 AS BIGINT) >= 2 THEN " + jsonArray + "(top.lo, top.hi) ELSE " + jsonArray + "(top.lo) END")
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
	once, err := c.d.planOnce(ctx, q, table, spec)
	if err != nil {
		return err
	}
	named := rep.pkOrdered && c.d.namesPairs()
	query, err := c.groupQuery(table, spec, rep.PrimaryKey, named, once)
	if err != nil {
		return err
	}
	// ?1 is the group limit, ?2 maxKeys, wherever they appear.
	query = c.d.placeholders(query)
	var lim any = limit
	if limit < 0 {
		lim = c.d.allGroups()
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

// countNulls counts the rows of table with a NULL in any key, for
// Spec.NotNull: every row, whatever Spec.Where says, since NOT NULL is
// the column's.
func countNulls(ctx context.Context, q querier, table string, spec Spec, rep *Report) error {
	conds := make([]string, len(spec.Keys))
	for i, k := range spec.Keys {
		conds[i] = wrap(k) + " IS NULL"
	}
	return q.QueryRowContext(ctx, `SELECT count(*) FROM `+table+whereClause([]string{strings.Join(conds, "\n  OR ")})).Scan(&rep.NullRows)
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
	err = c.d.readOnly(ctx, c.db, timeout, func(q querier) (err error) {
		n, exact, err = c.d.rows(ctx, q, name, quoted)
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("unique-check %s: rows: %w", name, err)
	}
	return n, exact, nil
}
