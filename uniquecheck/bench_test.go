package uniquecheck_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/cputime"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/uniquecheck"
)

// benchRows is the table size of BenchmarkCheck: RACEFREE_BENCH_ROWS, else
// one million, or ten thousand with -short.
func benchRows(b *testing.B) int {
	if s := os.Getenv("RACEFREE_BENCH_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 10 {
			b.Fatalf("RACEFREE_BENCH_ROWS=%q", s)
		}
		return n
	}
	if testing.Short() {
		return 10_000
	}
	return 1_000_000
}

// BenchmarkCheck measures rows scanned per second by Check on a table whose
// emails repeat for one row in ten, next to the bare GROUP BY … HAVING query
// a person would type, with the same predicate and NULL filter, for two
// shapes of key: lower(email) with a partial predicate, and the plain
// column email (no index on either). On SQLite,
// which runs in this process, it also reports the process's CPU time per
// operation (cpu-ms/op), which other work on a shared machine disturbs far
// less than the wall time; on PostgreSQL that metric is the client's only.
//
//	TEST_DATABASE_URL=… go test -run '^$' -bench Check -benchtime 5x ./uniquecheck/
func BenchmarkCheck(b *testing.B) {
	n := benchRows(b)
	for _, engine := range testdb.Engines {
		b.Run(engine, func(b *testing.B) {
			ctx := context.Background()
			db := testdb.Open(b, testdb.NewDSN(b, engine), nil)
			exec := func(q string, args ...any) {
				if _, err := db.ExecContext(ctx, q, args...); err != nil {
					b.Fatalf("%s: %v", q, err)
				}
			}
			exec(`CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT, deleted_at BIGINT)`)
			fill := `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?)
				INSERT INTO users SELECT i, 'User' || (i % ?) || '@example.com', CASE WHEN i % 20 = 0 THEN i END FROM s`
			if engine == racefree.Postgres {
				fill = `INSERT INTO users SELECT i, 'User' || (i % $2) || '@example.com', CASE WHEN i % 20 = 0 THEN i END FROM generate_series(1, $1) AS i`
			}
			start := time.Now()
			exec(fill, n, n*9/10)
			exec(`ANALYZE`)
			b.Logf("%s: %d rows loaded in %s", engine, n, time.Since(start).Round(time.Millisecond))

			for _, shape := range []struct {
				name string
				spec uniquecheck.Spec
				bare string
			}{
				{"lower-email-partial", uniquecheck.Spec{Table: "users", Keys: []string{"lower(email)"}, Where: "deleted_at IS NULL"},
					`SELECT lower(email), count(*) FROM users
						WHERE deleted_at IS NULL AND lower(email) IS NOT NULL
						GROUP BY lower(email) HAVING count(*) > 1`},
				{"email", uniquecheck.Spec{Table: "users", Keys: []string{"email"}},
					`SELECT email, count(*) FROM users WHERE email IS NOT NULL GROUP BY email HAVING count(*) > 1`},
			} {
				b.Run(shape.name+"/check", func(b *testing.B) {
					cpu := cputime.Process()
					for b.Loop() {
						rep, err := uniquecheck.Check(ctx, db, shape.spec)
						if err != nil {
							b.Fatal(err)
						}
						if rep.DuplicateGroups == 0 {
							b.Fatal("no duplicates found")
						}
					}
					b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
					reportCPU(b, cpu)
				})
				b.Run(shape.name+"/bare-group-by", func(b *testing.B) {
					cpu := cputime.Process()
					for b.Loop() {
						rows, err := db.QueryContext(ctx, shape.bare)
						if err != nil {
							b.Fatal(err)
						}
						groups := 0
						for rows.Next() {
							groups++
						}
						if err := rows.Close(); err != nil || groups == 0 {
							b.Fatalf("%d groups, %v", groups, err)
						}
					}
					b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
					reportCPU(b, cpu)
				})
			}
		})
	}
}

// reportCPU reports the CPU time per operation since start, if measured.
func reportCPU(b *testing.B, start time.Duration) {
	if d := cputime.Process() - start; start > 0 && d > 0 {
		b.ReportMetric(float64(d.Milliseconds())/float64(b.N), "cpu-ms/op")
	}
}
