package roles_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree/internal/roles"
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
