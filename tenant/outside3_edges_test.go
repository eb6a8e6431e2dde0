package tenant_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// settingOf reads the tenant the transaction (or connection) exec is set
// to on PostgreSQL, "" when none.
func settingOf(t *testing.T, ctx context.Context, exec racefree.Executor) string {
	t.Helper()
	var got string
	if err := exec.QueryRowContext(ctx, `SELECT COALESCE(current_setting('racefree.tenant_id', true), '')`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestOutside3EdgesTheTransactionsContextNamesItsTenant: the context InTx
// and ReadTx hand fn names the tenant they were given, whatever the
// caller's context named, on both engines (on SQLite ReadTx runs fn on the
// pool, and the context is all that carries the tenant there).
func TestOutside3EdgesTheTransactionsContextNamesItsTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		globex, _ := tenant.With(ctx, "globex")
		for _, caller := range []context.Context{ctx, globex} {
			var got string
			if err := tenant.ReadTx(caller, db, "acme", func(ctx context.Context, _ racefree.Executor) error {
				got = tenant.From(ctx)
				return nil
			}); err != nil || got != "acme" {
				t.Fatalf("ReadTx(acme) from a context naming %q: fn's context names %q (%v), want acme", tenant.From(caller), got, err)
			}
			got = ""
			if err := tenant.InTx(caller, db, "acme", func(ctx context.Context, _ *sql.Tx) error {
				got = tenant.From(ctx)
				return nil
			}); err != nil || got != "acme" {
				t.Fatalf("InTx(acme) from a context naming %q: fn's context names %q (%v), want acme", tenant.From(caller), got, err)
			}
		}
	})
}

// TestOutside3EdgesACallInsideInTxWithAContextOfItsOwn: inside InTx for
// acme, a racefree call made with the transaction and a context of the
// application's own (tenant.With, not fn's context) runs when that context
// names acme, and is a MismatchError, naming the transaction's tenant and
// the call's each on its side, when it names another tenant (the default
// one): one transaction belongs to one tenant, on both engines.
func TestOutside3EdgesACallInsideInTxWithAContextOfItsOwn(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		err := tenant.InTx(ctx, db, "acme", func(_ context.Context, tx *sql.Tx) error {
			own, _ := tenant.With(context.Background(), "acme")
			ran := false
			if err := send.Run(own, db, tx, func(racefree.Executor) error { ran = true; return nil }); err != nil || !ran {
				t.Errorf("a call for acme with a context of its own in acme's InTx: ran %v, %v", ran, err)
			}
			ran = false
			err := send.Run(context.Background(), db, tx, func(racefree.Executor) error { ran = true; return nil })
			if !errors.Is(err, tenant.ErrMismatch) || ran {
				t.Errorf("a call for the default tenant in acme's InTx: ran %v, %v, want ErrMismatch", ran, err)
			}
			if err != nil && !strings.Contains(err.Error(), `the transaction belongs to tenant "acme", the call to tenant "default"`) {
				t.Errorf("the mismatch says %q", err)
			}
			var m *tenant.MismatchError
			if errors.As(err, &m) && (m.Tx != "acme" || m.Context != "default") {
				t.Errorf("the mismatch is %+v", m)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestOutside3EdgesEachReturnsTheErrorOfATenant: Each returns the error
// fn returned for a tenant, on both engines: a reaper that failed for a
// tenant is not reported as having run.
func TestOutside3EdgesEachReturnsTheErrorOfATenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		if err := tenant.InTx(ctx, db, "acme", func(context.Context, *sql.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("the reaper failed for acme")
		seen := false
		err := tenant.Each(ctx, db, func(ctx context.Context) error {
			if tenant.From(ctx) == "acme" {
				seen = true
				return boom
			}
			return nil
		})
		if !seen || !errors.Is(err, boom) {
			t.Fatalf("Each with fn failing for acme: seen %v, %v, want acme's error", seen, err)
		}
	})
}

// strictApp opens d as the application role with
// RequireSynchronousReplication, on the shared server, which has no
// standby: every write is refused there.
func strictApp(t *testing.T, owner *racefree.DB, d string) *racefree.DB {
	t.Helper()
	db, err := dsn.Open(context.Background(), testdb.AppDSN(t, owner, d), &racefree.Config{RequireSynchronousReplication: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestOutside3EdgesStrictModeRefusesWritesNotReads: a DB that requires
// synchronous replication, as the application role on the shared server
// (no standby), refuses a write (InTx) with a NotDurableError and
// CheckDurable says so, but reads, which commit nothing, are never checked:
// ReadTx, a read of several statements on the pool (Read), a read
// pipelined with its tenant (ReadRow) and a read in the caller's
// transaction all run.
func TestOutside3EdgesStrictModeRefusesWritesNotReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	db := strictApp(t, owner, d)
	var nd *racefree.NotDurableError
	if err := tenant.CheckDurable(ctx, db); !errors.As(err, &nd) {
		t.Fatalf("CheckDurable without a standby = %v, want a NotDurableError", err)
	}
	if err := tenant.InTx(ctx, db, "acme", func(context.Context, *sql.Tx) error { return nil }); !errors.As(err, &nd) {
		t.Fatalf("InTx without a standby = %v, want a NotDurableError", err)
	}
	acme, _ := tenant.With(ctx, "acme")
	count := func(exec racefree.Executor) error {
		var n int
		return exec.QueryRowContext(ctx, `SELECT count(*) FROM racefree_claims`).Scan(&n)
	}
	if err := tenant.ReadTx(ctx, db, "acme", func(_ context.Context, exec racefree.Executor) error { return count(exec) }); err != nil {
		t.Errorf("ReadTx in strict mode = %v", err)
	}
	if err := send.Read(acme, db, db, count); err != nil {
		t.Errorf("Read on the pool in strict mode = %v", err)
	}
	var one int
	if err := send.ReadRow(acme, db, db, `SELECT 1`, nil, &one); err != nil || one != 1 {
		t.Errorf("ReadRow in strict mode = %d, %v", one, err)
	}
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := send.Read(acme, db, tx, count); err != nil {
		t.Errorf("Read in the caller's transaction in strict mode = %v", err)
	}
	if got := settingOf(t, ctx, tx); got != "acme" {
		t.Errorf("Read in the caller's transaction left it set to %q, want acme", got)
	}
}

// TestOutside3EdgesACallersTransactionSetToAnotherTenant: a transaction
// the application set to tenant globex itself (set_config) is refused by
// a racefree read and a racefree write for acme with a MismatchError,
// neither of which runs its statements nor switches the transaction to
// acme; PostgreSQL, as the application role.
func TestOutside3EdgesACallersTransactionSetToAnotherTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	db := testdb.App(t, testdb.Open(t, d, nil), d)
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT set_config('racefree.tenant_id', 'globex', true)`); err != nil {
		t.Fatal(err)
	}
	acme, _ := tenant.With(ctx, "acme")
	for name, call := range map[string]func(context.Context, *racefree.DB, racefree.Executor, func(racefree.Executor) error) error{"Read": send.Read, "Run": send.Run} {
		ran := false
		err := call(acme, db, tx, func(racefree.Executor) error { ran = true; return nil })
		if !errors.Is(err, tenant.ErrMismatch) || ran {
			t.Errorf("%s for acme in a transaction set to globex: ran %v, %v, want ErrMismatch", name, ran, err)
		}
		if got := settingOf(t, ctx, tx); got != "globex" {
			t.Fatalf("%s for acme switched the transaction set to globex to %q", name, got)
		}
	}
}

// TestOutside3EdgesACallersNextTransactionOnAConnection: on a pooled
// connection that once ran a transaction set to a tenant, the setting
// reads the empty string (not NULL) once that transaction ended; a
// racefree write and a racefree read in the caller's next transaction
// there take the empty string for no tenant and set theirs, without a
// MismatchError; PostgreSQL, as the application role.
func TestOutside3EdgesACallersNextTransactionOnAConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	db := testdb.App(t, testdb.Open(t, d, nil), d)
	conn, err := db.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT set_config('racefree.tenant_id', 'globex', true)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	acme, _ := tenant.With(ctx, "acme")
	for name, call := range map[string]func(context.Context, *racefree.DB, racefree.Executor, func(racefree.Executor) error) error{"Read": send.Read, "Run": send.Run} {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := settingOf(t, ctx, tx); got != "" {
			t.Fatalf("the next transaction begins set to %q", got)
		}
		var got string
		err = call(acme, db, tx, func(exec racefree.Executor) error { got = settingOf(t, ctx, exec); return nil })
		_ = tx.Rollback()
		if err != nil || got != "acme" {
			t.Errorf("%s for acme in the connection's next transaction: set to %q, %v, want acme", name, got, err)
		}
	}
}

// TestOutside3EdgesInTxsContextWithAnotherTransaction: fn's context
// (InTx's, bound to InTx's transaction) given with another transaction,
// the caller's own, is no proof that this one is set: a racefree call
// there sets the tenant in it first; PostgreSQL, as the application role.
func TestOutside3EdgesInTxsContextWithAnotherTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	db := testdb.App(t, testdb.Open(t, d, nil), d)
	// acme registered first: a registration inside InTx, not yet
	// committed, would hold the other transaction's own.
	if err := tenant.InTx(ctx, db, "acme", func(context.Context, *sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	err := tenant.InTx(ctx, db, "acme", func(ctx context.Context, _ *sql.Tx) error {
		other, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = other.Rollback() }()
		var got string
		if err := send.Run(ctx, db, other, func(exec racefree.Executor) error { got = settingOf(t, ctx, exec); return nil }); err != nil || got != "acme" {
			t.Errorf("a call with InTx's context in another transaction ran set to %q, %v, want acme", got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOutside3EdgesReadsOfATenantNeedTheKeysMigration: at migration 011,
// before row-level security, ReadTx and a read pipelined with its tenant
// (ReadRow, as an owner that row-level security binds) for a tenant other
// than the default are ErrSchemaOutdated and run nothing; for the default
// tenant they run. PostgreSQL (on SQLite ReadTx runs fn on the pool, and
// each racefree call in it checks the schema).
func TestOutside3EdgesReadsOfATenantNeedTheKeysMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.OwnerDSN(t, testdb.NewDSN(t, racefree.Postgres))
	db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
	if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := tenant.ReadTx(ctx, db, "acme", func(context.Context, racefree.Executor) error { ran = true; return nil }); !errors.Is(err, racefree.ErrSchemaOutdated) || ran {
		t.Errorf("ReadTx(acme) at migration %d: ran %v, %v, want ErrSchemaOutdated", tenant.TenantsVersion, ran, err)
	}
	if err := tenant.ReadTx(ctx, db, tenant.Default, func(context.Context, racefree.Executor) error { ran = true; return nil }); err != nil || !ran {
		t.Errorf("ReadTx(default) at migration %d: ran %v, %v", tenant.TenantsVersion, ran, err)
	}
	acme, _ := tenant.With(ctx, "acme")
	one := 0
	if err := send.ReadRow(acme, db, db, `SELECT 1`, nil, &one); !errors.Is(err, racefree.ErrSchemaOutdated) || one != 0 {
		t.Errorf("ReadRow for acme at migration %d: %d, %v, want ErrSchemaOutdated", tenant.TenantsVersion, one, err)
	}
	if err := send.ReadRow(ctx, db, db, `SELECT 1`, nil, &one); err != nil || one != 1 {
		t.Errorf("ReadRow for the default tenant at migration %d: %d, %v", tenant.TenantsVersion, one, err)
	}
}
