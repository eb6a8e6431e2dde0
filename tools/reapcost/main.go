package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/tenant"
)

// The reap statements before fence floors, for comparison (with the
// default tenant's filter, so that both reapers see the same rows).
const (
	oldReapPostgres = `DELETE FROM racefree_claims WHERE (ns, key) IN (
  SELECT ns, key FROM racefree_claims
  WHERE tenant = 'default' AND ns = $1 AND expires_at <= COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) - $2::bigint
  LIMIT $3)`
	oldReapSQLite = `DELETE FROM racefree_claims WHERE (ns, key) IN (
  SELECT ns, key FROM racefree_claims
  WHERE tenant = 'default' AND ns = ?1 AND expires_at <= COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) - ?2
  LIMIT ?3)`
)

func main() {
	d := flag.String("db", "", "sqlite:PATH or postgres://… (a scratch database)")
	rows := flag.Int("rows", 1_000_000, "claims in the table")
	lapsed := flag.Int("lapsed", 200_000, "of which lapsed long ago, reaped by each reaper")
	flag.Parse()
	if err := run(context.Background(), *d, *rows, *lapsed); err != nil {
		fmt.Fprintln(os.Stderr, "reapcost:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, d string, rows, lapsed int) error {
	if strings.HasPrefix(d, "postgres") {
		if err := freshSchema(ctx, d); err != nil {
			return err
		}
	}
	db, err := dsn.Open(ctx, d, &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		return err
	}
	defer db.Close()
	pg := db.Engine() == racefree.Postgres
	claims := claim.New(db)
	now := time.Now().UnixMilli()

	fmt.Printf("engine %s, %d live claims + %d lapsed per reaper\n", db.Engine(), rows, lapsed)
	if err := fill(ctx, db, 0, rows, now+time.Hour.Milliseconds()); err != nil {
		return err
	}

	// A reap that finds nothing.
	for _, old := range []bool{true, false} {
		if _, err := reap(ctx, db, claims, old, pg, 1000); err != nil { // warm up
			return err
		}
		start := time.Now()
		n, err := reap(ctx, db, claims, old, pg, 1000)
		if err != nil {
			return err
		}
		fmt.Printf("%s reap of nothing: %d rows in %v\n", label(old), n, time.Since(start).Round(time.Microsecond))
	}
	if pg {
		for _, batch := range []int{1000, 10000} {
			for _, old := range []bool{true, false} {
				if err := explain(ctx, db, old, batch, now); err != nil {
					return err
				}
			}
		}
	}

	// Rows per second, and on SQLite a client's acquire latency meanwhile.
	base := rows
	batches := []int{1000}
	if pg {
		batches = append(batches, 10000)
	}
	for _, batch := range batches {
		for _, old := range []bool{true, false} {
			if err := fill(ctx, db, base, lapsed, now-2*time.Hour.Milliseconds()); err != nil {
				return err
			}
			base += lapsed
			stop := make(chan struct{})
			var lat []time.Duration
			var wg sync.WaitGroup
			if !pg {
				wg.Add(1)
				go func() { defer wg.Done(); lat = client(ctx, claims, db, stop) }()
			}
			start := time.Now()
			n, err := reap(ctx, db, claims, old, pg, batch)
			took := time.Since(start)
			close(stop)
			wg.Wait()
			if err != nil {
				return err
			}
			fmt.Printf("%s reap of %d lapsed rows at batch %d: %v, %.0f rows/s", label(old), n, batch, took.Round(time.Millisecond), float64(n)/took.Seconds())
			if !pg {
				fmt.Printf("; a client's acquire+release meanwhile: %d pairs, %.0f pairs/s, p50 %v, p99 %v", len(lat), float64(len(lat))/took.Seconds(), pct(lat, 50), pct(lat, 99))
			}
			fmt.Println()
		}
	}
	if !pg {
		stop := make(chan struct{})
		time.AfterFunc(3*time.Second, func() { close(stop) })
		lat := client(ctx, claims, db, stop)
		fmt.Printf("no reap: a client's acquire+release: %.0f pairs/s, p50 %v, p99 %v\n", float64(len(lat))/3, pct(lat, 50), pct(lat, 99))
	}
	if pg {
		return hot(ctx, db, claims)
	}
	return nil
}

func label(old bool) string {
	if old {
		return "before:"
	}
	return "after: "
}

func reap(ctx context.Context, db *racefree.DB, claims *claim.Store, old, pg bool, batch int) (int64, error) {
	if !old {
		return claims.Reap(ctx, time.Hour, batch)
	}
	q := oldReapSQLite
	if pg {
		q = oldReapPostgres
	}
	var total int64
	for {
		res, err := db.ExecContext(ctx, q, "", time.Hour.Milliseconds(), batch, nil)
		if err != nil {
			return total, err
		}
		n, _ := res.RowsAffected()
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}

// client acquires and releases fresh keys until stop is closed and
// returns the latency of each pair.
func client(ctx context.Context, claims *claim.Store, db *racefree.DB, stop <-chan struct{}) []time.Duration {
	var lat []time.Duration
	for i := 0; ; i++ {
		select {
		case <-stop:
			return lat
		default:
		}
		start := time.Now()
		key := fmt.Sprintf("client-%d-%d", time.Now().UnixNano(), i)
		c, err := claims.Acquire(ctx, db, key, "client", time.Minute)
		if err == nil {
			err = claims.Release(ctx, db, key, "client", c.Fence)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "client:", err)
			return lat
		}
		lat = append(lat, time.Since(start))
	}
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)].Round(10 * time.Microsecond)
}

// fill inserts n claims keyed from first, all expiring at expires.
func fill(ctx context.Context, db *racefree.DB, first, n int, expires int64) error {
	q := `WITH RECURSIVE s(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM s WHERE i < ?2)
INSERT INTO racefree_claims (tenant, ns, key, holder, fence, claimed_at, expires_at, count, first_seen, last_seen)
SELECT 'default', '', 'k' || i, 'h', 1, ?3 - 60000, ?3, 1, ?3 - 60000, ?3 - 60000 FROM s`
	if db.Engine() == racefree.Postgres {
		q = `INSERT INTO racefree_claims (tenant, ns, key, holder, fence, claimed_at, expires_at, count, first_seen, last_seen)
SELECT 'default', '', 'k' || i, 'h', 1, $3::bigint - 60000, $3::bigint, 1, $3::bigint - 60000, $3::bigint - 60000 FROM generate_series($1::bigint, $2::bigint) AS i`
	}
	start := time.Now()
	if _, err := db.ExecContext(ctx, q, first, first+n-1, expires); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	if db.Engine() == racefree.Postgres {
		if _, err := db.ExecContext(ctx, `ANALYZE racefree_claims`); err != nil {
			return err
		}
	}
	fmt.Printf("filled %d rows in %v\n", n, time.Since(start).Round(time.Millisecond))
	return nil
}

func explain(ctx context.Context, db *racefree.DB, old bool, batch int, now int64) error {
	q := `EXPLAIN ` + oldReapPostgres
	args := []any{"", time.Hour.Milliseconds(), batch, nil}
	if !old {
		b, err := os.ReadFile("claim/sql/postgres/reap.sql")
		if err != nil {
			return err
		}
		q = `EXPLAIN ` + string(b)
		args = []any{tenant.Default, "", now - time.Hour.Milliseconds(), batch}
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Printf("%s plan at batch %d:\n", label(old), batch)
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return err
		}
		fmt.Println("   ", line)
	}
	return rows.Err()
}

// hot measures acquire+release pairs on PostgreSQL with the (tenant, ns,
// expires_at) index, which makes no claim update HOT, and without it.
func hot(ctx context.Context, db *racefree.DB, claims *claim.Store) error {
	for _, withIndex := range []bool{true, false} {
		if !withIndex {
			if _, err := db.ExecContext(ctx, `DROP INDEX racefree_claims_tenant_expiry`); err != nil {
				return err
			}
		}
		var upd0, hot0 int64
		if err := db.QueryRowContext(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'racefree_claims' AND schemaname = current_schema()`).Scan(&upd0, &hot0); err != nil {
			return err
		}
		stop := make(chan struct{})
		time.AfterFunc(5*time.Second, func() { close(stop) })
		lat := client(ctx, claims, db, stop)
		time.Sleep(time.Second) // statistics are sent asynchronously
		var upd, hotUpd int64
		if err := db.QueryRowContext(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'racefree_claims' AND schemaname = current_schema()`).Scan(&upd, &hotUpd); err != nil {
			return err
		}
		fmt.Printf("index on expires_at %v: %.0f acquire+release pairs/s, p50 %v, p99 %v; updates %d, of which HOT %d\n",
			withIndex, float64(len(lat))/5, pct(lat, 50), pct(lat, 99), upd-upd0, hotUpd-hot0)
	}
	return nil
}

func freshSchema(ctx context.Context, d string) error {
	u, err := url.Parse(d)
	if err != nil {
		return err
	}
	schema := u.Query().Get("search_path")
	if schema == "" {
		return fmt.Errorf("give the scratch schema as search_path in the URL")
	}
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	admin, err := sql.Open("pgx", u.String())
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
		return err
	}
	_, err = admin.ExecContext(ctx, `CREATE SCHEMA `+schema)
	return err
}
