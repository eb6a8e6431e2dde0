package getorcreate_test

import (
	"context"
	"errors"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestLostReplyMayHaveCreated loses the reply to Do's insert once
// PostgreSQL committed it (testdb.CutReply: the insert commits by
// itself on the pool), through the *racefree.DB, a *sql.DB and a
// *sql.Conn: Do answers an error matching racefree.ErrUnavailable (the
// row may exist), never a plain failure, and Do again returns the row
// the lost call created, created false, the table holding it once. On
// SQLite, which commits in the process, no reply can be lost.
func TestLostReplyMayHaveCreated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	proxy, cut := testdb.NewCutReply(t, dsn)
	db := testdb.Open(t, cut, &racefree.Config{Combine: racefree.CombineOff})
	setup(t, db)
	ins := queries[db.Engine()].insert
	conn, err := db.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, c := range []struct {
		name  string
		exec  racefree.Executor
		email string
	}{
		{"*racefree.DB", db, "lost-db@x"},
		{"*sql.DB", db.SQL(), "lost-sql@x"},
		{"*sql.Conn", conn, "lost-conn@x"},
	} {
		proxy.LoseNextCommit(c.email) // the insert's argument
		_, created, err := userByEmail(ctx, db, c.exec, ins, c.email, c.email)
		proxy.Wait(t)
		if !errors.Is(err, racefree.ErrUnavailable) || created {
			t.Errorf("%s: the reply to the insert lost: created %v, %v; want an error matching ErrUnavailable (the row may exist)", c.name, created, err)
		}
		if n := countEmail(t, db, c.email); n != 1 {
			t.Fatalf("%s: %d rows after the lost reply, want the one the server committed", c.name, n)
		}
		exec := c.exec
		if exec == racefree.Executor(conn) { // its connection was cut
			exec = db
		}
		u, created, err := userByEmail(ctx, db, exec, ins, c.email, "again")
		if err != nil || created || u.email != c.email {
			t.Errorf("%s: Do again: %+v, created %v, %v; want the row, created false", c.name, u, created, err)
		}
		if n := countEmail(t, db, c.email); n != 1 {
			t.Errorf("%s: %d rows after Do again, want 1", c.name, n)
		}
	}
}
