package tenant_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// outsideRole creates, as the tests' superuser, a role named after the
// test with the attributes and memberships given, and drops it (with
// what it was granted) when the test ends.
func outsideRole(t *testing.T, admin *sql.DB, what string) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	role := "rf_out_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(context.Background(), `CREATE ROLE `+role+` `+what); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.ExecContext(ctx, `DROP OWNED BY `+role)
		if _, err := admin.ExecContext(ctx, `DROP ROLE `+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	return role
}

// tablePrivileges lists, per racefree table of the current schema, the
// table privileges role holds, in the order of tablePrivilegeNames.
func tablePrivileges(t *testing.T, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, role string) map[string]string {
	t.Helper()
	rows, err := q.QueryContext(context.Background(), `
SELECT c.relname, concat_ws(', ',
       CASE WHEN has_table_privilege($1, c.oid, 'SELECT') THEN 'SELECT' END,
       CASE WHEN has_table_privilege($1, c.oid, 'INSERT') THEN 'INSERT' END,
       CASE WHEN has_table_privilege($1, c.oid, 'UPDATE') THEN 'UPDATE' END,
       CASE WHEN has_table_privilege($1, c.oid, 'DELETE') THEN 'DELETE' END,
       CASE WHEN has_table_privilege($1, c.oid, 'TRUNCATE') THEN 'TRUNCATE' END,
       CASE WHEN has_table_privilege($1, c.oid, 'REFERENCES') THEN 'REFERENCES' END,
       CASE WHEN has_table_privilege($1, c.oid, 'TRIGGER') THEN 'TRIGGER' END)
  FROM pg_class c
 WHERE c.relnamespace = to_regnamespace(current_schema()) AND c.relkind = 'r' AND c.relname LIKE 'racefree\_%'`, role)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	got := map[string]string{}
	for rows.Next() {
		var table, privs string
		if err := rows.Scan(&table, &privs); err != nil {
			t.Fatal(err)
		}
		got[table] = privs
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestEdgesOutsideGrantGivesEachTableExactlyItsPrivileges: Grant gives
// the application role, on each racefree table, exactly what racefree's
// calls need and nothing more: the migration ledger and the keys are
// only read (no version claimed, no key erased), the tenant registry only
// grows (no row renamed), the sequences' counters and the audit chains'
// heads are never deleted (a counter or a chain would start again), the
// audit log and its checkpoints are append-only; no table may be
// truncated, referenced or given a trigger. On SQLite, which has no
// roles, Grant is an InputError.
func TestEdgesOutsideGrantGivesEachTableExactlyItsPrivileges(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		if db.Engine() == racefree.SQLite {
			if err := tenant.Grant(ctx, db, "app"); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("Grant on SQLite = %v, want an InputError", err)
			}
			return
		}
		role := outsideRole(t, db.SQL(), `NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT`)
		if err := tenant.Grant(ctx, db, role); err != nil {
			t.Fatal(err)
		}
		const all = "SELECT, INSERT, UPDATE, DELETE"
		want := map[string]string{
			"racefree_schema_migrations": "SELECT",
			"racefree_tenants":           "SELECT, INSERT",
			"racefree_keys":              "SELECT",
			"racefree_claims":            all,
			"racefree_claim_floors":      all,
			"racefree_dedup_events":      all,
			"racefree_idempotency":       all,
			"racefree_idempotency_steps": all,
			"racefree_inbox_sources":     all,
			"racefree_inbox":             all,
			"racefree_sequences":         "SELECT, INSERT, UPDATE",
			"racefree_audit_heads":       "SELECT, INSERT, UPDATE",
			"racefree_audit":             "SELECT, INSERT",
			"racefree_audit_checkpoints": "SELECT, INSERT",
			"racefree_quotas":            all,
			"racefree_quota_ledger":      all,
			"racefree_onetime_codes":     all,
			"racefree_refresh_families":  all,
			"racefree_refresh_retired":   all,
			"racefree_outbox":            all,
			"racefree_outbox_attempts":   "SELECT, INSERT, DELETE",
		}
		got := tablePrivileges(t, db.SQL(), role)
		var tables []string
		for table := range got {
			tables = append(tables, table)
		}
		for table := range want {
			if !slices.Contains(tables, table) {
				tables = append(tables, table)
			}
		}
		slices.Sort(tables)
		for _, table := range tables {
			if got[table] != want[table] {
				t.Errorf("%s: the application role holds %q, want %q", table, got[table], want[table])
			}
		}
	})
}

// TestEdgesOutsideAppRoleWithTheServerFilesIsRefused: a role whose only
// way out is the rights of a predefined role of the server's files or
// programs (an INHERIT member of pg_read_server_files, a NOINHERIT
// member of pg_execute_server_program: the data files hold every
// tenant's rows) is refused by CheckAppRole and Grant with ErrUnsafeRole
// naming that role, and is granted nothing; a role that does not exist is
// an InputError from CheckAppRole and Grant alike, never a pass. On
// SQLite both are InputErrors.
func TestEdgesOutsideAppRoleWithTheServerFilesIsRefused(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		if db.Engine() == racefree.SQLite {
			if err := tenant.CheckAppRole(ctx, db, "app"); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("CheckAppRole on SQLite = %v, want an InputError", err)
			}
			return
		}
		for _, c := range []struct{ what, reached string }{
			{`NOLOGIN INHERIT IN ROLE pg_read_server_files`, "pg_read_server_files"},
			{`NOLOGIN NOINHERIT IN ROLE pg_execute_server_program`, "pg_execute_server_program"},
		} {
			role := outsideRole(t, db.SQL(), c.what)
			for name, call := range map[string]func(context.Context, *racefree.DB, string) error{"CheckAppRole": tenant.CheckAppRole, "Grant": tenant.Grant} {
				if err := call(ctx, db, role); !errors.Is(err, tenant.ErrUnsafeRole) || !strings.Contains(err.Error(), `"`+c.reached+`"`) {
					t.Errorf("%s(a role %s) = %v, want ErrUnsafeRole naming %s", name, c.what, err, c.reached)
				}
			}
			for table, privs := range tablePrivileges(t, db.SQL(), role) {
				if privs != "" {
					t.Errorf("a refused role (%s) holds %s on %s", c.what, privs, table)
				}
			}
		}
		for name, call := range map[string]func(context.Context, *racefree.DB, string) error{"CheckAppRole": tenant.CheckAppRole, "Grant": tenant.Grant} {
			if err := call(ctx, db, "rf_out_no_such_role"); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%s(a role that does not exist) = %v, want an InputError", name, err)
			}
		}
	})
}

// TestEdgesOutsideGrantNeedsTheKeysMigration holds Grant's bound on the
// schema: one migration short of KeysVersion (before row-level security
// is enabled and forced on racefree's tables) Grant is ErrSchemaOutdated
// and grants nothing, not even USAGE on the schema; at KeysVersion
// exactly it grants. On SQLite Grant is an InputError at any version.
func TestEdgesOutsideGrantNeedsTheKeysMigration(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db := testdb.Open(t, dsn, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(ctx, tenant.KeysVersion-1); err != nil {
			t.Fatal(err)
		}
		if db.Engine() == racefree.SQLite {
			if err := tenant.Grant(ctx, db, "app"); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("Grant on SQLite = %v, want an InputError", err)
			}
			return
		}
		role := outsideRole(t, db.SQL(), `NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT`)
		usage := func() bool {
			t.Helper()
			var ok bool
			if err := db.SQL().QueryRowContext(ctx, `SELECT has_schema_privilege($1, current_schema(), 'USAGE')`, role).Scan(&ok); err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if err := tenant.Grant(ctx, db, role); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("Grant at version %d = %v, want ErrSchemaOutdated", tenant.KeysVersion-1, err)
		}
		if usage() {
			t.Fatalf("Grant at version %d granted USAGE on the schema", tenant.KeysVersion-1)
		}
		for table, privs := range tablePrivileges(t, db.SQL(), role) {
			if privs != "" {
				t.Errorf("Grant at version %d granted %s on %s", tenant.KeysVersion-1, privs, table)
			}
		}
		if _, err := db.MigrateUpTo(ctx, tenant.KeysVersion); err != nil {
			t.Fatal(err)
		}
		if err := tenant.Grant(ctx, db, role); err != nil {
			t.Fatalf("Grant at version %d = %v", tenant.KeysVersion, err)
		}
		if got := tablePrivileges(t, db.SQL(), role); !usage() || got["racefree_claims"] != "SELECT, INSERT, UPDATE, DELETE" || got["racefree_keys"] != "SELECT" {
			t.Fatalf("Grant at version %d: USAGE %v, privileges %v", tenant.KeysVersion, usage(), got)
		}
	})
}
