package idempotency_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestReapScale measures Reap on RACEFREE_IDEM_REAP_ROWS records (skipped
// without it): a reap that finds nothing among that many live records, then
// the rate at which it deletes them once expired, for at most 20 s.
//
//	RACEFREE_IDEM_REAP_ROWS=1000000 go test -run TestReapScale -v ./idempotency/
func TestReapScale(t *testing.T) {
	rows, _ := strconv.Atoi(os.Getenv("RACEFREE_IDEM_REAP_ROWS"))
	if rows <= 0 {
		t.Skip("set RACEFREE_IDEM_REAP_ROWS to measure the reaper")
	}
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		fill := `INSERT INTO racefree_idempotency (scope, key, fingerprint, status, created_at, expires_at)
			WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
			SELECT 's', 'k' || i, 'fp', 'completed', 0, 9000000000000 + i FROM n`
		if db.Engine() == racefree.Postgres {
			fill = `INSERT INTO racefree_idempotency (scope, key, fingerprint, status, created_at, expires_at)
				SELECT 's', 'k' || i, 'fp', 'completed', 0, 9000000000000 + i FROM generate_series(1, $1) AS i`
		}
		if _, err := db.ExecContext(ctx, fill, rows); err != nil {
			t.Fatal(err)
		}
		if db.Engine() == racefree.Postgres {
			if _, err := db.ExecContext(ctx, `ANALYZE racefree_idempotency`); err != nil {
				t.Fatal(err)
			}
		}
		store := idempotency.New(db, nil)
		start := time.Now()
		const nothingRuns = 5
		for range nothingRuns {
			if n, err := store.Reap(ctx, 1000); err != nil || n != 0 {
				t.Fatalf("reap of nothing: %d, %v", n, err)
			}
		}
		t.Logf("%s: reap of nothing among %d records: %v", db.Engine(), rows, time.Since(start)/nothingRuns)

		if _, err := db.ExecContext(ctx, `UPDATE racefree_idempotency SET expires_at = expires_at - 8000000000000`); err != nil {
			t.Fatal(err)
		}
		if db.Engine() == racefree.Postgres {
			if _, err := db.ExecContext(ctx, `VACUUM ANALYZE racefree_idempotency`); err != nil {
				t.Fatal(err)
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		// One client keeps writing while the reaper runs.
		var latencies []time.Duration
		client := make(chan struct{})
		go func() {
			defer close(client)
			for i := 0; rctx.Err() == nil; i++ {
				begin := time.Now()
				_, err := store.Do(ctx, "client", strconv.Itoa(i), "fp", func(context.Context, *idempotency.Call) ([]byte, error) { return []byte("r"), nil })
				if err != nil {
					t.Errorf("client: %v", err)
					return
				}
				latencies = append(latencies, time.Since(begin))
			}
		}()
		start = time.Now()
		n, err := store.Reap(rctx, 1000)
		elapsed := time.Since(start)
		cancel()
		<-client
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		t.Logf("%s: reaped %d of %d expired records in %v: %.0f rows/s", db.Engine(), n, rows, elapsed, float64(n)/elapsed.Seconds())
		slices.Sort(latencies)
		if len(latencies) > 0 {
			t.Logf("%s: meanwhile one client's Do: %d calls, %.0f/s, p50 %v, p99 %v", db.Engine(), len(latencies),
				float64(len(latencies))/elapsed.Seconds(), latencies[len(latencies)/2], latencies[len(latencies)*99/100])
		}
	})
}
