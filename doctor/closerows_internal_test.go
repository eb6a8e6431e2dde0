package doctor

import (
	"context"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestCloseRowsKeepsAnErrorMetMidway: a catalogue query that fails after
// its first row (rows.Next stops, rows.Err holds the failure) is an error
// of closeRows, so that the rls and analyze checks report not-judged
// instead of a verdict on the rows read before it.
func TestCloseRowsKeepsAnErrorMetMidway(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	rows, err := db.SQL().QueryContext(context.Background(),
		`SELECT x FROM generate_series(1, 2) x WHERE 1 / (2 - x) > 0`)
	if err != nil {
		t.Fatalf("the query failed before its first row: %v", err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := closeRows(rows); err == nil || n != 1 {
		t.Fatalf("closeRows after %d row(s): %v, want the division by zero after one row", n, err)
	}
}
