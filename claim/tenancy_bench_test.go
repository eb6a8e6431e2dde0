package claim_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// BenchmarkTenancyCost measures what tenancy costs an acquire and a
// release on PostgreSQL, 16 clients on distinct keys:
//
//   - previous: the previous release's statements (testdata/previous),
//     each in autocommit as that release ran them, on a schema without
//     row-level security (011);
//   - pool: this release's Acquire and Release through the pool, as the
//     application role that row-level security binds (012): each
//     statement travels with the setting of its tenant in one round trip
//     (send.QueryRow, send.Exec);
//   - pertx: the same calls, each in a transaction of its own that sets
//     the tenant (BEGIN, set_config, statements, COMMIT), as this release
//     ran them on the pool before the pipeline;
//   - bypass: the same calls as a superuser, which row-level security does
//     not bind: this release's statements without the setting;
//   - intx: the same two calls inside one tenant.InTx each, the way the
//     server runs a request.
//
// The claims table starts with 2000 rows and is analyzed before each
// sub-benchmark: on a table that was never analyzed PostgreSQL may cache a
// plan that finds a key through the expiry index, and the figures would
// measure that plan rather than tenancy. pg-cpu-ns/op is the CPU time of
// the sub-benchmark's own server processes per pair, when the server runs
// on this machine (read from /proc): on a shared machine it varies less
// than the time per pair.
func BenchmarkTenancyCost(b *testing.B) {
	ctx := context.Background()
	dsn := testdb.NewDSN(b, racefree.Postgres)
	u, err := url.Parse(dsn)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", "racefree_tenancy_bench_"+strconv.Itoa(os.Getpid()))
	u.RawQuery = q.Encode()
	dsn = u.String()
	owner := testdb.Open(b, dsn, &racefree.Config{Schema: racefree.SchemaAllowOutdated, MaxOpenConns: 16})
	if _, err := owner.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
		b.Fatal(err)
	}
	if _, err := owner.ExecContext(ctx, `
INSERT INTO racefree_claims (ns, key, holder, fence, claimed_at, expires_at, count, first_seen, last_seen)
SELECT '', 'seed' || g, 'w', 1, 0, 0, 1, 0, 0 FROM generate_series(1, 2000) AS g`); err != nil {
		b.Fatal(err)
	}
	read := func(name string) string {
		q, err := os.ReadFile(filepath.Join("testdata", "previous", racefree.Postgres, name+".sql"))
		if err != nil {
			b.Fatal(err)
		}
		return string(q)
	}
	acquire, raise, release := read("acquire"), read("raise_to_floor"), read("release")
	var seq atomic.Int64
	parallel := func(b *testing.B, op func(key string) error) {
		if _, err := owner.ExecContext(ctx, `ANALYZE racefree_claims, racefree_claim_floors`); err != nil {
			b.Fatal(err)
		}
		b.SetParallelism(8) // 16 clients on 2 cores
		cpu := serverCPU(b, owner, q.Get("application_name"))
		defer cpu()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := op(fmt.Sprintf("k%d", seq.Add(1))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("previous", func(b *testing.B) {
		parallel(b, func(key string) error {
			var holder string
			var n [7]int64
			var inserted bool
			if err := owner.QueryRowContext(ctx, acquire, "", key, "w", int64(60000), nil).
				Scan(&holder, &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6], &inserted); err != nil {
				return err
			}
			if inserted { // as the previous library did
				err := owner.QueryRowContext(ctx, raise, "", key, "w", n[0]).Scan(&n[0])
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					return err
				}
			}
			_, err := owner.ExecContext(ctx, release, "", key, "w", n[0], nil)
			return err
		})
	})
	if _, err := owner.MigrateUp(ctx); err != nil {
		b.Fatal(err)
	}
	app := testdb.App(b, owner, dsn)
	app.SQL().SetMaxOpenConns(16)
	app.SQL().SetMaxIdleConns(16)
	claims := claim.New(app)
	acme, _ := tenant.With(ctx, "acme")
	b.Run("pool", func(b *testing.B) {
		parallel(b, func(key string) error {
			c, err := claims.Acquire(acme, app, key, "w", time.Minute)
			if err != nil {
				return err
			}
			return claims.Release(acme, app, key, "w", c.Fence)
		})
	})
	b.Run("pertx", func(b *testing.B) {
		parallel(b, func(key string) error {
			var c *claim.Claim
			err := send.Run(acme, app, app, func(tx racefree.Executor) (err error) {
				c, err = claims.Acquire(acme, tx, key, "w", time.Minute)
				return err
			})
			if err != nil {
				return err
			}
			return send.Run(acme, app, app, func(tx racefree.Executor) error {
				return claims.Release(acme, tx, key, "w", c.Fence)
			})
		})
	})
	su := claim.New(owner)
	b.Run("bypass", func(b *testing.B) {
		parallel(b, func(key string) error {
			c, err := su.Acquire(acme, owner, key, "w", time.Minute)
			if err != nil {
				return err
			}
			return su.Release(acme, owner, key, "w", c.Fence)
		})
	})
	b.Run("intx", func(b *testing.B) {
		parallel(b, func(key string) error {
			var c *claim.Claim
			err := tenant.InTx(ctx, app, "acme", func(ctx context.Context, tx *sql.Tx) (err error) {
				c, err = claims.Acquire(ctx, tx, key, "w", time.Minute)
				return err
			})
			if err != nil {
				return err
			}
			return tenant.InTx(ctx, app, "acme", func(ctx context.Context, tx *sql.Tx) error {
				return claims.Release(ctx, tx, key, "w", c.Fence)
			})
		})
	})
}

// serverCPU reads the CPU time of the server processes serving the
// connections named app, and returns a function that reports, per
// operation, the CPU time they spent since. It reports nothing unless the
// server runs on this machine.
func serverCPU(b *testing.B, db *racefree.DB, app string) func() {
	read := func() map[int]int64 {
		rows, err := db.QueryContext(context.Background(), `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
		if err != nil {
			b.Fatal(err)
		}
		defer rows.Close()
		ticks := map[int]int64{}
		for rows.Next() {
			var pid int
			if err := rows.Scan(&pid); err != nil {
				b.Fatal(err)
			}
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				continue
			}
			// utime and stime, in clock ticks (100 a second), follow the
			// command name and eleven other fields.
			f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
			user, _ := strconv.ParseInt(f[11], 10, 64)
			system, _ := strconv.ParseInt(f[12], 10, 64)
			ticks[pid] = user + system
		}
		return ticks
	}
	start := read()
	return func() {
		var spent int64
		end := read()
		for pid, t := range end {
			spent += t - start[pid]
		}
		if len(end) > 0 && spent > 0 {
			b.ReportMetric(float64(spent)*1e7/float64(b.N), "pg-cpu-ns/op")
		}
	}
}
