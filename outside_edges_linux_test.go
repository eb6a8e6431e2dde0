//go:build linux

package racefree_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/iofault"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
)

// TestEdgesASQLiteBatchWhoseCommitMayHaveHappenedIsNeverRunAgain: on
// SQLite a batch of two operations whose COMMIT meets an I/O error (the
// disk refuses the write-ahead log, iofault) may have committed: each
// caller is told its operation ran, with the error (ErrUnavailable), and
// none runs alone again (CombineStats.Unknown, not Failed). So on the
// combiner's writer (a pool of two) and in a *sql.Tx (a pool of one).
func TestEdgesASQLiteBatchWhoseCommitMayHaveHappenedIsNeverRunAgain(t *testing.T) {
	t.Parallel()
	for _, conns := range []int{2, 1} {
		t.Run(fmt.Sprintf("MaxOpenConns %d", conns), func(t *testing.T) {
			t.Parallel()
			db, path := writerDB(t, conns)
			ctx := context.Background()
			// Every connection of the pool has the WAL open before the
			// fault: it swaps the descriptors open when it starts, and a
			// connection the held batch opened after that would write
			// through one of its own.
			openAll(t, db, conns)
			lock, err := db.SQL().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Rollback()
			if _, err := lock.ExecContext(ctx, `UPDATE w SET v = v WHERE k = 'gate'`); err != nil {
				t.Fatal(err)
			}
			// The held batch waits for the write lock and changes no row:
			// its statement writes nothing to the log once it runs.
			held := make(chan error, 1)
			go func() {
				_, err := wire.Of(db).Combine(ctx, &wire.Op{Group: "g", Key: "held", Stmts: []*wire.Statement{{Query: `UPDATE w SET v = v + 1 WHERE k = 'nobody'`}}})
				held <- err
			}()
			testdb.WaitCombiner(t, db, "the held batch", func(s racefree.CombineStats) bool { return s.Running == 1 })
			ops := []*wire.Op{insert("a", 1), insert("b", 2)}
			out := make([]combined, len(ops))
			var wg sync.WaitGroup
			for i, o := range ops {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out[i].ran, out[i].err = wire.Of(db).Combine(ctx, o)
				}()
				testdb.WaitCombiner(t, db, "the queue", func(s racefree.CombineStats) bool { return s.Queued == i+1 })
			}
			before := db.CombineStats()
			restore := iofault.FailWrites(t, path+"-wal")
			if err := lock.Rollback(); err != nil { // writes nothing to the log
				t.Fatal(err)
			}
			if err := await(t, held, "the held batch"); err != nil {
				t.Fatalf("the held batch, which wrote nothing: %v", err)
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			await(t, done, "the batch whose commit fails")
			restore()
			for i, r := range out {
				if !r.ran || !errors.Is(wire.Of(db).InterpretError(r.err), racefree.ErrUnavailable) {
					t.Errorf("op %d: ran %v, %v; want ran, ErrUnavailable: the commit may have happened", i, r.ran, r.err)
				}
			}
			s := db.CombineStats()
			if s.Unknown-before.Unknown != 1 || s.Failed != before.Failed {
				t.Fatalf("%+v; want one unknown outcome and no failed batch (before: %+v)", s, before)
			}
			var n int
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM w WHERE k IN ('a', 'b')`).Scan(&n); err != nil && !errors.Is(err, sql.ErrNoRows) {
				t.Logf("reading the rows after the I/O error: %v", err)
			}
		})
	}
}

// openAll has each of db's n connections read the database, and so open
// its WAL, and leaves them idle in the pool.
func openAll(t *testing.T, db *racefree.DB, n int) {
	t.Helper()
	ctx := context.Background()
	for range n {
		c, err := db.SQL().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var rows int
		if err := c.QueryRowContext(ctx, `SELECT COUNT(*) FROM w`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
	}
}
