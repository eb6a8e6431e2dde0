package roles_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/roles"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestEdgesOutsideInheritedOwnerIsToldByItsInheritancePath: a role
// that inherits the owner's privileges along one chain (through two
// INHERIT roles) and is a member of the owner along a shorter chain
// through a NOINHERIT role (SET ROLE only) is told the chain it inherits
// by: the line says "has, without SET ROLE, the privileges of" the owner
// through that chain's middle roles, and the REVOKE cuts that chain's
// first grant. The inheritance is real (as itself, without SET ROLE, it
// disables the table's row-level security and reads the other tenant's
// row); once that REVOKE is run it is gone, and Judge then names the
// shorter chain, by SET ROLE, and its own REVOKE. On SQLite, which has no
// roles, Judge is an error, never an empty list of findings (which would
// read as a role bound by row-level security).
func TestEdgesOutsideInheritedOwnerIsToldByItsInheritancePath(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		if !strings.HasPrefix(dsn, "postgres") {
			db := testdb.Open(t, dsn, nil)
			if fs, err := roles.Judge(ctx, db.SQL(), "app", []string{"owner"}); err == nil || fs != nil {
				t.Fatalf("Judge on SQLite = %+v, %v; want an error and no findings", fs, err)
			}
			return
		}
		g := setupOn(t, dsn)
		p := g.schema + "_"
		app, m1, n1, n2 := p+"app", p+"m1", p+"n1", p+"n2"
		g.loginRoles(t, []string{app}, []string{app, m1, n1, n2},
			`CREATE ROLE `+m1+` NOLOGIN NOINHERIT IN ROLE `+g.owner,
			`CREATE ROLE `+n2+` NOLOGIN INHERIT IN ROLE `+g.owner,
			`CREATE ROLE `+n1+` NOLOGIN INHERIT IN ROLE `+n2,
			`CREATE ROLE `+app+` LOGIN NOSUPERUSER NOBYPASSRLS INHERIT IN ROLE `+m1+`, `+n1,
		)
		fs, err := roles.Judge(ctx, g.admin, app, []string{g.owner})
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 1 || fs[0].Kind != roles.Owner || !fs[0].Inherits || !fs[0].SetRole || !slices.Equal(fs[0].Path, []string{app, n1, n2, g.owner}) {
			t.Fatalf("Judge(%s) = %+v, want one inherited owner finding by %v", app, fs, []string{app, n1, n2, g.owner})
		}
		if s, want := fs[0].String(), `"`+app+`" has, without SET ROLE, the privileges of "`+g.owner+`" (through "`+n1+`", "`+n2+`"), which owns the tables`; s != want {
			t.Errorf("String() = %q, want %q", s, want)
		}
		if got, want := fs[0].Revoke(), `REVOKE "`+n1+`" FROM "`+app+`";`; got != want {
			t.Fatalf("Revoke() = %q, want %q", got, want)
		}
		// The evidence: without SET ROLE it acts as the owner.
		if n, err := g.readsOtherTenant(t, app, "", true); err != nil || n != 2 {
			t.Fatalf("as itself, disabling row-level security: %d rows (%v), want 2", n, err)
		}
		testdb.ExecAll(t, g.admin, fs[0].Revoke())
		if _, err := g.readsOtherTenant(t, app, "", true); err == nil || !strings.Contains(err.Error(), "must be owner") {
			t.Fatalf("after %s, as itself, disabling row-level security: %v, want must be owner", fs[0].Revoke(), err)
		}
		fs, err = roles.Judge(ctx, g.admin, app, []string{g.owner})
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 1 || fs[0].Kind != roles.Owner || fs[0].Inherits || !fs[0].SetRole || !slices.Equal(fs[0].Path, []string{app, m1, g.owner}) {
			t.Fatalf("Judge(%s) after the REVOKE = %+v, want one owner finding by SET ROLE through %s", app, fs, m1)
		}
		if s, want := fs[0].String(), `"`+app+`" can SET ROLE to "`+g.owner+`" (through "`+m1+`"), which owns the tables`; s != want {
			t.Errorf("String() after the REVOKE = %q, want %q", s, want)
		}
		if got, want := fs[0].Revoke(), `REVOKE "`+m1+`" FROM "`+app+`";`; got != want {
			t.Errorf("Revoke() after the REVOKE = %q, want %q", got, want)
		}
	})
}

// TestEdgesOutsideOwnerOfAPartitionedTableCounts: the owners of
// racefree's tables are those of every table named racefree_% in the
// ledger's schema, a partitioned one too (relkind 'p'): Owners names the
// owner of a partitioned racefree_ table, and JudgeRacefree refuses a
// member of it as able to become an owner of the tables. On SQLite, which
// has no roles, Owners is an error, never an empty list of owners.
func TestEdgesOutsideOwnerOfAPartitionedTableCounts(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		if db.Engine() == racefree.SQLite {
			if got, err := roles.Owners(ctx, db.SQL()); err == nil || got != nil {
				t.Fatalf("Owners on SQLite = %v, %v; want an error", got, err)
			}
			return
		}
		var me, schema string
		if err := db.SQL().QueryRowContext(ctx, `SELECT current_user, current_schema()`).Scan(&me, &schema); err != nil {
			t.Fatal(err)
		}
		parts, member := schema+"_parts_owner", schema+"_parts_member"
		admin := db.SQL()
		t.Cleanup(func() {
			for _, r := range []string{member, parts} {
				_, _ = admin.ExecContext(context.Background(), `DROP OWNED BY `+r)
				if _, err := admin.ExecContext(context.Background(), `DROP ROLE `+r); err != nil {
					t.Errorf("drop role %s: %v", r, err)
				}
			}
		})
		testdb.ExecAll(t, admin,
			`CREATE ROLE `+parts+` NOLOGIN`,
			`CREATE ROLE `+member+` NOLOGIN NOINHERIT IN ROLE `+parts,
			`CREATE TABLE racefree_zz_parts (tenant_id text NOT NULL) PARTITION BY LIST (tenant_id)`,
			`ALTER TABLE racefree_zz_parts OWNER TO `+parts,
		)
		owners, err := roles.Owners(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(owners, parts) || !slices.Contains(owners, me) {
			t.Fatalf("Owners = %v, want %s (a partitioned racefree_ table's) and %s", owners, parts, me)
		}
		fs, err := roles.JudgeRacefree(ctx, admin, member)
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 1 || fs[0].Kind != roles.Owner || fs[0].Target != parts || !slices.Equal(fs[0].Path, []string{member, parts}) {
			t.Fatalf("JudgeRacefree(%s) = %+v, want one owner finding reaching %s", member, fs, parts)
		}
	})
}
