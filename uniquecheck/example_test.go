package uniquecheck_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/racefree/racefree/uniquecheck"
)

// Before adding CREATE UNIQUE INDEX ON users (lower(email)) WHERE
// deleted_at IS NULL, find the live accounts whose emails differ only by
// case.
func Example() {
	dir, _ := os.MkdirTemp("", "uniquecheck")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "app.db")
	app, _ := sql.Open("sqlite", path)
	_, _ = app.Exec(`CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT, deleted_at INTEGER);
		INSERT INTO users VALUES (1, 'ann@example.com', NULL), (2, 'Ann@Example.com', NULL),
			(3, 'ann@example.com', 1700000000), (4, NULL, NULL), (5, NULL, NULL), (6, 'bob@example.com', NULL)`)
	app.Close()

	c, err := uniquecheck.Open("sqlite:" + path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	rep, err := c.Check(context.Background(), uniquecheck.Spec{
		Table: "users",
		Keys:  []string{"lower(email)"},
		Where: "deleted_at IS NULL",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("duplicate groups:", rep.DuplicateGroups, "surplus rows:", rep.SurplusRows)
	for _, g := range rep.Masked().Groups {
		fmt.Printf("%s rows=%d ids=%s\n", *g.Values[0], g.Count, g.PrimaryKeys)
	}
	// Output:
	// duplicate groups: 1 surplus rows: 1
	// sha256:71d4f55f72fa len=15 rows=2 ids=[1 2]
}
