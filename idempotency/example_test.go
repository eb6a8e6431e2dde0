package idempotency_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/sqlite"
)

func Example() {
	dir, _ := os.MkdirTemp("", "racefree-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	keys := idempotency.New(db, nil)

	checkout := func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
		// Each side effect is a step: a retry after a crash skips the
		// steps already done. call.StepKey("charge") is the key to give
		// the payment provider.
		charge, err := call.Step(ctx, "charge", func(ctx context.Context) (string, error) { return "ch_123", nil })
		if err != nil {
			return nil, err
		}
		return []byte("paid with " + charge), nil
	}
	for range 2 {
		res, err := keys.Do(ctx, "tenant-7 POST /checkout", "8e03978e", "sha256-of-the-body", checkout)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s (replayed: %v)\n", res.Response, res.Replayed)
	}
	// Output:
	// paid with ch_123 (replayed: false)
	// paid with ch_123 (replayed: true)
}
