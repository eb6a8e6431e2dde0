package send_test

import (
	"context"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
)

// A round from outside of how send.Do chooses the way an operation
// travels: each test holds one promise at the point where a slip would
// break it.

// TestEdges2AnOperationInTheCallersTxIsNeverCombined: send.Do given the
// caller's transaction runs the operation in it, never in a batch of the
// combiner on the pool, though it has a Key and the combiner is on: the
// write rolls back with the caller's transaction, and the combiner runs
// no batch for it. (The context's deadline only bounds a batch that must
// not be: the call itself never waits.)
func TestEdges2AnOperationInTheCallersTxIsNeverCombined(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, TxAttempts: 1}, func(t *testing.T, db *racefree.DB) {
		testdb.ExecAll(t, db, `CREATE TABLE send_tx (k TEXT PRIMARY KEY)`)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		insert := func(k string) *send.Op {
			st := &wire.Statement{Query: `INSERT INTO send_tx (k) VALUES ('` + k + `')`}
			return &send.Op{Key: "send_tx:" + k, Stmts: []*wire.Statement{st}, Alone: st}
		}
		// The tenant's first write, on the pool, records it: from then on
		// a write on the pool is combined.
		if _, err := send.Do(ctx, db, db, insert("pool")); err != nil {
			t.Fatal(err)
		}
		before := db.CombineStats()
		if _, err := send.Do(ctx, db, db, insert("pool2")); err != nil {
			t.Fatal(err)
		}
		if s := db.CombineStats(); s.Batches-before.Batches != 1 {
			t.Fatalf("%+v; the test needs a write on the pool combined", s)
		}
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		before = db.CombineStats()
		way, err := send.Do(ctx, db, tx, insert("tx"))
		if err != nil || way != send.Alone {
			t.Fatalf("send.Do in the caller's transaction: way %v, %v; want Alone, nil", way, err)
		}
		if s := db.CombineStats(); s.Batches != before.Batches || s.Failed != before.Failed || s.Unknown != before.Unknown {
			t.Errorf("%+v; want no batch for an operation in the caller's transaction (before: %+v)", s, before)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if got := testdb.Strings(t, db, `SELECT k FROM send_tx WHERE k = 'tx'`); len(got) != 0 {
			t.Errorf("the write of a rolled back transaction is there: %v; it ran outside it", got)
		}
	})
}
