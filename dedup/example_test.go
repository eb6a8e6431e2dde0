package dedup_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dedup"
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
	events := dedup.New(db)

	for _, msg := range []string{"payment 1041 failed: card declined", "payment 7 failed: card declined"} {
		o, err := events.Observe(ctx, db, dedup.Event{Source: "billing", Level: "error", Message: msg}, 10*time.Minute)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("seen %d time(s), process: %v\n", o.Count, o.Process)
		if o.Process {
			_ = events.Record(ctx, db, o.Fingerprint, o.Fence, dedup.Result{Classification: "card", ExternalID: "TICKET-7"})
		}
	}
	// Output:
	// seen 1 time(s), process: true
	// seen 2 time(s), process: false
}
