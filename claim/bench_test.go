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
	"github.com/racefree/racefree/internal/testing/cputime"
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

// BenchmarkCombinedAcquireRelease runs Acquire then Release on distinct
// keys from 16 goroutines (GOMAXPROCS × 8) with the combiner on, so that
// the calls share batches: on PostgreSQL a batch's acquires (releases) run
// as one statement over arrays, on SQLite as one over a JSON array when
// eight or more share a batch. It reports the share of calls that ran
// through a Many form, and the CPU time a pair cost this process
// (cpu-ns/op: on SQLite the database's work too).
func BenchmarkCombinedAcquireRelease(b *testing.B) {
	for _, engine := range testdb.Engines {
		b.Run(engine, func(b *testing.B) {
			db := testdb.Open(b, testdb.NewDSN(b, engine), &racefree.Config{Combine: racefree.CombineOn, MaxOpenConns: 16})
			ctx := context.Background()
			claims := claim.New(db)
			// Warm up, then ANALYZE: without statistics PostgreSQL may
			// plan a key's lookup through the expiry index (bench/claims).
			// On PostgreSQL the table first gets 10,000 rows of another
			// namespace, as a table that autovacuum analyzes has the
			// statistics of its size: planned on 200 rows, the batches'
			// statements keep a generic plan that joins their arrays to a
			// scan of the whole table, which grows by every pair, and the
			// benchmark measured that scan (1.1 ms a pair, not 0.15;
			// docs/performance.md, "A plan made on a small table").
			if engine == racefree.Postgres {
				if _, err := db.ExecContext(ctx, `INSERT INTO racefree_claims (tenant, ns, key, holder, fence, claimed_at, expires_at, count, first_seen, last_seen)
					SELECT $1, 'bench-fill', 'f' || g, 'w', 1, 0, 0, 1, 0, 0 FROM generate_series(1, 10000) AS g`, tenant.Default); err != nil {
					b.Fatal(err)
				}
			}
			for i := range 200 {
				key := fmt.Sprintf("warm%d", i)
				c, err := claims.Acquire(ctx, db, key, "w", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := claims.Release(ctx, db, key, "w", c.Fence); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := db.ExecContext(ctx, "ANALYZE"); err != nil {
				b.Fatal(err)
			}
			var worker atomic.Int64
			before := db.CombineStats()
			cpu0 := cputime.Process()
			b.ResetTimer()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				w := worker.Add(1)
				for i := 0; pb.Next(); i++ {
					key := fmt.Sprintf("k%d-%d", w, i)
					c, err := claims.Acquire(ctx, db, key, "w", time.Minute)
					if err != nil {
						b.Fatal(err)
					}
					if err := claims.Release(ctx, db, key, "w", c.Fence); err != nil {
						b.Fatal(err)
					}
				}
			})
			cputime.PerOp(b, cpu0, b.N)
			s := db.CombineStats()
			b.ReportMetric(float64(s.Ops-before.Ops)/float64(max(s.Batches-before.Batches, 1)), "ops/batch")
			b.ReportMetric(100*float64(s.Many-before.Many)/float64(max(s.Ops-before.Ops, 1)), "%many")
		})
	}
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
