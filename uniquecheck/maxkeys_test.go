package uniquecheck_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/uniquecheck"
)

// TestMaxKeysListsTheLowestKeys proves that each listed group carries its
// lowest primary keys, ascending, at most Spec.MaxKeys (default 10, -1
// all) of them, with its true count, whichever way the check finds them:
// from the aggregate (on PostgreSQL, a two-row group with a single-column
// key), from the second scan (a larger group, a composite key, and every
// group on SQLite).
func TestMaxKeysListsTheLowestKeys(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT)`)
		exec(t, db.SQL(), `INSERT INTO items VALUES (7, 'two'), (3, 'two'), (9, 'one')`)
		for i := 0; i < 12; i++ {
			exec(t, db.SQL(), fmt.Sprintf(`INSERT INTO items VALUES (%d, 'many')`, 50-i))
		}
		exec(t, db.SQL(), `CREATE TABLE pairs (a INTEGER, b INTEGER, v TEXT, PRIMARY KEY (a, b))`)
		exec(t, db.SQL(), `INSERT INTO pairs VALUES (2, 1, 'x'), (1, 5, 'x'), (1, 2, 'y')`)
		for _, c := range []struct {
			table   string
			maxKeys int
			want    string
		}{
			{"items", 0, "many 12 [39 40 41 42 43 44 45 46 47 48]; two 2 [3 7]"},
			{"items", 1, "many 12 [39]; two 2 [3]"},
			{"items", 2, "many 12 [39 40]; two 2 [3 7]"},
			{"items", -1, "many 12 [39 40 41 42 43 44 45 46 47 48 49 50]; two 2 [3 7]"},
			{"pairs", 0, "x 2 [[1,5] [2,1]]"},
			{"pairs", 1, "x 2 [[1,5]]"},
		} {
			rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: c.table, Keys: []string{"v"}, MaxKeys: c.maxKeys})
			if err != nil {
				t.Fatal(err)
			}
			if got := groupsText(t, rep); got != c.want {
				t.Errorf("%s, MaxKeys %d: %s, want %s", c.table, c.maxKeys, got, c.want)
			}
		}
	})
}
