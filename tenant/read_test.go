package tenant_test

import (
	"context"
	"errors"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// TestReadsWriteNothing: Read, ReadTx and ReadRow, for a tenant the
// process never saw, leave no row in the tenant registry (so they work on
// a standby), on both engines; on PostgreSQL, as the application role
// that row-level security binds, the transaction they run on the pool is
// READ ONLY: a write slipped into a read fails with ErrReadOnly on the
// primary, not only on a standby.
func TestReadsWriteNothing(t *testing.T) {
	t.Parallel()
	for _, engine := range testdb.Engines {
		t.Run(engine, func(t *testing.T) {
			ctx := context.Background()
			d := testdb.NewDSN(t, engine)
			owner := testdb.Open(t, d, nil)
			app := testdb.App(t, owner, d)
			const register = `INSERT INTO racefree_tenants (id, created_at) VALUES ('slipped-in', 0)`
			for i, read := range []func(ctx context.Context) error{
				func(ctx context.Context) error {
					return send.Read(ctx, app, app, func(exec racefree.Executor) error {
						_, err := exec.QueryContext(ctx, `SELECT 1`)
						return err
					})
				},
				func(ctx context.Context) error {
					return tenant.ReadTx(ctx, app, tenant.From(ctx), func(ctx context.Context, exec racefree.Executor) error {
						_, err := exec.QueryContext(ctx, `SELECT 1`)
						return err
					})
				},
				func(ctx context.Context) error {
					var one int
					return send.ReadRow(ctx, app, app, `SELECT 1`, nil, &one)
				},
			} {
				id := []string{"reader-a", "reader-b", "reader-c"}[i]
				tctx, _ := tenant.With(ctx, id)
				if err := read(tctx); err != nil {
					t.Fatalf("read %d: %v", i, err)
				}
				var n int
				if err := owner.QueryRowContext(ctx, `SELECT count(*) FROM racefree_tenants WHERE id = $1`, id).Scan(&n); err != nil || n != 0 {
					t.Fatalf("read %d registered tenant %s: %d rows, %v", i, id, n, err)
				}
			}
			if engine != racefree.Postgres {
				return
			}
			tctx, _ := tenant.With(ctx, "writer")
			err := send.Read(tctx, app, app, func(exec racefree.Executor) error {
				_, err := exec.ExecContext(tctx, register)
				return err
			})
			if !errors.Is(wire.Of(app).InterpretError(err), racefree.ErrReadOnly) {
				t.Fatalf("a write inside send.Read = %v, want ErrReadOnly", err)
			}
			err = tenant.ReadTx(tctx, app, "writer", func(ctx context.Context, exec racefree.Executor) error {
				_, err := exec.ExecContext(ctx, register)
				return err
			})
			if !errors.Is(wire.Of(app).InterpretError(err), racefree.ErrReadOnly) {
				t.Fatalf("a write inside tenant.ReadTx = %v, want ErrReadOnly", err)
			}
		})
	}
}
