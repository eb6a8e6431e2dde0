package audit_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/sqlite"
)

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "audit-example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	_, _ = db.ExecContext(ctx, `CREATE TABLE accounts (id INTEGER PRIMARY KEY, credit_limit INTEGER)`)
	_, _ = db.ExecContext(ctx, `INSERT INTO accounts VALUES (7, 100)`)

	var keys bytes.Buffer // in production: a file or RACEFREE_AUDIT_KEYS
	_ = audit.Keygen(&keys, "mac-2026", "sign-2026")
	ring, _ := audit.ParseKeyring(keys.String())
	trail, _ := audit.New(db, ring)

	for _, limit := range []int{500, 900} {
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `UPDATE accounts SET credit_limit = ? WHERE id = 7`, limit); err != nil {
				return err
			}
			r, err := trail.Append(ctx, tx, "acme", audit.Entry{Actor: "alice", Action: "limit.raise", Subject: "account/7", Data: fmt.Appendf(nil, `{"to":%d}`, limit)})
			fmt.Println("entry", r.Seq)
			return err
		})
		if err != nil {
			panic(err)
		}
	}
	cp, _ := trail.Checkpoint(ctx, db, "acme") // export it: audit.WriteCheckpoints(file, cp)
	res, _ := trail.Verify(ctx, "acme", &audit.VerifyOptions{Checkpoints: []audit.Checkpoint{cp}})
	fmt.Printf("rows=%d intact=%v anchored=%v\n", res.Rows, res.Intact(), res.Anchored)
	// Output:
	// entry 1
	// entry 2
	// rows=2 intact=true anchored=true
}

func ExampleLog_AppendKeyed() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "audit-example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	var ring bytes.Buffer
	_ = audit.Keygen(&ring, "mac-2026", "sign-2026")
	keyring, _ := audit.ParseKeyring(ring.String())
	trail, _ := audit.New(db, keyring)
	keys := idempotency.New(db, nil)

	// The request's own key travels with every retry: the retry gets the
	// entry the first attempt committed, even when its reply was lost,
	// and the chain holds the entry once.
	paid := audit.Entry{Actor: "alice", Action: "invoice.paid", Subject: "invoice/7"}
	for range 2 {
		r, replayed, err := trail.AppendKeyed(ctx, db, keys, "billing", paid, "payment-42")
		fmt.Println("entry", r.Seq, "replayed", replayed, err)
	}
	n, _ := trail.Length(ctx, "billing")
	fmt.Println("entries", n)
	// Output:
	// entry 1 replayed false <nil>
	// entry 1 replayed true <nil>
	// entries 1
}
