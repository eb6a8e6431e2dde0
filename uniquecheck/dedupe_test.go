package uniquecheck_test

import (
	"context"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/uniquecheck"
)

// TestDedupeSQL runs the printed script and checks that the index then
// builds, that the surplus rows are in the archive, and that the right row
// of each group was kept.
func TestDedupeSQL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		keep uniquecheck.Keep
		want []int // ids left in users
	}{
		{uniquecheck.KeepOldest, []int{2, 4, 6, 7, 8}},
		{uniquecheck.KeepNewest, []int{3, 5, 6, 7, 8}},
		{uniquecheck.KeepMinID, []int{1, 4, 6, 7, 8}},
	} {
		t.Run(string(tc.keep), func(t *testing.T) {
			t.Parallel()
			testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
				ctx := context.Background()
				exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT, created_at BIGINT, deleted_at BIGINT)`)
				exec(t, db.SQL(), `INSERT INTO users VALUES
					(1, 'a', 20, NULL), (2, 'A', 10, NULL), (3, 'a', 30, NULL),
					(4, 'b', 20, NULL), (5, 'B', 40, NULL),
					(6, 'b', 5, 1), (7, NULL, 1, NULL), (8, NULL, 2, NULL)`)
				spec := uniquecheck.Spec{Table: "users", Keys: []string{"lower(email)"}, Where: "deleted_at IS NULL"}
				rep, err := uniquecheck.Check(ctx, db, spec)
				if err != nil {
					t.Fatal(err)
				}
				runDedupe(t, db, rep, tc.keep)
				if !engineBuilds(t, db.SQL(), spec) {
					t.Fatal("the index still fails after the dedupe script")
				}
				if got, want := userIDs(t, db), tc.want; !equalInts(got, want) {
					t.Fatalf("kept %v, want %v", got, want)
				}
				var archived int64
				if err := db.QueryRowContext(ctx, `SELECT count(*) FROM users_dedupe_archive`).Scan(&archived); err != nil {
					t.Fatal(err)
				}
				if got, want := archived, rep.SurplusRows; got != want {
					t.Fatalf("archived %d rows, want %d", got, want)
				}
			})
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// runDedupe prints rep's dedupe script with DedupeSQL, keeping the row
// that keep names in each group and archiving to the default table, and
// runs it on db with runScript.
func runDedupe(t *testing.T, db *racefree.DB, rep *uniquecheck.Report, keep uniquecheck.Keep) {
	t.Helper()
	script, err := uniquecheck.DedupeSQL(db.Engine(), rep, keep, "")
	if err != nil {
		t.Fatal(err)
	}
	runScript(t, db, script)
}

// runScript runs a script that DedupeSQL printed on one connection of db,
// a statement at a time, in its order, as a user's database shell would;
// a statement that fails fails the test, naming the statement.
func runScript(t *testing.T, db *racefree.DB, script string) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var stmts []string
	for _, stmt := range strings.SplitAfter(script, ";\n") {
		if strings.TrimSpace(stmt) != "" {
			stmts = append(stmts, stmt)
		}
	}
	testdb.ExecAll(t, conn, stmts...)
}

// userIDs returns the ids of the rows of the table users, in order: the
// rows a dedupe script left.
func userIDs(t *testing.T, db *racefree.DB) []int {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT id FROM users ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []int
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}
