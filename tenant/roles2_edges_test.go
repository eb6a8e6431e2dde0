package tenant_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestEdgesOutside2AppRoleIsRefusedInOneExactLine: CheckAppRole refuses
// a role that can SET ROLE to a superuser role and inherits the rights of
// pg_read_server_files in one line, exactly: the worst way (the
// superuser), its REVOKE without its semicolon inside the parentheses,
// and "1 more way(s)". Each way is real, as the role: after SET ROLE it
// is a superuser; as itself it reads a file of the server's data
// directory (COPY … FROM 'PG_VERSION'). Once the told REVOKE is run, the
// line names the file role alone, with its own REVOKE; once that one is
// run too, the COPY is refused, CheckAppRole passes and Grant grants. On
// SQLite CheckAppRole is an InputError.
func TestEdgesOutside2AppRoleIsRefusedInOneExactLine(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db := testdb.Open(t, dsn, nil)
		if db.Engine() == racefree.SQLite {
			if err := tenant.CheckAppRole(ctx, db, "app"); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Fatalf("CheckAppRole on SQLite = %v, want an InputError", err)
			}
			return
		}
		admin := db.SQL()
		super := outsideRole(t, admin, `NOLOGIN SUPERUSER`)
		app := outsideRole(t, admin, `LOGIN NOSUPERUSER NOBYPASSRLS INHERIT IN ROLE `+super+`, pg_read_server_files`)
		u, _ := url.Parse(dsn)
		u.User = url.User(app)
		as, err := sql.Open("pgx", u.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = as.Close() })
		// readsFile: as app, without SET ROLE, COPY a file of the data
		// directory into a temporary table.
		readsFile := func() error {
			t.Helper()
			tx, err := as.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, `CREATE TEMP TABLE v (line text) ON COMMIT DROP`); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, `COPY v FROM 'PG_VERSION'`); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM v`).Scan(&n); err != nil || n != 1 {
				t.Fatalf("PG_VERSION read as %d lines (%v), want 1", n, err)
			}
			return nil
		}
		tx, err := as.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var is string
		if _, err := tx.ExecContext(ctx, `SET LOCAL ROLE `+super); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRowContext(ctx, `SHOW is_superuser`).Scan(&is); err != nil || is != "on" {
			t.Fatalf("after SET ROLE %s, is_superuser = %q (%v), want on", super, is, err)
		}
		_ = tx.Rollback()
		if err := readsFile(); err != nil {
			t.Fatalf("as itself, COPY FROM a server file: %v", err)
		}

		for _, c := range []struct{ line, revoke string }{
			{`"` + app + `" can SET ROLE to "` + super + `", which is a superuser (REVOKE "` + super + `" FROM "` + app + `" cuts it), and 1 more way(s)`, `REVOKE "` + super + `" FROM "` + app + `"`},
			{`"` + app + `" has, without SET ROLE, the privileges of "pg_read_server_files", which reads the server's files (REVOKE "pg_read_server_files" FROM "` + app + `" cuts it)`, `REVOKE "pg_read_server_files" FROM "` + app + `"`},
		} {
			err := tenant.CheckAppRole(ctx, db, app)
			if want := tenant.ErrUnsafeRole.Error() + ": " + c.line; !errors.Is(err, tenant.ErrUnsafeRole) || err.Error() != want {
				t.Fatalf("CheckAppRole(%s) = %v,\nwant %s", app, err, want)
			}
			testdb.ExecAll(t, admin, c.revoke)
		}
		if err := readsFile(); err == nil || !strings.Contains(err.Error(), "pg_read_server_files") {
			t.Fatalf("after both REVOKEs, COPY FROM a server file: %v, want refused", err)
		}
		if err := tenant.CheckAppRole(ctx, db, app); err != nil {
			t.Fatalf("CheckAppRole(%s) after both REVOKEs = %v", app, err)
		}
		if err := tenant.Grant(ctx, db, app); err != nil {
			t.Fatalf("Grant(%s) after both REVOKEs = %v", app, err)
		}
	})
}
