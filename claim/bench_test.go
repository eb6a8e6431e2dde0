package claim_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// The benchmarks run each operation through the library and, beside it, the
// same SQL statement by hand on the same pool, so that the library's
// overhead reads as a ratio of the two.

func benchEach(b *testing.B, body func(b *testing.B, db *racefree.DB, bare func(name string) string)) {
	for _, engine := range testdb.Engines {
		b.Run(engine, func(b *testing.B) {
			db := testdb.Open(b, testdb.NewDSN(b, engine), nil)
			bare := func(name string) string {
				q, err := os.ReadFile(filepath.Join("sql", engine, name+".sql"))
				if err != nil {
					b.Fatal(err)
				}
				return string(q)
			}
			body(b, db, bare)
		})
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	benchEach(b, func(b *testing.B, db *racefree.DB, bare func(string) string) {
		ctx := context.Background()
		claims := claim.New(db)
		b.Run("racefree", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				key := fmt.Sprintf("k%d", i)
				c, err := claims.Acquire(ctx, db, key, "w", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := claims.Release(ctx, db, key, "w", c.Fence); err != nil {
					b.Fatal(err)
				}
			}
		})
		acquire, release := bare("acquire"), bare("release")
		b.Run("bare-sql", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				key := fmt.Sprintf("b%d", i)
				var holder string
				var n [7]int64 // fence, claimed_at, expires_at, count, first_seen, last_seen, now
				var inserted bool
				if err := db.QueryRowContext(ctx, acquire, tenant.Default, "bare", key, "w", int64(60000), nil).
					Scan(&holder, &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6], &inserted); err != nil {
					b.Fatal(err)
				}
				if _, err := db.ExecContext(ctx, release, tenant.Default, "bare", key, "w", n[0], nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

func BenchmarkAcquireContended(b *testing.B) {
	benchEach(b, func(b *testing.B, db *racefree.DB, bare func(string) string) {
		ctx := context.Background()
		claims := claim.New(db)
		var worker atomic.Int64
		b.Run("racefree", func(b *testing.B) {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				holder := fmt.Sprintf("w%d", worker.Add(1))
				for pb.Next() {
					if _, err := claims.Acquire(ctx, db, "hot", holder, time.Minute); err != nil && !isHeld(err) {
						b.Fatal(err)
					}
				}
			})
		})
		acquire := bare("acquire")
		b.Run("bare-sql", func(b *testing.B) {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				holder := fmt.Sprintf("w%d", worker.Add(1))
				var s string
				var n [7]int64
				var inserted bool
				for pb.Next() {
					if err := db.QueryRowContext(ctx, acquire, tenant.Default, "bare", "hot", holder, int64(60000), nil).
						Scan(&s, &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6], &inserted); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	})
}

func isHeld(err error) bool {
	_, ok := err.(*claim.HeldError)
	return ok
}
