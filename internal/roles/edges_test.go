package roles_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/racefree/racefree/internal/roles"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// loginRoles creates, as g's admin, each statement's role and grants
// the login ones (logins) what they need to read notes as themselves;
// every role named in drop is dropped when the test ends, members first.
func (g *guarded) loginRoles(t *testing.T, logins []string, drop []string, stmts ...string) {
	t.Helper()
	t.Cleanup(func() {
		for _, r := range drop {
			_, _ = g.admin.ExecContext(context.Background(), `DROP OWNED BY `+r)
			if _, err := g.admin.ExecContext(context.Background(), `DROP ROLE `+r); err != nil {
				t.Errorf("drop role %s: %v", r, err)
			}
		}
	})
	testdb.ExecAll(t, g.admin, stmts...)
	if len(logins) > 0 {
		testdb.ExecAll(t, g.admin,
			`GRANT USAGE ON SCHEMA `+g.schema+` TO `+strings.Join(logins, ", "),
			`GRANT SELECT ON notes TO `+strings.Join(logins, ", "),
		)
	}
}

// TestEdgesNoinheritMemberOfASuperuser: SUPERUSER is an attribute,
// never inherited; a NOINHERIT member of a superuser role has none of
// its privileges without SET ROLE, and one SET ROLE makes it a
// superuser. It is a Superuser finding by SET ROLE (not inherited), with
// its path and REVOKE, and the escape is real.
func TestEdgesNoinheritMemberOfASuperuser(t *testing.T) {
	t.Parallel()
	g := setup(t)
	ctx := context.Background()
	app := g.schema + "_nosuper"
	g.loginRoles(t, []string{app}, []string{app},
		`CREATE ROLE `+app+` LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT IN ROLE `+g.roles.Super)
	fs, err := roles.Judge(ctx, g.admin, app, []string{g.owner})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].Kind != roles.Superuser || fs[0].Target != g.roles.Super || !fs[0].SetRole || fs[0].Inherits ||
		!slices.Equal(fs[0].Path, []string{app, g.roles.Super}) {
		t.Fatalf("Judge(%s) = %+v, want one superuser finding by SET ROLE to %s, not inherited", app, fs, g.roles.Super)
	}
	if s, want := fs[0].String(), `"`+app+`" can SET ROLE to "`+g.roles.Super+`", which is a superuser`; s != want {
		t.Errorf("String() = %q, want %q", s, want)
	}
	if got, want := fs[0].Revoke(), `REVOKE "`+g.roles.Super+`" FROM "`+app+`";`; got != want {
		t.Errorf("Revoke() = %q, want %q", got, want)
	}
	if n, err := g.readsOtherTenant(t, app, "", false); err != nil || n != 1 {
		t.Fatalf("as itself: %d rows (%v), want 1", n, err)
	}
	if n, err := g.readsOtherTenant(t, app, g.roles.Super, false); err != nil || n != 2 {
		t.Fatalf("after SET ROLE %s: %d rows (%v), want 2", g.roles.Super, n, err)
	}
}

// TestEdgesChainOfThreeTakesTheShortestPath: a role that reaches the
// BYPASSRLS role by two chains, one of three grants (through m1, m2) and
// one of four (through n1, n2, n3), is told the shortest: its path, the
// line naming both of its middle roles in order, and the REVOKE of its
// first grant. The escape is real, and revoking that grant leaves the
// longer chain, which Judge then names.
func TestEdgesChainOfThreeTakesTheShortestPath(t *testing.T) {
	t.Parallel()
	g := setup(t)
	ctx := context.Background()
	p := g.schema + "_"
	app, m1, m2, n1, n2, n3 := p+"app", p+"m1", p+"m2", p+"n1", p+"n2", p+"n3"
	g.loginRoles(t, []string{app}, []string{app, m1, n1, m2, n2, n3},
		`CREATE ROLE `+m2+` NOLOGIN NOINHERIT IN ROLE `+g.roles.Bypass,
		`CREATE ROLE `+m1+` NOLOGIN IN ROLE `+m2,
		`CREATE ROLE `+n3+` NOLOGIN IN ROLE `+g.roles.Bypass,
		`CREATE ROLE `+n2+` NOLOGIN IN ROLE `+n3,
		`CREATE ROLE `+n1+` NOLOGIN IN ROLE `+n2,
		`CREATE ROLE `+app+` LOGIN NOSUPERUSER NOBYPASSRLS INHERIT IN ROLE `+n1+`, `+m1,
	)
	for _, c := range []struct {
		path    []string
		through string
	}{
		{[]string{app, m1, m2, g.roles.Bypass}, `"` + m1 + `", "` + m2 + `"`},
		{[]string{app, n1, n2, n3, g.roles.Bypass}, `"` + n1 + `", "` + n2 + `", "` + n3 + `"`},
	} {
		fs, err := roles.Judge(ctx, g.admin, app, []string{g.owner})
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 1 || fs[0].Kind != roles.BypassRLS || fs[0].Target != g.roles.Bypass || !slices.Equal(fs[0].Path, c.path) {
			t.Fatalf("Judge(%s) = %+v, want one BYPASSRLS finding by the shortest path %v", app, fs, c.path)
		}
		if s, want := fs[0].String(), `"`+app+`" can SET ROLE to "`+g.roles.Bypass+`" (through `+c.through+`), which has BYPASSRLS`; s != want {
			t.Errorf("String() = %q, want %q", s, want)
		}
		if got, want := fs[0].Revoke(), `REVOKE "`+c.path[1]+`" FROM "`+app+`";`; got != want {
			t.Errorf("Revoke() = %q, want %q", got, want)
		}
		if n, err := g.readsOtherTenant(t, app, g.roles.Bypass, false); err != nil || n != 2 {
			t.Fatalf("after SET ROLE %s: %d rows (%v), want 2", g.roles.Bypass, n, err)
		}
		testdb.ExecAll(t, g.admin, fs[0].Revoke())
	}
	// Both chains cut: nothing left.
	if fs, err := roles.Judge(ctx, g.admin, app, []string{g.owner}); err != nil || len(fs) != 0 {
		t.Fatalf("Judge(%s) after both REVOKEs = %+v, %v; want nothing", app, fs, err)
	}
}

// TestEdgesOwnFindingFirstWithinAKind: within a kind the role's own
// finding comes first, then the reached roles' by name, so the one line
// tenant.CheckAppRole and migrate up print names what the role is
// itself: a role that owns the tables and is a member of another owner
// whose name sorts before its own gets its own ownership first.
func TestEdgesOwnFindingFirstWithinAKind(t *testing.T) {
	t.Parallel()
	g := setup(t)
	ctx := context.Background()
	p := g.schema + "_"
	other, self := p+"a_owner", p+"z_owner"
	g.loginRoles(t, nil, []string{self, other},
		`CREATE ROLE `+other+` NOLOGIN`,
		`CREATE ROLE `+self+` NOLOGIN INHERIT IN ROLE `+other,
	)
	fs, err := roles.Judge(ctx, g.admin, self, []string{other, self})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fs {
		got = append(got, string(f.Kind)+":"+f.Target)
	}
	if want := []string{"owner:" + self, "owner:" + other}; !slices.Equal(got, want) || !fs[0].Self() {
		t.Fatalf("Judge(%s) = %v, want %v (its own first)", self, got, want)
	}
	if s, want := fs[0].String(), `"`+self+`" owns the tables`; s != want {
		t.Errorf("first finding says %q, want %q", s, want)
	}
}

// TestEdgesEveryKindHasItsOwnCode: each kind's code is the stable string
// serve's /readyz and metric and doctor report, one per kind, as
// documented: a role with the rights of the server's files is never
// reported as owning the tables.
func TestEdgesEveryKindHasItsOwnCode(t *testing.T) {
	want := map[roles.Kind]string{
		roles.Superuser:   "role-is-superuser",
		roles.BypassRLS:   "role-bypasses-rls",
		roles.Owner:       "role-owns-tables",
		roles.CreateRole:  "role-creates-roles",
		roles.ServerFiles: "role-reaches-server-files",
	}
	if len(roles.Kinds) != len(want) {
		t.Fatalf("Kinds = %v, want the %d documented", roles.Kinds, len(want))
	}
	seen := map[string]bool{}
	for _, k := range roles.Kinds {
		if got := k.Code(); got != want[k] || seen[got] {
			t.Errorf("%s.Code() = %q, want %q, once", k, got, want[k])
		}
		seen[k.Code()] = true
	}
}
