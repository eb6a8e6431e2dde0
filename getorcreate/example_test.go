package getorcreate_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/getorcreate"
	"github.com/racefree/racefree/sqlite"
)

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "getorcreate-example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	_, _ = db.ExecContext(ctx, `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT NOT NULL)`)
	_, _ = db.ExecContext(ctx, `CREATE UNIQUE INDEX users_email ON users (lower(email))`)

	user := func(email string) (id int64, created bool, err error) {
		created, err = getorcreate.Do(ctx, db, getorcreate.Query{
			Insert:     `INSERT INTO users (email) VALUES (?1) ON CONFLICT (lower(email)) DO NOTHING RETURNING id`,
			InsertArgs: []any{email},
			Select:     `SELECT id FROM users WHERE lower(email) = lower(?1)`,
			SelectArgs: []any{email},
		}, func(row *sql.Row) error { return row.Scan(&id) })
		return id, created, err
	}
	fmt.Println(user("Ann@example.com"))
	fmt.Println(user("ann@EXAMPLE.com"))
	fmt.Println(user("bob@example.com"))
	// Output:
	// 1 true <nil>
	// 1 false <nil>
	// 2 true <nil>
}
