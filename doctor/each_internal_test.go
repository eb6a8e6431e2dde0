package doctor

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"
)

// TestEachReadsItsRowsWholeOrJudgesNothing: a check reads its rows
// through each, and a row that fails to scan or a query that fails after
// some of its rows (SQLite's integer overflow on the second row) leaves
// the check's not-judged finding and reports false, so that the check
// judges nothing instead of judging the rows it got; rows read to their
// end report true and leave no finding. On a real SQLite file: the
// checks' own queries cannot be made to fail half-way.
func TestEachReadsItsRowsWholeOrJudgesNothing(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "each.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const three = `WITH RECURSIVE n(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM n WHERE v < 3) `
	for _, tc := range []struct {
		name, query string
		ok          bool
		read        int
		why         string
	}{
		{"read whole", three + `SELECT v FROM n`, true, 3, ""},
		{"a row that fails to scan", three + `SELECT CASE WHEN v = 2 THEN 'two' ELSE v END FROM n`, false, 1, "converting"},
		{"a query that fails on its second row", three + `SELECT CASE WHEN v = 2 THEN abs(-9223372036854775807 - 1) ELSE v END FROM n`, false, 1, "overflow"},
		{"a query that fails", `SELECT v FROM no_such_table`, false, 0, "no such table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &checker{q: db}
			read := 0
			ok := c.each(context.Background(), tc.query, "each-not-judged", "the rows", func(rows *sql.Rows) error {
				var v int64
				if err := rows.Scan(&v); err != nil {
					return err
				}
				read++
				return nil
			})
			if ok != tc.ok || read != tc.read {
				t.Fatalf("each = %v after %d rows, want %v after %d", ok, read, tc.ok, tc.read)
			}
			if tc.ok {
				if len(c.found) != 0 {
					t.Fatalf("findings %+v", c.found)
				}
				return
			}
			if len(c.found) != 1 || c.found[0].Code != "each-not-judged" || c.found[0].Severity != Warn || !strings.Contains(c.found[0].Detail, tc.why) {
				t.Fatalf("findings %+v, want one each-not-judged warning that says %q", c.found, tc.why)
			}
		})
	}
}
