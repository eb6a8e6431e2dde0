package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/sqlite"
)

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "inbox-example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	_, _ = db.ExecContext(ctx, `CREATE TABLE paid (invoice TEXT NOT NULL)`)
	in, err := inbox.New(db, nil)
	if err != nil {
		panic(err)
	}

	markPaid := func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO paid (invoice) VALUES ('in_1')`)
		return err
	}
	for range 3 { // the sender delivers the same event three times
		res, err := in.Receive(ctx, "stripe", "evt_1", []byte(`{"invoice":"in_1"}`), markPaid)
		fmt.Printf("duplicate=%v err=%v\n", res.Duplicate, err)
	}
	res, err := in.Receive(ctx, "stripe", "evt_2", nil, func(tx *sql.Tx) error {
		return inbox.Permanent(errors.New("unknown event type"))
	})
	fmt.Printf("failed=%v reason=%q err=%v\n", res.Failed, res.Reason, err)

	var n int
	_ = db.QueryRowContext(ctx, `SELECT count(*) FROM paid`).Scan(&n)
	fmt.Println("invoices marked paid:", n)
	// Output:
	// duplicate=false err=<nil>
	// duplicate=true err=<nil>
	// duplicate=true err=<nil>
	// failed=true reason="unknown event type" err=<nil>
	// invoices marked paid: 1
}
