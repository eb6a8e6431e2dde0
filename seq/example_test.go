package seq_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/seq"
	"github.com/racefree/racefree/sqlite"
	"github.com/racefree/racefree/tenant"
)

func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, _ := os.MkdirTemp("", "seq-example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	_, _ = db.ExecContext(ctx, `CREATE TABLE invoices (tenant TEXT NOT NULL, number BIGINT NOT NULL, PRIMARY KEY (tenant, number))`)
	numbers := seq.New(db)

	// Each tenant's invoices are numbered 1, 2, 3, …: the counter is
	// (tenant, scope, name), the tenant taken from the context.
	invoice := func(id string, fail bool) (n int64, err error) {
		err = tenant.InTx(ctx, db, id, func(ctx context.Context, tx *sql.Tx) error {
			if n, err = numbers.Next(ctx, tx, "2026", "invoice"); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO invoices VALUES (?1, ?2)`, id, n); err != nil {
				return err
			}
			if fail {
				return fmt.Errorf("payment declined")
			}
			return nil
		})
		return n, err
	}
	fmt.Println(invoice("acme", false))
	fmt.Println(invoice("acme", true)) // rolled back: number 2 is not consumed
	fmt.Println(invoice("acme", false))
	fmt.Println(invoice("globex", false))
	acme, _ := tenant.With(ctx, "acme")
	first, err := numbers.NextN(acme, db, "2026", "invoice", 10)
	fmt.Println(first, err)
	// Output:
	// 1 <nil>
	// 2 payment declined
	// 2 <nil>
	// 1 <nil>
	// 3 <nil>
}

func ExampleCounters_NextKeyed() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, _ := os.MkdirTemp("", "seq-example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	numbers, keys := seq.New(db), idempotency.New(db, nil)

	// The request's own key (an order id, a message id) travels with every
	// retry: the retry gets the numbers the first attempt committed, even
	// when that attempt's reply was lost.
	fmt.Println(numbers.NextKeyed(ctx, db, keys, "2026", "invoice", 1, "order-7"))
	fmt.Println(numbers.NextKeyed(ctx, db, keys, "2026", "invoice", 1, "order-7")) // a retry
	fmt.Println(numbers.NextKeyed(ctx, db, keys, "2026", "invoice", 1, "order-8"))
	// Output:
	// 1 false <nil>
	// 1 true <nil>
	// 2 false <nil>
}
