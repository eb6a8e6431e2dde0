package tenant_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestCheckAtEachCharacterBound tries every end of each character range
// a tenant id may hold, and the character just outside it, alone and after
// a letter: 'a' 'z' 'A' 'Z' '0' '9' pass anywhere; '`' '{' '@' '[' '/'
// never; ':' '-' '_' '.' pass only after the first byte.
func TestCheckAtEachCharacterBound(t *testing.T) {
	t.Parallel()
	for _, c := range "azAZ09" {
		for _, id := range []string{string(c), "x" + string(c), string(c) + "x"} {
			if err := tenant.Check(id); err != nil {
				t.Errorf("Check(%q) = %v; want nil", id, err)
			}
		}
	}
	for _, c := range "`{@[/;" {
		for _, id := range []string{string(c), "x" + string(c)} {
			if err := tenant.Check(id); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Check(%q) = %v; want an InputError", id, err)
			}
		}
	}
	for _, c := range ":-_." {
		if err := tenant.Check("x" + string(c)); err != nil {
			t.Errorf("Check(%q) = %v; want nil", "x"+string(c), err)
		}
		if err := tenant.Check(string(c) + "x"); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("Check(%q) = %v; want an InputError (not a letter or digit first)", string(c)+"x", err)
		}
	}
}

// seqInsert is an INSERT of one sequence row for the tenant of $1/?1 in
// db's dialect.
func seqInsert(db *racefree.DB) string {
	if db.Engine() == racefree.SQLite {
		return `INSERT INTO racefree_sequences (tenant, scope, name, last) VALUES (?1, 's', 'n', 1)`
	}
	return `INSERT INTO racefree_sequences (tenant, scope, name, last) VALUES ($1, 's', 'n', 1)`
}

func seqRows(t *testing.T, db *racefree.DB, id string) int {
	t.Helper()
	q := `SELECT count(*) FROM racefree_sequences WHERE tenant = $1`
	if db.Engine() == racefree.SQLite {
		q = `SELECT count(*) FROM racefree_sequences WHERE tenant = ?1`
	}
	var n int
	if err := db.QueryRowContext(context.Background(), q, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func visited(t *testing.T, db *racefree.DB) string {
	t.Helper()
	var seen []string
	if err := tenant.Each(context.Background(), db, func(ctx context.Context) error {
		seen = append(seen, tenant.From(ctx))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return strings.Join(seen, ",")
}

// TestEdgesInTxCommittedAndRolledBack: InTx rolled back leaves nothing a
// later reader on the pool sees (not the transaction's row, not the
// tenant in the registry), and the process does not take the tenant for
// registered: its next call on the pool records it, so Each visits it.
// Committed, the later reader sees the row and Each the tenant. A
// cancelled caller runs nothing and registers nothing.
func TestEdgesInTxCommittedAndRolledBack(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		rollback := errors.New("roll back")
		err := tenant.InTx(ctx, db, "ghost", func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, seqInsert(db), "ghost"); err != nil {
				return err
			}
			return rollback
		})
		if !errors.Is(err, rollback) {
			t.Fatalf("InTx: %v, want fn's error", err)
		}
		if n := seqRows(t, db, "ghost"); n != 0 {
			t.Fatalf("after a rollback a later reader sees %d rows", n)
		}
		if got := visited(t, db); got != "default" {
			t.Fatalf("after a rollback Each visits %s, want default alone", got)
		}
		gctx, _ := tenant.With(ctx, "ghost")
		if _, err := send.Exec(gctx, db, db, seqInsert(db), "ghost"); err != nil {
			t.Fatalf("ghost's first write on the pool: %v", err)
		}
		if got := visited(t, db); got != "default,ghost" {
			t.Fatalf("after ghost's write on the pool Each visits %s, want default,ghost (the rolled-back InTx left the tenant unrecorded)", got)
		}

		err = tenant.InTx(ctx, db, "acme", func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, seqInsert(db), "acme")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := seqRows(t, db, "acme"); n != 1 {
			t.Fatalf("after a commit a later reader sees %d rows, want 1", n)
		}
		if got := visited(t, db); got != "acme,default,ghost" {
			t.Fatalf("after a commit Each visits %s", got)
		}

		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		ran := false
		err = tenant.InTx(cancelled, db, "late", func(context.Context, *sql.Tx) error { ran = true; return nil })
		if !errors.Is(err, context.Canceled) || ran {
			t.Fatalf("InTx under a cancelled context: %v, fn ran %v; want context.Canceled and nothing run", err, ran)
		}
		if got := visited(t, db); got != "acme,default,ghost" {
			t.Fatalf("a cancelled InTx registered its tenant: Each visits %s", got)
		}
	})
}

// TestEdgesTenantIDAtItsLength tries the tenant id's length on each
// engine at the limit and one past it: a tenant of exactly MaxIDBytes
// writes its row, reads it back and is visited by Each; one byte more is
// an InputError from InTx, With and ReadTx, and nothing is written or
// registered.
func TestEdgesTenantIDAtItsLength(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		long := "Z" + strings.Repeat("0", tenant.MaxIDBytes-2) + ":"
		err := tenant.InTx(ctx, db, long, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, seqInsert(db), long)
			return err
		})
		if err != nil {
			t.Fatalf("a tenant of %d bytes: %v", len(long), err)
		}
		if n := seqRows(t, db, long); n != 1 {
			t.Fatalf("a tenant of %d bytes: %d rows, want 1", len(long), n)
		}
		if got := visited(t, db); got != long+",default" {
			t.Fatalf("Each visits %s", got)
		}
		past := long + "0"
		ran := false
		if err := tenant.InTx(ctx, db, past, func(context.Context, *sql.Tx) error { ran = true; return nil }); !errors.Is(err, racefree.ErrInvalidInput) || ran {
			t.Errorf("InTx for %d bytes: %v (fn ran: %v), want an InputError and nothing run", len(past), err, ran)
		}
		if _, err := tenant.With(ctx, past); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("With for %d bytes: %v", len(past), err)
		}
		ran = false
		if err := tenant.ReadTx(ctx, db, past, func(context.Context, racefree.Executor) error { ran = true; return nil }); !errors.Is(err, racefree.ErrInvalidInput) || ran {
			t.Errorf("ReadTx for %d bytes: %v (fn ran: %v), want an InputError", len(past), err, ran)
		}
		if got := visited(t, db); got != long+",default" {
			t.Fatalf("after the refusals Each visits %s", got)
		}
	})
}

// TestEdgesTheRegistryUnderATenantSetting: as the application role, a
// transaction set to tenant a may record a in the registry but not b (nor
// may one set to no tenant record anyone); it can neither change nor
// delete a registry row; and it reads every tenant's id, which Each
// needs.
func TestEdgesTheRegistryUnderATenantSetting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner, app := postgres(t)
	if err := tenant.InTx(ctx, owner, "b", func(context.Context, *sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ins := `INSERT INTO racefree_tenants (id, created_at) VALUES ($1, 0) ON CONFLICT (id) DO NOTHING`
	if err := tenant.InTx(ctx, app, "a", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, ins, "a")
		return err
	}); err != nil {
		t.Fatalf("tenant a records itself: %v", err)
	}
	for name, fn := range map[string]func(ctx context.Context, tx *sql.Tx) error{
		"a records c": func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, ins, "c")
			return err
		},
		"a renames b": func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE racefree_tenants SET id = 'a2' WHERE id = 'b'`)
			return err
		},
		"a deletes b": func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `DELETE FROM racefree_tenants WHERE id = 'b'`)
			return err
		},
	} {
		if err := tenant.InTx(ctx, app, "a", fn); err == nil {
			t.Errorf("%s under a's setting: no error", name)
		}
	}
	if err := app.InTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, ins, "c")
		return err
	}); err == nil {
		t.Error("without a tenant setting the application role recorded tenant c")
	}
	if got := visited(t, app); got != "a,b,default" {
		t.Fatalf("the application role's Each visits %s, want a,b,default", got)
	}
}

// TestEdgesInTxRetriesATransientConflict: as the application role, an
// InTx whose function fails with a serialization failure (40001) twice
// runs again, each time in a transaction set to its tenant, and commits
// the third time; a function that fails otherwise is not run again.
func TestEdgesInTxRetriesATransientConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner, app := postgres(t)
	_, err := owner.ExecContext(ctx, `
CREATE SEQUENCE attempts;
CREATE FUNCTION flaky() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint := nextval('attempts');
BEGIN
  IF n < 3 THEN RAISE EXCEPTION 'conflict %', n USING ERRCODE = '40001'; END IF;
  RETURN n;
END $$;
GRANT USAGE ON SEQUENCE attempts TO PUBLIC`)
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	err = tenant.InTx(ctx, app, "acme", func(ctx context.Context, tx *sql.Tx) error {
		runs++
		if got := setting(t, ctx, tx); got != "acme" {
			t.Errorf("run %d: the setting is %q, want acme", runs, got)
		}
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT flaky()`).Scan(&n); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO racefree_sequences (tenant, scope, name, last) VALUES ('acme', 's', 'n', $1)`, n)
		return err
	})
	if err != nil || runs != 3 {
		t.Fatalf("InTx: %v after %d runs; want success on the third", err, runs)
	}
	if n := seqRows(t, owner, "acme"); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
	runs = 0
	err = tenant.InTx(ctx, app, "acme", func(ctx context.Context, tx *sql.Tx) error {
		runs++
		_, err := tx.ExecContext(ctx, `SELECT 1/0`)
		return err
	})
	if err == nil || runs != 1 {
		t.Fatalf("a permanent failure: %v after %d runs; want it returned after one", err, runs)
	}
}

// TestEdgesRunInTheCallersTransactionForANewTenant: Run given the
// caller's transaction (not one InTx opened) for a tenant the process has
// not seen runs fn in it, once, and records the tenant in the same
// transaction: committed, fn's row is there and Each visits the tenant.
// So does Run on the pool for another new tenant, where fn runs on the
// pool itself (SQLite; on PostgreSQL the tests' role bypasses row-level
// security).
func TestEdgesRunInTheCallersTransactionForANewTenant(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, err := tenant.With(context.Background(), "fresh")
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			return send.Run(ctx, db, tx, func(exec racefree.Executor) error {
				runs++
				_, err := exec.ExecContext(ctx, seqInsert(db), "fresh")
				return err
			})
		})
		if err != nil || runs != 1 {
			t.Fatalf("Run in the caller's transaction: %v after %d run(s) of fn, want 1", err, runs)
		}
		if n := seqRows(t, db, "fresh"); n != 1 {
			t.Fatalf("fn's row after the commit: %d rows, want 1", n)
		}
		if got := visited(t, db); got != "default,fresh" {
			t.Fatalf("Each visited %s, want default,fresh", got)
		}

		// On the pool, for another new tenant (SQLite, or a PostgreSQL role
		// that row-level security does not bind: fn runs on the pool as
		// it is): fn runs once and the tenant is recorded.
		pool, err := tenant.With(context.Background(), "pool")
		if err != nil {
			t.Fatal(err)
		}
		runs = 0
		err = send.Run(pool, db, db, func(exec racefree.Executor) error {
			runs++
			_, err := exec.ExecContext(pool, seqInsert(db), "pool")
			return err
		})
		if err != nil || runs != 1 {
			t.Fatalf("Run on the pool: %v after %d run(s) of fn, want 1", err, runs)
		}
		if n := seqRows(t, db, "pool"); n != 1 {
			t.Fatalf("fn's row on the pool: %d rows, want 1", n)
		}
		if got := visited(t, db); got != "default,fresh,pool" {
			t.Fatalf("Each visited %s, want default,fresh,pool", got)
		}
	})
}

// TestEdgesNoRowIsNotFoundOnEveryPath: QueryRow and ReadRow of a
// statement that returns no row are ErrNotFound wherever the statement
// runs: on the pool (SQLite's, or PostgreSQL's for a role that row-level
// security does not bind, the path through Run and Read), in the caller's
// transaction, and in one tenant.InTx opened. A row found is no error.
func TestEdgesNoRowIsNotFoundOnEveryPath(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, err := tenant.With(context.Background(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		const none, one = `SELECT 1 WHERE 1 = 0`, `SELECT 1`
		try := func(where string, exec racefree.Executor) {
			t.Helper()
			var v int
			if err := send.QueryRow(ctx, db, exec, none, nil, &v); !errors.Is(err, racefree.ErrNotFound) {
				t.Errorf("QueryRow of no row %s: %v, want ErrNotFound", where, err)
			}
			if err := send.ReadRow(ctx, db, exec, none, nil, &v); !errors.Is(err, racefree.ErrNotFound) {
				t.Errorf("ReadRow of no row %s: %v, want ErrNotFound", where, err)
			}
			if err := send.QueryRow(ctx, db, exec, one, nil, &v); err != nil || v != 1 {
				t.Errorf("QueryRow of a row %s: %d, %v", where, v, err)
			}
			if err := send.ReadRow(ctx, db, exec, one, nil, &v); err != nil || v != 1 {
				t.Errorf("ReadRow of a row %s: %d, %v", where, v, err)
			}
		}
		try("on the pool", db)
		if err := db.InTx(ctx, func(tx *sql.Tx) error { try("in the caller's transaction", tx); return nil }); err != nil {
			t.Fatal(err)
		}
		if err := tenant.InTx(ctx, db, "acme", func(ctx context.Context, tx *sql.Tx) error {
			try("in tenant.InTx", tx)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestEdgesReadRowPipelinedReadsItsRow: as the application role on
// PostgreSQL's pool, where ReadRow pipelines the tenant's set_config with
// the statement, the statement runs and sees its tenant (for a tenant the
// process never recorded too), and a statement without a row is
// ErrNotFound.
func TestEdgesReadRowPipelinedReadsItsRow(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	app := testdb.App(t, testdb.Open(t, d, nil), d)
	ctx, err := tenant.With(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := send.ReadRow(ctx, app, app, `SELECT current_setting('racefree.tenant_id', true)`, nil, &got); err != nil || got != "acme" {
		t.Fatalf("ReadRow on the pool: %q, %v; want the statement run for acme", got, err)
	}
	var v int
	if err := send.ReadRow(ctx, app, app, `SELECT 1 WHERE false`, nil, &v); !errors.Is(err, racefree.ErrNotFound) {
		t.Fatalf("ReadRow of no row on the pool: %v, want ErrNotFound", err)
	}
}

// TestEdgesReadInACallersTransaction: send.Read given the caller's
// transaction, as the application role, sets the transaction's tenant and
// runs fn in it, once; given a transaction InTx set to another tenant, it
// refuses with a MismatchError and runs nothing. CheckDurable on SQLite,
// which has no standby, is an InputError.
func TestEdgesReadInACallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, app := postgres(t)
	acme, _ := tenant.With(ctx, "acme")
	runs := 0
	err := app.InTx(ctx, func(tx *sql.Tx) error {
		return send.Read(acme, app, tx, func(exec racefree.Executor) error {
			runs++
			if got := setting(t, ctx, exec); got != "acme" {
				t.Errorf("Read left the caller's transaction at tenant %q, want acme", got)
			}
			return nil
		})
	})
	if err != nil || runs != 1 {
		t.Fatalf("Read in the caller's transaction: %v after %d run(s) of fn, want 1", err, runs)
	}
	runs = 0
	err = tenant.InTx(ctx, app, "globex", func(_ context.Context, tx *sql.Tx) error {
		return send.Read(acme, app, tx, func(racefree.Executor) error { runs++; return nil })
	})
	var me *tenant.MismatchError
	if !errors.As(err, &me) || me.Tx != "globex" || me.Context != "acme" || runs != 0 {
		t.Fatalf("Read in globex's transaction: %v after %d run(s) of fn, want a MismatchError and none", err, runs)
	}
	if err := tenant.CheckDurable(ctx, testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)); !errors.Is(err, racefree.ErrInvalidInput) {
		t.Fatalf("CheckDurable on SQLite: %v, want an InputError", err)
	}
}
