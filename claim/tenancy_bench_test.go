package claim_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/testdb"
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
//     (tenant.QueryRow, tenant.Exec);
//   - intx: the same two calls inside one tenant.InTx, the way the server
//     runs a request.
func BenchmarkTenancyCost(b *testing.B) {
	ctx := context.Background()
	dsn := testdb.NewDSN(b, racefree.Postgres)
	owner := testdb.Open(b, dsn, &racefree.Config{Schema: racefree.SchemaAllowOutdated, MaxOpenConns: 16})
	if _, err := owner.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
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
		b.SetParallelism(8) // 16 clients on 2 cores
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
