package tenant_test

import (
	"context"
	"database/sql"
	"net/url"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestEdgesEachAttributeThatBypassesRowSecurity gives Run a role with each
// attribute that exempts it from row-level security alone: a superuser
// without BYPASSRLS, and a BYPASSRLS role that is no superuser. Each gets
// no transaction of Run's own on the pool and no setting in the caller's
// transaction; the application role, with neither attribute, gets both.
// (The test server's own superuser has both attributes at once, so it
// cannot tell a judgement that reads only one of them.)
func TestEdgesEachAttributeThatBypassesRowSecurity(t *testing.T) {
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil) // the test server's superuser
	u, err := url.Parse(d)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	suffix := schema[len("rf_test_"):]
	roles := map[string]string{
		"rf_super_" + suffix:  `SUPERUSER NOBYPASSRLS`,
		"rf_bypass_" + suffix: `NOSUPERUSER BYPASSRLS`,
	}
	for role, attrs := range roles {
		testdb.ExecAll(t, owner,
			`CREATE ROLE `+role+` LOGIN `+attrs,
			`GRANT USAGE ON SCHEMA `+schema+` TO `+role,
			`GRANT ALL ON ALL TABLES IN SCHEMA `+schema+` TO `+role,
			`GRANT ALL ON ALL SEQUENCES IN SCHEMA `+schema+` TO `+role,
		)
		t.Cleanup(func() {
			for _, stmt := range []string{`DROP OWNED BY ` + role, `DROP ROLE ` + role} {
				if _, err := owner.ExecContext(context.Background(), stmt); err != nil {
					t.Errorf("%s: %v", stmt, err)
				}
			}
		})
	}
	open := func(role string) *racefree.DB {
		t.Helper()
		as := *u
		as.User = url.User(role)
		db, err := dsn.Open(ctx, as.String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	acme, _ := tenant.With(ctx, "acme")
	for _, c := range []struct {
		what string
		db   *racefree.DB
		pays bool
	}{
		{"a superuser without BYPASSRLS", open("rf_super_" + suffix), false},
		{"a BYPASSRLS role that is no superuser", open("rf_bypass_" + suffix), false},
		{"the application role", testdb.App(t, owner, d), true},
	} {
		err := send.Run(acme, c.db, c.db, func(exec racefree.Executor) error {
			if _, ok := exec.(*sql.Tx); ok != c.pays {
				t.Errorf("%s: Run on the pool ran in a transaction of its own: %v, want %v", c.what, ok, c.pays)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: Run on the pool: %v", c.what, err)
		}
		err = c.db.InTx(ctx, func(tx *sql.Tx) error {
			return send.Run(acme, c.db, tx, func(exec racefree.Executor) error {
				want := ""
				if c.pays {
					want = "acme"
				}
				if got := setting(t, ctx, exec); got != want {
					t.Errorf("%s: Run set tenant %q in the caller's transaction, want %q", c.what, got, want)
				}
				return nil
			})
		})
		if err != nil {
			t.Fatalf("%s: Run in the caller's transaction: %v", c.what, err)
		}
	}
}
