package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/outbox"
)

// Example enqueues a message in the transaction that changes the order,
// and a relay delivers it once the transaction commits.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	db, err := dsn.Open(ctx, "sqlite:"+filepath.Join(dir, "app.db"), &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ob, _ := outbox.New(db, &outbox.Options{OrderedTopics: []string{"orders"}})

	err = db.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, state TEXT)`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, state) VALUES (7, 'paid')`); err != nil {
			return err
		}
		// The message exists exactly when the order's change commits.
		_, err := ob.Enqueue(ctx, tx, outbox.Message{Topic: "orders", Key: "order-7", Payload: []byte(`{"id":7,"state":"paid"}`)})
		return err
	})
	if err != nil {
		panic(err)
	}

	delivered := make(chan struct{})
	relay, _ := ob.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
		// Send d.Payload with d.IdempotencyKey(); a receiver that
		// remembers the key applies it once however often it arrives.
		fmt.Printf("%s %s %s (attempt %d)\n", d.Topic, d.Key, d.Payload, d.Attempt)
		close(delivered)
		return nil
	}, nil)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- relay.Run(runCtx) }()
	<-delivered
	stop()
	<-done
	// Output: orders order-7 {"id":7,"state":"paid"} (attempt 1)
}
