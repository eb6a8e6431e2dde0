package uniquecheck

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestEdgesPlanOnceOnlyForExpressions proves when a check on SQLite
// computes its keys once per row in a subquery: for a key that is an
// expression or a qualified column (the engine cannot group it by a
// column's own order) when the engine sorts the rows to group them,
// never for a bare column name, nor when an index gives the order.
func TestEdgesPlanOnceOnlyForExpressions(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "app.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	testdb.ExecAll(t, db,
		`CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT, w TEXT)`,
		`CREATE INDEX items_lower_w ON items (lower(w))`,
	)
	for _, c := range []struct {
		keys []string
		want bool
	}{
		{[]string{"v"}, false},
		{[]string{`"v"`, "w"}, false},
		{[]string{"lower(v)"}, true},
		{[]string{"v", "lower(v)"}, true},
		{[]string{"items.v"}, true},
		{[]string{"lower(w)"}, false},
	} {
		got, err := sqliteDialect{}.planOnce(context.Background(), db, `"items"`, Spec{Table: "items", Keys: c.keys})
		if err != nil {
			t.Fatalf("%q: %v", c.keys, err)
		}
		if got != c.want {
			t.Errorf("%q: once %v, want %v", c.keys, got, c.want)
		}
	}
}
