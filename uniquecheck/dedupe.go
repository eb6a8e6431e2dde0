package uniquecheck

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/racefree/racefree"
)

// Keep says which row of each duplicate group DedupeSQL keeps.
type Keep string

// The rows DedupeSQL can keep.
const (
	KeepMinID  Keep = "min-id" // the smallest primary key
	KeepOldest Keep = "oldest" // the smallest value of the age column, then the smallest primary key
	KeepNewest Keep = "newest" // the largest value of the age column, then the smallest primary key
)

// DedupeSQL returns, for the engine and a report from Check, a script that
// archives the surplus rows of every duplicate group into the side table
// <table>_dedupe_archive and deletes them from the table, keeping one row
// per group. It never runs anything: the operator reviews it and runs it.
//
// The script runs in one transaction that takes the write lock first
// (PostgreSQL: LOCK TABLE … IN SHARE ROW EXCLUSIVE MODE; SQLite: BEGIN
// IMMEDIATE), so that the archived rows and the deleted rows are the same
// rows. ageColumn names the column KeepOldest and KeepNewest order by;
// it defaults to created_at.
func DedupeSQL(engine string, rep *Report, keep Keep, ageColumn string) (string, error) {
	d, err := dialectFor(engine)
	if err != nil {
		return "", err
	}
	name, err := ParseName(rep.Table)
	if err != nil {
		return "", err
	}
	table := name.String()
	archive, err := Name{Schema: name.Schema, Table: truncate(name.Table, 63-len("_dedupe_archive")) + "_dedupe_archive"}.Quoted()
	if err != nil {
		return "", err
	}
	var pk []string
	for _, c := range rep.PrimaryKey {
		if c == "rowid" || c == "ctid" {
			pk = append(pk, c)
			continue
		}
		q, err := quoteIdent(c)
		if err != nil {
			return "", err
		}
		pk = append(pk, q)
	}
	if len(pk) == 0 {
		return "", racefree.Invalid("report", "has no primary key columns")
	}
	order := strings.Join(pk, ", ")
	if ageColumn == "" {
		ageColumn = "created_at"
	}
	age, err := quoteIdent(ageColumn)
	if err != nil {
		return "", err
	}
	switch keep {
	case KeepMinID:
	case KeepOldest:
		order = age + ", " + order
	case KeepNewest:
		order = age + " DESC, " + order
	default:
		return "", racefree.Invalid("keep", "%q: want oldest, newest or min-id", keep)
	}
	var part, filter []string
	for _, k := range rep.Keys {
		if err := checkExpr("key", k); err != nil {
			return "", err
		}
		part = append(part, wrap(k))
		if !rep.NullsNotDistinct {
			filter = append(filter, wrap(k)+" IS NOT NULL")
		}
	}
	if rep.Where != "" {
		if err := checkExpr("where", rep.Where); err != nil {
			return "", err
		}
		filter = append(filter, wrap(rep.Where))
	}
	where := ""
	if len(filter) > 0 {
		where = " WHERE " + strings.Join(filter, " AND ")
	}
	// The rows the index covers: ONLY the table's own on a PostgreSQL table
	// others inherit from (Report.Only); each named with its table
	// (rowID), so that the DELETE reaches no row of another partition or
	// child that shares its ctid or key.
	from := table
	if rep.Only {
		from = "ONLY " + table
	}
	cols := strings.Join(d.rowID(pk), ", ")
	surplus := fmt.Sprintf(`(%s) IN (
  SELECT %s FROM (
    SELECT %s, row_number() OVER (PARTITION BY %s ORDER BY %s) AS rf_rank
    FROM %s%s
  ) AS rf_ranked
  WHERE rf_rank > 1
)`, cols, cols, cols, strings.Join(part, ", "), order, from, where)

	var b strings.Builder
	fmt.Fprintf(&b, "-- racefree unique-check --dedupe-sql keep=%s: archive, then delete, the surplus rows\n", keep)
	fmt.Fprintf(&b, "-- of %s (%d rows in %d groups when checked) so that UNIQUE (%s) can be built.\n", table, rep.SurplusRows, rep.DuplicateGroups, strings.Join(rep.Keys, ", "))
	b.WriteString("-- Review it, then run it yourself: racefree never runs it.\n")
	b.WriteString(d.beginExclusive(table))
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s AS SELECT * FROM %s WHERE 1 = 0;\n", archive, table)
	fmt.Fprintf(&b, "INSERT INTO %s SELECT * FROM %s WHERE %s;\n", archive, table, surplus)
	fmt.Fprintf(&b, "DELETE FROM %s WHERE %s;\n", table, surplus)
	b.WriteString("COMMIT;\n")
	return b.String(), nil
}

// truncate cuts s to at most n bytes, before a character the cut would
// split, so that the result stays valid UTF-8 (PostgreSQL refuses a name
// that is not).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
