package tenant_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/rlscheck"
	"github.com/racefree/racefree/tenant"
)

func TestCheck(t *testing.T) {
	for _, ok := range []string{"a", "acme", "Acme-1", "t_1.eu:west", "0b6f4a1e-9c1d-4f5e-8a43-2d7c2b8f9e10", strings.Repeat("x", 64)} {
		if err := tenant.Check(ok); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", " ", "-a", "_a", "a b", "a\x00", "ä", "a/b", "a'b", strings.Repeat("x", 65)} {
		err := tenant.Check(bad)
		if !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("Check(%q) = %v, want an InputError", bad, err)
		}
		if _, err := tenant.With(context.Background(), bad); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("With(%q) = %v, want an InputError", bad, err)
		}
	}
	if got := tenant.From(context.Background()); got != tenant.Default {
		t.Errorf("From(no tenant) = %q, want %q", got, tenant.Default)
	}
	ctx, _ := tenant.With(context.Background(), "acme")
	if got := tenant.From(ctx); got != "acme" {
		t.Errorf("From = %q, want acme", got)
	}
}

// postgres opens a fresh PostgreSQL database as its owner and as the
// application role.
func postgres(t *testing.T) (owner, app *racefree.DB) {
	t.Helper()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	owner = testdb.Open(t, dsn, &racefree.Config{MaxOpenConns: 1})
	return owner, testdb.App(t, owner, dsn)
}

func setting(t *testing.T, ctx context.Context, exec racefree.Executor) string {
	t.Helper()
	var s sql.NullString
	if err := exec.QueryRowContext(ctx, `SELECT current_setting('racefree.tenant_id', true)`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s.String
}

func TestInTxSetsTheTenantForTheTransactionOnly(t *testing.T) {
	ctx := context.Background()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, dsn, nil)
	// One connection: the next transaction reuses the same session.
	app, err := racefreeOpen(ctx, testdb.AppDSN(t, owner, dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	err = tenant.InTx(ctx, app, "acme", func(ctx context.Context, tx *sql.Tx) error {
		if got := setting(t, ctx, tx); got != "acme" {
			t.Errorf("inside InTx the setting is %q, want acme", got)
		}
		if got := tenant.From(ctx); got != "acme" {
			t.Errorf("fn's context names %q, want acme", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := setting(t, ctx, app); got != "" {
		t.Fatalf("after InTx the pooled connection carries tenant %q, want none", got)
	}
	// A rolled-back transaction leaves nothing either.
	_ = tenant.InTx(ctx, app, "acme", func(ctx context.Context, tx *sql.Tx) error { return errors.New("roll back") })
	if got := setting(t, ctx, app); got != "" {
		t.Fatalf("after a rolled-back InTx the connection carries tenant %q, want none", got)
	}
}

func TestWithoutATenantNothingIsSeenOrWritten(t *testing.T) {
	ctx := context.Background()
	_, app := postgres(t)
	write := func(ctx context.Context, tx *sql.Tx, who string) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO racefree_sequences (tenant, scope, name, last) VALUES ($1, 's', 'n', 1)`, who)
		return err
	}
	for _, id := range []string{"a", "b"} {
		if err := tenant.InTx(ctx, app, id, func(ctx context.Context, tx *sql.Tx) error { return write(ctx, tx, id) }); err != nil {
			t.Fatalf("tenant %s writes its own row: %v", id, err)
		}
	}
	count := func(exec racefree.Executor) (n int) {
		if err := exec.QueryRowContext(ctx, `SELECT count(*) FROM racefree_sequences`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// No tenant: nothing seen, nothing written, nothing changed.
	if n := count(app); n != 0 {
		t.Errorf("without a tenant %d rows are visible, want 0", n)
	}
	err := app.InTx(ctx, func(tx *sql.Tx) error { return write(ctx, tx, "a") })
	if err == nil {
		t.Errorf("without a tenant an INSERT succeeded")
	}
	res, err := app.ExecContext(ctx, `UPDATE racefree_sequences SET last = 99`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 0 {
		t.Errorf("without a tenant an UPDATE changed %d rows", n)
	}
	// Tenant a sees its row only, and can neither write nor change b's.
	err = tenant.InTx(ctx, app, "a", func(ctx context.Context, tx *sql.Tx) error {
		if n := count(tx); n != 1 {
			t.Errorf("tenant a sees %d rows, want 1", n)
		}
		res, err := tx.ExecContext(ctx, `UPDATE racefree_sequences SET last = 99 WHERE tenant = 'b'`)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 0 {
			t.Errorf("tenant a changed %d of b's rows", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = tenant.InTx(ctx, app, "a", func(ctx context.Context, tx *sql.Tx) error { return write(ctx, tx, "b") })
	if err == nil {
		t.Errorf("tenant a wrote a row of tenant b")
	}
}

// TestEveryRacefreeTableIsIsolated reads racefree's tables from the
// catalogue, so a table added without its policy fails it, and runs
// rls-check on racefree's own schema as the application role.
func TestEveryRacefreeTableIsIsolated(t *testing.T) {
	ctx := context.Background()
	owner, _ := postgres(t)
	rows, err := owner.QueryContext(ctx, `
SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
       EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant' AND NOT a.attisdropped)
  FROM pg_class c
 WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND c.relname LIKE 'racefree\_%'
 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var tables []string
	for rows.Next() {
		var name string
		var rls, force, hasTenant bool
		if err := rows.Scan(&name, &rls, &force, &hasTenant); err != nil {
			t.Fatal(err)
		}
		switch name {
		case "racefree_schema_migrations":
			continue // versions only; the application role may only read it
		case "racefree_tenants":
			if !rls || !force {
				t.Errorf("%s: row security enabled %v, forced %v; want both", name, rls, force)
			}
			continue
		}
		tables = append(tables, name)
		if !hasTenant || !rls || !force {
			t.Errorf("%s: tenant column %v, row security enabled %v, forced %v; want all three", name, hasTenant, rls, force)
		}
	}
	if len(tables) < 16 {
		t.Fatalf("found %d racefree tables, want at least 16: %v", len(tables), tables)
	}
	u, err := url.Parse(testdb.AppDSN(t, owner, testdb.PostgresURL(t)))
	if err != nil {
		t.Fatal(err)
	}
	role := u.User.Username()
	rep, err := rlscheck.Check(ctx, owner, rlscheck.Options{TenantColumn: "tenant", Role: role})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tables) != len(tables) {
		t.Errorf("rls-check checked %d tenant tables, the catalogue has %d", len(rep.Tables), len(tables))
	}
	for _, f := range rep.Findings {
		if strings.Contains(f.Object, "racefree_") || f.Kind == rlscheck.Kind("role_superuser") || strings.Contains(f.Object, role) {
			t.Errorf("rls-check on racefree's own schema: %s %s: %s", f.Kind, f.Object, f.Problem)
		}
	}
}

func TestRunSetsTheCallersTransactionAndRefusesAnother(t *testing.T) {
	ctx := context.Background()
	_, app := postgres(t)
	acme, _ := tenant.With(ctx, "acme")
	// A transaction without a tenant gets the call's.
	err := app.InTx(ctx, func(tx *sql.Tx) error {
		return send.Run(acme, app, tx, func(exec racefree.Executor) error {
			if got := setting(t, ctx, exec); got != "acme" {
				t.Errorf("Run left the setting at %q, want acme", got)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	// A transaction of another tenant refuses the call.
	err = tenant.InTx(ctx, app, "globex", func(_ context.Context, tx *sql.Tx) error {
		return send.Run(acme, app, tx, func(racefree.Executor) error { return nil })
	})
	var me *tenant.MismatchError
	if !errors.As(err, &me) || !errors.Is(err, tenant.ErrMismatch) || me.Tx != "globex" || me.Context != "acme" {
		t.Fatalf("Run in another tenant's transaction = %v, want a MismatchError", err)
	}
	// So does a transaction whose tenant the application set itself.
	err = app.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `SELECT set_config('racefree.tenant_id', 'globex', true)`); err != nil {
			return err
		}
		return send.Run(acme, app, tx, func(racefree.Executor) error { return nil })
	})
	if !errors.As(err, &me) || me.Tx != "globex" || me.Context != "acme" {
		t.Fatalf("Run in a transaction the application set to another tenant = %v, want a MismatchError", err)
	}
	// Without a transaction Run makes one that carries the tenant.
	err = send.Run(acme, app, app, func(exec racefree.Executor) error {
		if _, ok := exec.(*sql.Tx); !ok {
			t.Errorf("Run on the pool ran on %T, want a transaction", exec)
		}
		if got := setting(t, ctx, exec); got != "acme" {
			t.Errorf("Run's own transaction has tenant %q, want acme", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTenantsNeedTheirMigrations(t *testing.T) {
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db := testdb.Open(t, dsn, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion-1); err != nil {
			t.Fatal(err)
		}
		noop := func(racefree.Executor) error { return nil }
		if err := send.Run(ctx, db, db, noop); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("before migration 011: %v, want ErrSchemaOutdated", err)
		}
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		if err := send.Run(ctx, db, db, noop); err != nil {
			t.Fatalf("the default tenant at migration 011: %v", err)
		}
		acme, _ := tenant.With(ctx, "acme")
		if err := send.Run(acme, db, db, noop); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("another tenant at migration 011: %v, want ErrSchemaOutdated", err)
		}
		if err := tenant.InTx(ctx, db, "acme", func(context.Context, *sql.Tx) error { return nil }); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("InTx for another tenant at migration 011: %v, want ErrSchemaOutdated", err)
		}
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		if err := send.Run(acme, db, db, noop); err != nil {
			t.Fatalf("another tenant at migration 012: %v", err)
		}
	})
}

func TestEachVisitsEveryTenantSeen(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		for _, id := range []string{"b", "a"} {
			if err := tenant.InTx(ctx, db, id, func(context.Context, *sql.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		var seen []string
		err := tenant.Each(ctx, db, func(ctx context.Context) error {
			seen = append(seen, tenant.From(ctx))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(seen, ","); got != "a,b,default" {
			t.Fatalf("Each visited %s, want a,b,default", got)
		}
	})
}

// TestTheOwnerObeysTheTenantToo runs the migrations as a role that is not
// a superuser, so the tables are its own: FORCE ROW LEVEL SECURITY must
// bind it like any other role.
func TestTheOwnerObeysTheTenantToo(t *testing.T) {
	ctx := context.Background()
	owner := testdb.Open(t, testdb.OwnerDSN(t, testdb.NewDSN(t, racefree.Postgres)), nil)
	err := tenant.InTx(ctx, owner, "a", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO racefree_sequences (tenant, scope, name, last) VALUES ('a', 's', 'n', 1)`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := owner.QueryRowContext(ctx, `SELECT count(*) FROM racefree_sequences`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the owner without a tenant sees %d rows, want 0", n)
	}
	err = tenant.InTx(ctx, owner, "b", func(ctx context.Context, tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT count(*) FROM racefree_sequences`).Scan(&n)
	})
	if err != nil || n != 0 {
		t.Fatalf("the owner as tenant b sees %d rows (%v), want 0", n, err)
	}
}

func TestGrantRefusesRolesThatBypassRowSecurity(t *testing.T) {
	ctx := context.Background()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	ownerDSN := testdb.OwnerDSN(t, dsn)
	owner := testdb.Open(t, ownerDSN, nil)
	ou, _ := url.Parse(ownerDSN)
	admin := testdb.Open(t, dsn, nil) // the superuser, for roles
	suffix := strings.TrimPrefix(ou.User.Username(), "rf_owner_")
	testdb.ExecAll(t, admin,
		`CREATE ROLE rf_super_`+suffix+` SUPERUSER`,
		`CREATE ROLE rf_bypass_`+suffix+` BYPASSRLS`,
		`CREATE ROLE rf_member_`+suffix+` IN ROLE `+ou.User.Username(),
	)
	t.Cleanup(func() {
		for _, r := range []string{"rf_super_", "rf_bypass_", "rf_member_"} {
			_, _ = admin.ExecContext(context.Background(), `DROP ROLE `+r+suffix)
		}
	})
	for role, why := range map[string]string{
		"rf_super_" + suffix:  "superuser",
		"rf_bypass_" + suffix: "BYPASSRLS",
		"rf_member_" + suffix: "owns",
		ou.User.Username():    "owns",
	} {
		if err := tenant.Grant(ctx, owner, role); !errors.Is(err, tenant.ErrUnsafeRole) || !strings.Contains(err.Error(), why) {
			t.Errorf("Grant(%s) = %v, want ErrUnsafeRole naming %q", role, err, why)
		}
	}
	for _, role := range []string{"rf_no_such_role_" + suffix, "", "a\x01b"} {
		if err := tenant.Grant(ctx, owner, role); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("Grant(%q) = %v, want an InputError", role, err)
		}
	}
	// An owner that does not own the schema cannot grant USAGE on it:
	// Grant says so instead of leaving a role that can reach nothing.
	if _, err := admin.ExecContext(ctx, `CREATE ROLE rf_plain_`+suffix); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), `DROP ROLE rf_plain_`+suffix) })
	if err := tenant.Grant(ctx, owner, "rf_plain_"+suffix); err == nil || !strings.Contains(err.Error(), "GRANT USAGE ON SCHEMA") {
		t.Errorf("Grant by an owner without the schema = %v, want an error naming GRANT USAGE ON SCHEMA", err)
	}
	if err := tenant.Grant(ctx, testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil), "app"); !errors.Is(err, racefree.ErrInvalidInput) {
		t.Errorf("Grant on SQLite = %v, want an InputError", err)
	}
}

// TestGrantRefusesRolesThatCanBecomeOneThatBypasses: a role whose own
// attributes are clean but that can SET ROLE to a BYPASSRLS role, to the
// tables' owner (a NOINHERIT member), to a superuser role, or to a
// BYPASSRLS role through a chain, is refused by CheckAppRole and Grant
// with the path, and is granted nothing; so is a member of the role that
// migrates before any table exists. A clean role passes. A role with one
// way out hears of that one alone, one with two of the first and "1
// more".
func TestGrantRefusesRolesThatCanBecomeOneThatBypasses(t *testing.T) {
	ctx := context.Background()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	ownerDSN := testdb.OwnerDSN(t, dsn)
	ou, _ := url.Parse(ownerDSN)
	ownerRole := ou.User.Username()
	rs := testdb.MakeEscapeRoles(t, ownerRole)
	// Before the first migration no table exists: the migrating role is
	// the owner-to-be.
	fresh := testdb.Open(t, ownerDSN, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
	for _, e := range rs.Escapes {
		if err := tenant.CheckAppRole(ctx, fresh, e.Role); !errors.Is(err, tenant.ErrUnsafeRole) || !strings.Contains(err.Error(), `"`+e.Reached+`"`) {
			t.Errorf("CheckAppRole(%s) before the migrations = %v, want ErrUnsafeRole naming %s", e.Name, err, e.Reached)
		}
	}
	owner := testdb.Open(t, ownerDSN, nil)
	for _, e := range rs.Escapes {
		err := tenant.Grant(ctx, owner, e.Role)
		if !errors.Is(err, tenant.ErrUnsafeRole) || !strings.Contains(err.Error(), `can SET ROLE to "`+e.Reached+`"`) || !strings.Contains(err.Error(), `REVOKE "`+e.Path[1]+`" FROM "`+e.Role+`"`) {
			t.Errorf("Grant(%s) = %v, want ErrUnsafeRole naming the path to %s and its REVOKE", e.Name, err, e.Reached)
		}
		if err != nil && strings.Contains(err.Error(), "more way") {
			t.Errorf("Grant(%s) = %v: one way out, yet it speaks of more", e.Name, err)
		}
		var granted bool
		if err := owner.QueryRowContext(ctx, `SELECT has_table_privilege($1, 'racefree_claims', 'SELECT')`, e.Role).Scan(&granted); err != nil || granted {
			t.Errorf("%s was granted SELECT on racefree_claims (%v)", e.Name, err)
		}
	}
	if err := tenant.CheckAppRole(ctx, owner, rs.Clean); err != nil {
		t.Errorf("CheckAppRole(clean) = %v", err)
	}
	// Two ways out (a BYPASSRLS role and the owner, each reached by one
	// membership): the first is named, the other counted.
	two := rs.Clean + "_two"
	admin := testdb.Open(t, dsn, nil) // the superuser, for roles
	if _, err := admin.ExecContext(ctx, `CREATE ROLE `+two+` NOLOGIN IN ROLE `+rs.Bypass+`, `+ownerRole); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), `DROP ROLE `+two) })
	if err := tenant.CheckAppRole(ctx, owner, two); !errors.Is(err, tenant.ErrUnsafeRole) || !strings.Contains(err.Error(), `"`+rs.Bypass+`"`) || !strings.HasSuffix(err.Error(), ", and 1 more way(s)") {
		t.Errorf("CheckAppRole(a member of a BYPASSRLS role and of the owner) = %v, want ErrUnsafeRole naming the first way and 1 more", err)
	}
	if err := tenant.CheckAppRole(ctx, testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil), "app"); !errors.Is(err, racefree.ErrInvalidInput) {
		t.Errorf("CheckAppRole on SQLite = %v, want an InputError", err)
	}
}

// TestGrantGivesExactlyWhatRacefreeNeeds: the audit log stays append-only
// and the keys read-only for the application role, whatever its code does.
func TestGrantGivesExactlyWhatRacefreeNeeds(t *testing.T) {
	ctx := context.Background()
	_, app := postgres(t)
	for _, stmt := range []string{
		`UPDATE racefree_audit SET actor = 'x'`,
		`DELETE FROM racefree_audit`,
		`DELETE FROM racefree_audit_checkpoints`,
		`INSERT INTO racefree_keys (tenant, id, hash, scopes, name, created_at) VALUES ('a', 'k', '\x00', 'admin', 'n', 0)`,
		`UPDATE racefree_keys SET revoked_at = NULL`,
		`DELETE FROM racefree_tenants`,
		`DELETE FROM racefree_schema_migrations`,
		`CREATE TABLE racefree_evil (x int)`,
	} {
		err := tenant.InTx(ctx, app, "a", func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, stmt)
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("as the application role %q: %v, want permission denied", stmt, err)
		}
	}
}

// TestARoleThatBypassesRowSecurityPaysNothing: a superuser (like a
// BYPASSRLS role) is not bound by the policies, so Run adds no
// transaction and no setting for it.
func TestARoleThatBypassesRowSecurityPaysNothing(t *testing.T) {
	ctx := context.Background()
	owner, _ := postgres(t) // the owner here is the test server's superuser
	acme, _ := tenant.With(ctx, "acme")
	err := send.Run(acme, owner, owner, func(exec racefree.Executor) error {
		if _, ok := exec.(*sql.Tx); ok {
			t.Errorf("Run made a transaction for a role that bypasses row-level security")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = owner.InTx(ctx, func(tx *sql.Tx) error {
		return send.Run(acme, owner, tx, func(exec racefree.Executor) error {
			if got := setting(t, ctx, exec); got != "" {
				t.Errorf("Run set tenant %q for a role that bypasses row-level security", got)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestACallInsideAnotherKnowsItsTenant: a primitive calling another inside
// the transaction Run opened shares its tenant, and a call for another
// tenant there is refused.
func TestACallInsideAnotherKnowsItsTenant(t *testing.T) {
	ctx := context.Background()
	_, app := postgres(t)
	acme, _ := tenant.With(ctx, "acme")
	globex, _ := tenant.With(ctx, "globex")
	var inner, other error
	err := send.Run(acme, app, app, func(exec racefree.Executor) error {
		inner = send.Run(acme, app, exec, func(exec racefree.Executor) error {
			if got := setting(t, ctx, exec); got != "acme" {
				t.Errorf("the inner call runs for %q, want acme", got)
			}
			return nil
		})
		other = send.Run(globex, app, exec, func(racefree.Executor) error { return nil })
		return nil
	})
	if err != nil || inner != nil {
		t.Fatalf("Run inside Run: %v, %v", err, inner)
	}
	if !errors.Is(other, tenant.ErrMismatch) {
		t.Fatalf("another tenant's call inside Run's transaction = %v, want ErrMismatch", other)
	}
}
