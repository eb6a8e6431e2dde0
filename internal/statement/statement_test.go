package statement_test

import (
	"context"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/statement"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestCloseRowsKeepsAnErrorMetMidway: a query that fails after its first
// row (rows.Next stops, rows.Err holds the failure) is an error of
// CloseRows, so that the checkers that read the catalogue with it
// (internal/roles' Judge and Owners, rls-check, doctor's rls and analyze
// checks) fail, or report not-judged, instead of judging the rows read
// before it. And rows read to their true end close with no error.
func TestCloseRowsKeepsAnErrorMetMidway(t *testing.T) {
	t.Parallel()
	// The second row fails: PostgreSQL divides by zero; SQLite's abs of
	// the smallest integer overflows (SQLite's division by zero is NULL).
	failing := map[string]string{
		racefree.Postgres: `SELECT x FROM generate_series(1, 2) x WHERE 1 / (2 - x) > 0`,
		racefree.SQLite:   `SELECT abs(x) FROM (SELECT 1 AS x UNION ALL SELECT -9223372036854775808)`,
	}
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		rows, err := db.SQL().QueryContext(ctx, failing[db.Engine()])
		if err != nil {
			t.Fatalf("the query failed before its first row: %v", err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := statement.CloseRows(rows); err == nil || n != 1 {
			t.Fatalf("CloseRows after %d row(s): %v, want the second row's error after one row", n, err)
		}
		rows, err = db.SQL().QueryContext(ctx, `SELECT 1 UNION ALL SELECT 2`)
		if err != nil {
			t.Fatal(err)
		}
		for n = 0; rows.Next(); n++ {
		}
		if err := statement.CloseRows(rows); err != nil || n != 2 {
			t.Fatalf("CloseRows after %d row(s) read to their end: %v, want nil after 2", n, err)
		}
	})
}
