package roles_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree/internal/roles"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// options16 sets, on the emulated PostgreSQL 16 catalogue db, the SET and
// INHERIT options of the grant of role to member.
func options16(t *testing.T, db *sql.DB, role, member string, set, inherit bool) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), `INSERT INTO options SELECT to_regrole($1), to_regrole($2), $3, $4`, role, member, set, inherit); err != nil {
		t.Fatal(err)
	}
}

// judge16 is Judge with PostgreSQL 16's query on the emulated catalogue.
func judge16(t *testing.T, db *sql.DB, role string, owners []string) []roles.Finding {
	t.Helper()
	fs, err := roles.JudgeWith(context.Background(), db, *roles.Reach16, role, owners)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestOutside2EdgesSetRoleThenInherit: from PostgreSQL 16 a member can
// SET ROLE to a role (a grant WITH SET TRUE, INHERIT FALSE) that inherits
// the owner's privileges (WITH SET FALSE, INHERIT TRUE): neither
// pg_has_role 'SET' nor 'USAGE' reaches the owner, and yet after that one
// SET ROLE it has the owner's privileges. The PostgreSQL 16 query (on the
// emulated catalogue) reports it as an owner finding, neither SetRole nor
// Inherits, by that path, "has, after SET ROLE, the privileges of", with
// the REVOKE of its first grant; the same for pg_read_server_files; and
// nothing once the first grant is SET FALSE too. The mechanism is real
// on this server: after SET ROLE to the middle role, without SET ROLE to
// the owner, the login role disables the table's row-level security and
// reads the other tenant's row (and the PostgreSQL 15 query, where every
// membership permits SET ROLE, reports an owner it can SET ROLE to).
func TestOutside2EdgesSetRoleThenInherit(t *testing.T) {
	t.Parallel()
	g := setup(t)
	ctx := context.Background()
	p := g.schema + "_"
	app, mid, fapp, fmid := p+"app", p+"mid", p+"fapp", p+"fmid"
	g.loginRoles(t, []string{app, mid}, []string{app, fapp, mid, fmid},
		`CREATE ROLE `+mid+` NOLOGIN INHERIT IN ROLE `+g.owner,
		`CREATE ROLE `+app+` LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT IN ROLE `+mid,
		`CREATE ROLE `+fmid+` NOLOGIN INHERIT IN ROLE pg_read_server_files`,
		`CREATE ROLE `+fapp+` LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT IN ROLE `+fmid,
	)
	// The evidence, as the role: bound as itself; after SET ROLE to the
	// middle role (not to the owner) it disables row-level security.
	if n, err := g.readsOtherTenant(t, app, "", false); err != nil || n != 1 {
		t.Fatalf("as itself: %d rows (%v), want 1", n, err)
	}
	if n, err := g.readsOtherTenant(t, app, mid, true); err != nil || n != 2 {
		t.Fatalf("after SET ROLE %s, disabling row-level security: %d rows (%v), want 2", mid, n, err)
	}
	fs, err := roles.Judge(ctx, g.admin, app, []string{g.owner})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].Kind != roles.Owner || !fs[0].SetRole || fs[0].Inherits || !slices.Equal(fs[0].Path, []string{app, mid, g.owner}) {
		t.Fatalf("15: Judge(%s) = %+v, want one owner finding by SET ROLE through %s", app, fs, mid)
	}

	db, _ := openEmulated16(t, "")
	options16(t, db, mid, app, true, false)
	options16(t, db, g.owner, mid, false, true)
	options16(t, db, fmid, fapp, true, false)
	options16(t, db, "pg_read_server_files", fmid, false, true)
	for _, c := range []struct {
		role, mid, target string
		kind              roles.Kind
		what              string
	}{
		{app, mid, g.owner, roles.Owner, "owns the tables"},
		{fapp, fmid, "pg_read_server_files", roles.ServerFiles, "reads the server's files"},
	} {
		fs := judge16(t, db, c.role, []string{g.owner})
		if len(fs) != 1 || fs[0].Kind != c.kind || fs[0].Target != c.target || fs[0].SetRole || fs[0].Inherits || fs[0].Self() ||
			!slices.Equal(fs[0].Path, []string{c.role, c.mid, c.target}) {
			t.Fatalf("16: Judge(%s) = %+v, want one %s finding after SET ROLE, by %v", c.role, fs, c.kind, []string{c.role, c.mid, c.target})
		}
		if s, want := fs[0].String(), `"`+c.role+`" has, after SET ROLE, the privileges of "`+c.target+`" (through "`+c.mid+`"), which `+c.what; s != want {
			t.Errorf("16: String() = %q, want %q", s, want)
		}
		if got, want := fs[0].Revoke(), `REVOKE "`+c.mid+`" FROM "`+c.role+`";`; got != want {
			t.Errorf("16: Revoke() = %q, want %q", got, want)
		}
	}
	// The first grant SET FALSE too: it can neither SET ROLE to the
	// middle role nor inherit from it.
	if _, err := db.ExecContext(ctx, `UPDATE options SET set_option = false WHERE member = to_regrole($1)`, app); err != nil {
		t.Fatal(err)
	}
	if fs := judge16(t, db, app, []string{g.owner}); len(fs) != 0 {
		t.Fatalf("16: Judge(%s) with the first grant SET FALSE, INHERIT FALSE = %+v, want nothing", app, fs)
	}
}

// TestOutside2EdgesAdminOptionAlone: from PostgreSQL 16 a grant WITH ADMIN
// OPTION, SET FALSE, INHERIT FALSE lets the member grant the role to
// itself WITH SET TRUE (PostgreSQL's documentation: the defaults are "a
// safeguard against accidents, not a security feature"), and so SET ROLE
// to it. The PostgreSQL 16 query (on the emulated catalogue) reports a
// member WITH ADMIN OPTION alone of the BYPASSRLS role as able to SET
// ROLE to it, with its path and REVOKE; one that can SET ROLE to a role
// holding the superuser role WITH ADMIN OPTION alone is a superuser
// finding through that role; one whose only grant of that role is SET
// FALSE, INHERIT FALSE, without ADMIN, is nothing (it cannot use the
// role's ADMIN OPTION). On this server a holder of ADMIN OPTION grants
// the BYPASSRLS role onward, and the role it granted it to reads every
// tenant's rows after SET ROLE.
func TestOutside2EdgesAdminOptionAlone(t *testing.T) {
	t.Parallel()
	g := setup(t)
	ctx := context.Background()
	p := g.schema + "_"
	adm, via, holder, none, other := p+"adm", p+"via", p+"holder", p+"none", p+"other"
	g.loginRoles(t, []string{other}, []string{adm, via, none, holder, other},
		`CREATE ROLE `+adm+` LOGIN NOSUPERUSER NOBYPASSRLS`,
		`GRANT `+g.roles.Bypass+` TO `+adm+` WITH ADMIN OPTION`,
		`CREATE ROLE `+holder+` NOLOGIN`,
		`GRANT `+g.roles.Super+` TO `+holder+` WITH ADMIN OPTION`,
		`CREATE ROLE `+via+` LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT IN ROLE `+holder,
		`CREATE ROLE `+none+` LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT IN ROLE `+holder,
		`CREATE ROLE `+other+` LOGIN NOSUPERUSER NOBYPASSRLS`,
	)
	// The evidence, as the role: the holder of ADMIN OPTION grants the
	// BYPASSRLS role, and the role it granted it to reads every row.
	if n, err := g.readsOtherTenant(t, other, "", false); err != nil || n != 1 {
		t.Fatalf("%s as itself: %d rows (%v), want 1", other, n, err)
	}
	if _, err := g.as(t, adm).ExecContext(ctx, `GRANT `+g.roles.Bypass+` TO `+other); err != nil {
		t.Fatalf("as %s, GRANT %s: %v", adm, g.roles.Bypass, err)
	}
	if n, err := g.readsOtherTenant(t, other, g.roles.Bypass, false); err != nil || n != 2 {
		t.Fatalf("%s after SET ROLE %s: %d rows (%v), want 2", other, g.roles.Bypass, n, err)
	}

	db, _ := openEmulated16(t, "")
	options16(t, db, g.roles.Bypass, adm, false, false)
	options16(t, db, g.roles.Super, holder, false, false)
	options16(t, db, holder, via, true, false)
	options16(t, db, holder, none, false, false)
	for _, c := range []struct {
		role   string
		kind   roles.Kind
		target string
		path   []string
		what   string
	}{
		{adm, roles.BypassRLS, g.roles.Bypass, []string{adm, g.roles.Bypass}, "has BYPASSRLS"},
		{via, roles.Superuser, g.roles.Super, []string{via, holder, g.roles.Super}, "is a superuser"},
	} {
		fs := judge16(t, db, c.role, []string{g.owner})
		if len(fs) != 1 || fs[0].Kind != c.kind || fs[0].Target != c.target || !fs[0].SetRole || fs[0].Inherits || !slices.Equal(fs[0].Path, c.path) {
			t.Fatalf("16: Judge(%s) = %+v, want one %s finding by SET ROLE (after granting itself) by %v", c.role, fs, c.kind, c.path)
		}
		through := ""
		if len(c.path) > 2 {
			through = ` (through "` + strings.Join(c.path[1:len(c.path)-1], `", "`) + `")`
		}
		if s, want := fs[0].String(), `"`+c.role+`" can SET ROLE to "`+c.target+`"`+through+`, which `+c.what; s != want {
			t.Errorf("16: String() = %q, want %q", s, want)
		}
		if got, want := fs[0].Revoke(), `REVOKE "`+c.path[1]+`" FROM "`+c.role+`";`; got != want {
			t.Errorf("16: Revoke() = %q, want %q", got, want)
		}
	}
	if fs := judge16(t, db, none, []string{g.owner}); len(fs) != 0 {
		t.Fatalf("16: Judge(%s), a grant SET FALSE, INHERIT FALSE of the ADMIN OPTION's holder = %+v, want nothing", none, fs)
	}
}

// TestOutside2EdgesSetRoleThenInheritChainOfThree: the privileges a role
// has after SET ROLE are those the role it SETs inherits along a whole
// chain: a member WITH SET TRUE, INHERIT FALSE of m1, which inherits m2
// (SET FALSE), which inherits the owner (SET FALSE), is an owner finding
// on PostgreSQL 16 (the emulated catalogue) by that path, its line naming
// both middle roles in order and its REVOKE cutting the first grant. On
// this server, as the role: after SET ROLE to m1 (neither to m2 nor to
// the owner) it disables the table's row-level security and reads the
// other tenant's row.
func TestOutside2EdgesSetRoleThenInheritChainOfThree(t *testing.T) {
	t.Parallel()
	g := setup(t)
	p := g.schema + "_"
	app, m1, m2 := p+"app", p+"m1", p+"m2"
	g.loginRoles(t, []string{app, m1}, []string{app, m1, m2},
		`CREATE ROLE `+m2+` NOLOGIN INHERIT IN ROLE `+g.owner,
		`CREATE ROLE `+m1+` NOLOGIN INHERIT IN ROLE `+m2,
		`CREATE ROLE `+app+` LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT IN ROLE `+m1,
	)
	if n, err := g.readsOtherTenant(t, app, m1, true); err != nil || n != 2 {
		t.Fatalf("after SET ROLE %s, disabling row-level security: %d rows (%v), want 2", m1, n, err)
	}
	db, _ := openEmulated16(t, "")
	options16(t, db, m1, app, true, false)
	options16(t, db, m2, m1, false, true)
	options16(t, db, g.owner, m2, false, true)
	fs := judge16(t, db, app, []string{g.owner})
	if len(fs) != 1 || fs[0].Kind != roles.Owner || fs[0].SetRole || fs[0].Inherits || !slices.Equal(fs[0].Path, []string{app, m1, m2, g.owner}) {
		t.Fatalf("16: Judge(%s) = %+v, want one owner finding after SET ROLE by %v", app, fs, []string{app, m1, m2, g.owner})
	}
	if s, want := fs[0].String(), `"`+app+`" has, after SET ROLE, the privileges of "`+g.owner+`" (through "`+m1+`", "`+m2+`"), which owns the tables`; s != want {
		t.Errorf("16: String() = %q, want %q", s, want)
	}
	if got, want := fs[0].Revoke(), `REVOKE "`+m1+`" FROM "`+app+`";`; got != want {
		t.Errorf("16: Revoke() = %q, want %q", got, want)
	}
}

// TestOutside2EdgesInheritedOwnerByTwoChains: a role that inherits the
// privileges of a NOINHERIT owner along two chains of INHERIT roles, one
// of two grants and one of three, is told (PostgreSQL 15) the shortest:
// "has, without SET ROLE, the privileges of" through its middle role, and
// the REVOKE of its first grant (the owner's own NOINHERIT does not
// matter: what a member inherits depends on the members on the way). The
// inheritance is real: as itself it disables the table's row-level
// security; once the told REVOKE is run it still does, by the longer
// chain, which Judge then names; once that one's REVOKE is run it cannot
// ("must be owner") and Judge finds nothing.
func TestOutside2EdgesInheritedOwnerByTwoChains(t *testing.T) {
	t.Parallel()
	g := setup(t)
	ctx := context.Background()
	p := g.schema + "_"
	app, a1, b1, b2 := p+"app", p+"a1", p+"b1", p+"b2"
	g.loginRoles(t, []string{app}, []string{app, a1, b1, b2},
		`ALTER ROLE `+g.owner+` NOINHERIT`,
		`CREATE ROLE `+a1+` NOLOGIN INHERIT IN ROLE `+g.owner,
		`CREATE ROLE `+b2+` NOLOGIN INHERIT IN ROLE `+g.owner,
		`CREATE ROLE `+b1+` NOLOGIN INHERIT IN ROLE `+b2,
		`CREATE ROLE `+app+` LOGIN NOSUPERUSER NOBYPASSRLS INHERIT IN ROLE `+a1+`, `+b1,
	)
	for _, path := range [][]string{{app, a1, g.owner}, {app, b1, b2, g.owner}} {
		fs, err := roles.Judge(ctx, g.admin, app, []string{g.owner})
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 1 || fs[0].Kind != roles.Owner || !fs[0].Inherits || !slices.Equal(fs[0].Path, path) {
			t.Fatalf("Judge(%s) = %+v, want one inherited owner finding by the shortest chain %v", app, fs, path)
		}
		if s, want := fs[0].String(), `"`+app+`" has, without SET ROLE, the privileges of "`+g.owner+`" (through "`+strings.Join(path[1:len(path)-1], `", "`)+`"), which owns the tables`; s != want {
			t.Errorf("String() = %q, want %q", s, want)
		}
		if got, want := fs[0].Revoke(), `REVOKE "`+path[1]+`" FROM "`+app+`";`; got != want {
			t.Fatalf("Revoke() = %q, want %q", got, want)
		}
		if n, err := g.readsOtherTenant(t, app, "", true); err != nil || n != 2 {
			t.Fatalf("as itself, disabling row-level security: %d rows (%v), want 2", n, err)
		}
		testdb.ExecAll(t, g.admin, fs[0].Revoke())
	}
	if _, err := g.readsOtherTenant(t, app, "", true); err == nil || !strings.Contains(err.Error(), "must be owner") {
		t.Fatalf("after both REVOKEs, disabling row-level security: %v, want must be owner", err)
	}
	if fs, err := roles.Judge(ctx, g.admin, app, []string{g.owner}); err != nil || len(fs) != 0 {
		t.Fatalf("Judge(%s) after both REVOKEs = %+v, %v; want nothing", app, fs, err)
	}
}

// TestOutside2EdgesInheritancePathNeedsInheritOnEveryGrant: on
// PostgreSQL 16 (the emulated catalogue) a role that inherits the owner
// along a chain of three INHERIT grants and has its privileges after SET
// ROLE along a shorter chain (SET TRUE, INHERIT FALSE, then INHERIT) is
// told the chain it inherits by, "has, without SET ROLE", with that
// chain's REVOKE; once that REVOKE is run (on the server's catalogue),
// the shorter chain is told, "after SET ROLE", with its own.
func TestOutside2EdgesInheritancePathNeedsInheritOnEveryGrant(t *testing.T) {
	t.Parallel()
	g := setup(t)
	p := g.schema + "_"
	app, m1, n1, n2 := p+"app", p+"m1", p+"n1", p+"n2"
	g.loginRoles(t, nil, []string{app, m1, n1, n2},
		`CREATE ROLE `+m1+` NOLOGIN IN ROLE `+g.owner,
		`CREATE ROLE `+n2+` NOLOGIN IN ROLE `+g.owner,
		`CREATE ROLE `+n1+` NOLOGIN IN ROLE `+n2,
		`CREATE ROLE `+app+` LOGIN NOSUPERUSER NOBYPASSRLS IN ROLE `+m1+`, `+n1,
	)
	db, _ := openEmulated16(t, "")
	options16(t, db, m1, app, true, false)
	options16(t, db, g.owner, m1, false, true)
	options16(t, db, n1, app, false, true)
	options16(t, db, n2, n1, false, true)
	options16(t, db, g.owner, n2, false, true)
	for _, c := range []struct {
		path     []string
		inherits bool
		how      string
	}{
		{[]string{app, n1, n2, g.owner}, true, "without SET ROLE"},
		{[]string{app, m1, g.owner}, false, "after SET ROLE"},
	} {
		fs := judge16(t, db, app, []string{g.owner})
		if len(fs) != 1 || fs[0].Kind != roles.Owner || fs[0].Inherits != c.inherits || fs[0].SetRole || !slices.Equal(fs[0].Path, c.path) {
			t.Fatalf("16: Judge(%s) = %+v, want one owner finding (inherits %v) by %v", app, fs, c.inherits, c.path)
		}
		if s, want := fs[0].String(), `"`+app+`" has, `+c.how+`, the privileges of "`+g.owner+`" (through "`+strings.Join(c.path[1:len(c.path)-1], `", "`)+`"), which owns the tables`; s != want {
			t.Errorf("16: String() = %q, want %q", s, want)
		}
		if got, want := fs[0].Revoke(), `REVOKE "`+c.path[1]+`" FROM "`+app+`";`; got != want {
			t.Fatalf("16: Revoke() = %q, want %q", got, want)
		}
		testdb.ExecAll(t, g.admin, fs[0].Revoke())
	}
}

// TestOutside2EdgesEveryOwnerCounts: Judge is given several owners, and a
// role that can become the second of them (a NOINHERIT member, by SET
// ROLE) or inherits it is an owner finding reaching it, on PostgreSQL 15
// and on 16 (the emulated catalogue) alike; so is the second owner
// judged itself. The escape is real: after SET ROLE to it the role
// disables the table's row-level security.
func TestOutside2EdgesEveryOwnerCounts(t *testing.T) {
	t.Parallel()
	g := setup(t)
	ctx := context.Background()
	p := g.schema + "_"
	first, set, inherit := p+"first", p+"set", p+"inherit"
	g.loginRoles(t, []string{set}, []string{set, inherit, first},
		`CREATE ROLE `+first+` NOLOGIN`,
		`CREATE ROLE `+set+` LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT IN ROLE `+g.owner,
		`CREATE ROLE `+inherit+` LOGIN NOSUPERUSER NOBYPASSRLS INHERIT IN ROLE `+g.owner,
	)
	if n, err := g.readsOtherTenant(t, set, g.owner, true); err != nil || n != 2 {
		t.Fatalf("after SET ROLE %s, disabling row-level security: %d rows (%v), want 2", g.owner, n, err)
	}
	owners := []string{first, g.owner}
	db, _ := openEmulated16(t, "")
	for _, j := range []struct {
		name  string
		judge func(role string) ([]roles.Finding, error)
	}{
		{"15", func(role string) ([]roles.Finding, error) { return roles.Judge(ctx, g.admin, role, owners) }},
		{"16", func(role string) ([]roles.Finding, error) {
			return roles.JudgeWith(ctx, db, *roles.Reach16, role, owners)
		}},
	} {
		for _, c := range []struct {
			role     string
			inherits bool
			path     []string
		}{
			{set, false, []string{set, g.owner}},
			{inherit, true, []string{inherit, g.owner}},
			{g.owner, true, []string{g.owner}},
		} {
			fs, err := j.judge(c.role)
			if err != nil {
				t.Fatal(err)
			}
			if len(fs) != 1 || fs[0].Kind != roles.Owner || fs[0].Target != g.owner || fs[0].Inherits != c.inherits || !slices.Equal(fs[0].Path, c.path) {
				t.Errorf("%s: Judge(%s) with owners %v = %+v, want one owner finding reaching %s by %v", j.name, c.role, owners, fs, g.owner, c.path)
			}
		}
	}
}

// TestOutside2EdgesSetRoleNeedsSetOnEveryGrant: on PostgreSQL 16 (the
// emulated catalogue) a member WITH SET FALSE, INHERIT TRUE of a role
// that is a member WITH SET TRUE, INHERIT TRUE of the BYPASSRLS role
// cannot SET ROLE to it (every grant of the chain needs SET) and inherits
// no attribute: nothing is found; on PostgreSQL 15, where every
// membership permits SET ROLE, it is a BYPASSRLS finding through the
// middle role, and real: after SET ROLE it reads the other tenant's row.
func TestOutside2EdgesSetRoleNeedsSetOnEveryGrant(t *testing.T) {
	t.Parallel()
	g := setup(t)
	ctx := context.Background()
	p := g.schema + "_"
	app, mid := p+"app", p+"mid"
	g.loginRoles(t, []string{app}, []string{app, mid},
		`CREATE ROLE `+mid+` NOLOGIN INHERIT IN ROLE `+g.roles.Bypass,
		`CREATE ROLE `+app+` LOGIN NOSUPERUSER NOBYPASSRLS INHERIT IN ROLE `+mid,
	)
	if n, err := g.readsOtherTenant(t, app, g.roles.Bypass, false); err != nil || n != 2 {
		t.Fatalf("15: after SET ROLE %s: %d rows (%v), want 2", g.roles.Bypass, n, err)
	}
	fs, err := roles.Judge(ctx, g.admin, app, []string{g.owner})
	if err != nil || len(fs) != 1 || fs[0].Kind != roles.BypassRLS || !slices.Equal(fs[0].Path, []string{app, mid, g.roles.Bypass}) {
		t.Fatalf("15: Judge(%s) = %+v, %v; want one BYPASSRLS finding through %s", app, fs, err, mid)
	}
	db, _ := openEmulated16(t, "")
	options16(t, db, mid, app, false, true)
	options16(t, db, g.roles.Bypass, mid, true, true)
	if fs := judge16(t, db, app, []string{g.owner}); len(fs) != 0 {
		t.Fatalf("16: Judge(%s), SET FALSE on its first grant = %+v, want nothing", app, fs)
	}
}
