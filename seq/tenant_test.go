package seq_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/seq"
	"github.com/racefree/racefree/tenant"
)

// eachRole runs body on each engine as the database's owner (on
// PostgreSQL the test server's superuser, whom row-level security does not
// bind, so the tenant filter in the SQL alone keeps tenants apart) and, on
// PostgreSQL, also as the application role, which row-level security
// binds, on a database of its own. owner is the owner's handle, for
// reading every tenant's rows.
func eachRole(t *testing.T, body func(t *testing.T, db, owner *racefree.DB)) {
	t.Helper()
	for _, engine := range testdb.Engines {
		t.Run(engine, func(t *testing.T) {
			t.Run("owner", func(t *testing.T) {
				owner := testdb.Open(t, testdb.NewDSN(t, engine), nil)
				body(t, owner, owner)
			})
			if engine == racefree.Postgres {
				t.Run("app", func(t *testing.T) {
					d := testdb.NewDSN(t, engine)
					owner := testdb.Open(t, d, nil)
					body(t, testdb.App(t, owner, d), owner)
				})
			}
		})
	}
}

func withTenant(t *testing.T, id string) context.Context {
	t.Helper()
	ctx, err := tenant.With(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

// counterRows reads every tenant's counters as the owner:
// "tenant/scope/name" -> last.
func counterRows(t *testing.T, owner *racefree.DB) map[string]int64 {
	t.Helper()
	rows, err := owner.QueryContext(context.Background(), `SELECT tenant, scope, name, last FROM racefree_sequences`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var tn, scope, name string
		var last int64
		if err := rows.Scan(&tn, &scope, &name, &last); err != nil {
			t.Fatal(err)
		}
		out[tn+"/"+scope+"/"+name] = last
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func wantRows(t *testing.T, owner *racefree.DB, want map[string]int64) {
	t.Helper()
	if got := counterRows(t, owner); !maps.Equal(got, want) {
		t.Fatalf("counter rows %v; want %v", got, want)
	}
}

// TestTenantsAreIsolated: two tenants using the same scope and name have
// two counters. Each counts from 1, neither sees the other's (Current),
// each increment leaves the other's row as it was, and on PostgreSQL a
// counter held locked in one tenant's open transaction does not make the
// other's wait. As the owner (the SQL filter alone) and as the
// application role (row-level security too).
func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	eachRole(t, func(t *testing.T, db, owner *racefree.DB) {
		a, b, c := withTenant(t, "a"), withTenant(t, "b"), withTenant(t, "c")
		counters := seq.New(db)
		next := func(ctx context.Context, exec racefree.Executor, n, want int64) {
			t.Helper()
			if got, err := counters.NextN(ctx, exec, "acme", "invoice", n); err != nil || got != want {
				t.Fatalf("%s: NextN(%d) = %d, %v; want %d", tenant.From(ctx), n, got, err, want)
			}
		}
		current := func(ctx context.Context, exec racefree.Executor, want int64) {
			t.Helper()
			if got, err := counters.Current(ctx, exec, "acme", "invoice"); err != nil || got != want {
				t.Fatalf("%s: Current = %d, %v; want %d", tenant.From(ctx), got, err, want)
			}
		}
		next(a, db, 3, 1)
		wantRows(t, owner, map[string]int64{"a/acme/invoice": 3})
		current(b, db, 0)
		current(c, db, 0)
		current(context.Background(), db, 0) // the default tenant
		next(b, db, 1, 1)
		wantRows(t, owner, map[string]int64{"a/acme/invoice": 3, "b/acme/invoice": 1})
		next(a, db, 1, 4)
		wantRows(t, owner, map[string]int64{"a/acme/invoice": 4, "b/acme/invoice": 1})
		current(a, db, 4)
		current(b, db, 1)
		current(c, db, 0)
		// In a transaction of the tenant's own.
		err := tenant.InTx(context.Background(), db, "b", func(ctx context.Context, tx *sql.Tx) error {
			next(ctx, tx, 2, 2)
			current(ctx, tx, 3)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		wantRows(t, owner, map[string]int64{"a/acme/invoice": 4, "b/acme/invoice": 3})
		// A rollback of one tenant's transaction leaves both counters.
		errRollback := errors.New("roll back")
		err = tenant.InTx(context.Background(), db, "a", func(ctx context.Context, tx *sql.Tx) error {
			next(ctx, tx, 5, 5)
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatalf("InTx = %v", err)
		}
		wantRows(t, owner, map[string]int64{"a/acme/invoice": 4, "b/acme/invoice": 3})
		if db.Engine() != racefree.Postgres {
			return // one writer per file: every transaction waits for an open one
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		next(a, tx, 1, 5) // a's row stays locked until tx ends
		done := make(chan error, 1)
		go func() {
			got, err := counters.Next(b, db, "acme", "invoice")
			if err == nil && got != 4 {
				err = fmt.Errorf("b's Next = %d; want 4", got)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("b's Next waited for a's open transaction")
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		wantRows(t, owner, map[string]int64{"a/acme/invoice": 5, "b/acme/invoice": 4})
	})
}

// TestOutdatedSchemaIsRefused: at schema 010 Next and Current are
// ErrSchemaOutdated and write nothing; at 011 they work for the default
// tenant, and another tenant is ErrSchemaOutdated until 012.
func TestOutdatedSchemaIsRefused(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		acme := withTenant(t, "acme")
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(ctx, seq.Migration-1); err != nil {
			t.Fatal(err)
		}
		c := seq.New(db)
		if _, err := c.Next(ctx, db, "s", "invoice"); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("Next on schema 010 = %v; want ErrSchemaOutdated", err)
		}
		if _, err := c.Current(ctx, db, "s", "invoice"); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("Current on schema 010 = %v; want ErrSchemaOutdated", err)
		}
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := c.NextN(ctx, tx, "s", "invoice", 2)
			return err
		})
		if !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("NextN in a transaction on schema 010 = %v; want ErrSchemaOutdated", err)
		}
		var rows int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_sequences`).Scan(&rows); err != nil || rows != 0 {
			t.Fatalf("%d counter rows on schema 010, %v; want none", rows, err)
		}
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Next(ctx, db, "s", "invoice"); err != nil || n != 1 {
			t.Fatalf("Next on schema 011 = %d, %v; want 1", n, err)
		}
		if _, err := c.Next(acme, db, "s", "invoice"); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("Next of tenant acme on schema 011 = %v; want ErrSchemaOutdated", err)
		}
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Next(acme, db, "s", "invoice"); err != nil || n != 1 {
			t.Fatalf("Next of tenant acme on schema 012 = %d, %v; want 1", n, err)
		}
		if n, err := c.Next(ctx, db, "s", "invoice"); err != nil || n != 2 {
			t.Fatalf("Next of the default tenant on schema 012 = %d, %v; want 2", n, err)
		}
	})
}

// TestPreviousReleaseRunsOnTheExpandedSchema: during a rollout, between
// migrations 011 and 012, the previous release's statements
// (testdata/previous, as they were before tenancy) still hand out numbers
// against the expanded schema, and this release reads and continues the
// same counters as the default tenant's, and the other way round. After
// 012 the previous statements fail, and the counters carry on.
func TestPreviousReleaseRunsOnTheExpandedSchema(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		prev, err := query.Load(os.DirFS("testdata"), "previous", db.Engine())
		if err != nil {
			t.Fatal(err)
		}
		prevNext := func(n, want int64) {
			t.Helper()
			var last int64
			if err := db.QueryRowContext(ctx, prev.Get("next"), "acme", "invoice", n).Scan(&last); err != nil || last != want {
				t.Fatalf("previous next(%d) = %d, %v; want last %d", n, last, err, want)
			}
		}
		prevCurrent := func(want int64) {
			t.Helper()
			var last int64
			if err := db.QueryRowContext(ctx, prev.Get("current"), "acme", "invoice").Scan(&last); err != nil || last != want {
				t.Fatalf("previous current = %d, %v; want %d", last, err, want)
			}
		}
		prevNext(3, 3)
		prevNext(1, 4)
		prevCurrent(4)
		wantRows(t, db, map[string]int64{"default/acme/invoice": 4})

		c := seq.New(db)
		if cur, err := c.Current(ctx, db, "acme", "invoice"); err != nil || cur != 4 {
			t.Fatalf("Current of the previous release's counter = %d, %v; want 4", cur, err)
		}
		if n, err := c.NextN(ctx, db, "acme", "invoice", 2); err != nil || n != 5 {
			t.Fatalf("NextN after the previous release = %d, %v; want 5", n, err)
		}
		prevCurrent(6)
		prevNext(1, 7)
		if n, err := c.Next(ctx, db, "acme", "invoice"); err != nil || n != 8 {
			t.Fatalf("Next after the previous release again = %d, %v; want 8", n, err)
		}
		wantRows(t, db, map[string]int64{"default/acme/invoice": 8})

		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		var last int64
		if err := db.QueryRowContext(ctx, prev.Get("next"), "acme", "invoice", 1).Scan(&last); err == nil {
			t.Fatalf("previous next after 012 handed out %d; want an error", last)
		}
		if n, err := c.Next(ctx, db, "acme", "invoice"); err != nil || n != 9 {
			t.Fatalf("Next after 012 = %d, %v; want 9", n, err)
		}
	})
}
