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
