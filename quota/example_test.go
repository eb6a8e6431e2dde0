package quota_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/sqlite"
)

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "racefree-example")
	defer os.RemoveAll(dir)
	clock := racefree.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	db, err := sqlite.Open(ctx, filepath.Join(dir, "racefree.db"), &racefree.Config{Clock: clock, Schema: racefree.SchemaMigrate})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	limiter, err := quota.New(db, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	// 10 requests a second, in bursts of up to 3.
	policy := quota.Policy{Kind: quota.GCRA, Rate: 10, Per: time.Second, Burst: 3}
	for range 4 {
		d, err := limiter.Consume(ctx, db, "user:42", 1, policy)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 100ms
}
