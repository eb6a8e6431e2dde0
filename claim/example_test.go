package claim_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
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
	claims := claim.New(db)

	c, err := claims.Acquire(ctx, db, "nightly-report", "worker-1", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("worker-1 holds it with fence", c.Fence)

	_, err = claims.Acquire(ctx, db, "nightly-report", "worker-2", time.Minute)
	var held *claim.HeldError
	if errors.As(err, &held) {
		fmt.Println("worker-2 is told it is held by", held.Claim.Holder)
	}

	if err := claims.Release(ctx, db, "nightly-report", "worker-1", c.Fence); err != nil {
		fmt.Println(err)
		return
	}
	c2, err := claims.Acquire(ctx, db, "nightly-report", "worker-2", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("worker-2 holds it with fence", c2.Fence)

	// worker-1 stalled and comes back with its old fence: refused.
	_, err = claims.Renew(ctx, db, "nightly-report", "worker-1", c.Fence, time.Minute)
	fmt.Println("worker-1 renews:", errors.Is(err, racefree.ErrStaleFence))
	// Output:
	// worker-1 holds it with fence 1
	// worker-2 is told it is held by worker-1
	// worker-2 holds it with fence 2
	// worker-1 renews: true
}
