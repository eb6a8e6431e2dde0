package testdb

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/roles"
)

// Escape is a login role that row-level security does not bind once it
// SETs ROLE to Reached (or, for Inherits, even without), made by
// EscapeRoles.
type Escape struct {
	Name    string     // what it is, for subtest names
	Role    string     // the login role
	Kind    roles.Kind // what Reached lets it do
	Reached string     // the role it can become
	Path    []string   // Role … Reached
}

// EscapeRoles are fresh roles for one test, dropped when it ends (with
// what they own), around owner, the role that owns the guarded tables.
type EscapeRoles struct {
	Escapes []Escape // each escaping login role
	Clean   string   // a login role, member of a harmless group: row-level security binds it
	Bypass  string   // a NOLOGIN role with BYPASSRLS
	Super   string   // a NOLOGIN superuser
}

// MakeEscapeRoles creates, on the PostgreSQL server of the tests, the
// three escapes of issue 24 and a chain: a member of a BYPASSRLS role, a
// NOINHERIT member of owner, a member of a superuser role, and a member
// of a NOINHERIT role that is a member of the BYPASSRLS role; and a clean
// role, a member of a role that is none of these. Every login role is
// NOSUPERUSER NOBYPASSRLS and owns nothing: its own attributes are clean.
func MakeEscapeRoles(t testing.TB, owner string) *EscapeRoles {
	t.Helper()
	admin, err := sql.Open("pgx", PostgresURL(t))
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	p := "rf_esc_" + randomHex(4) + "_"
	r := &EscapeRoles{Clean: p + "clean", Bypass: p + "bypass", Super: p + "super"}
	mid, plain := p+"mid", p+"plain"
	r.Escapes = []Escape{
		{Name: "member_of_a_bypassrls_role", Role: p + "app_bypass", Kind: roles.BypassRLS, Reached: r.Bypass, Path: []string{p + "app_bypass", r.Bypass}},
		{Name: "noinherit_member_of_the_owner", Role: p + "app_owner", Kind: roles.Owner, Reached: owner, Path: []string{p + "app_owner", owner}},
		{Name: "member_of_a_superuser_role", Role: p + "app_super", Kind: roles.Superuser, Reached: r.Super, Path: []string{p + "app_super", r.Super}},
		{Name: "chain_of_two_memberships", Role: p + "app_chain", Kind: roles.BypassRLS, Reached: r.Bypass, Path: []string{p + "app_chain", mid, r.Bypass}},
	}
	stmts := []string{
		`CREATE ROLE ` + r.Bypass + ` NOLOGIN BYPASSRLS`,
		`CREATE ROLE ` + r.Super + ` NOLOGIN SUPERUSER`,
		`CREATE ROLE ` + mid + ` NOLOGIN NOINHERIT IN ROLE ` + r.Bypass,
		`CREATE ROLE ` + plain + ` NOLOGIN`,
		`CREATE ROLE ` + p + `app_bypass LOGIN NOSUPERUSER NOBYPASSRLS INHERIT IN ROLE ` + r.Bypass,
		`CREATE ROLE ` + p + `app_owner LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT IN ROLE ` + owner,
		`CREATE ROLE ` + p + `app_super LOGIN NOSUPERUSER NOBYPASSRLS INHERIT IN ROLE ` + r.Super,
		`CREATE ROLE ` + p + `app_chain LOGIN NOSUPERUSER NOBYPASSRLS INHERIT IN ROLE ` + mid,
		`CREATE ROLE ` + r.Clean + ` LOGIN NOSUPERUSER NOBYPASSRLS INHERIT IN ROLE ` + plain,
	}
	// Dropped in reverse: members before their groups.
	all := []string{r.Bypass, r.Super, mid, plain, p + "app_bypass", p + "app_owner", p + "app_super", p + "app_chain", r.Clean}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := len(all) - 1; i >= 0; i-- {
			_, _ = admin.ExecContext(ctx, `DROP OWNED BY `+all[i])
			if _, err := admin.ExecContext(ctx, `DROP ROLE IF EXISTS `+all[i]); err != nil {
				t.Errorf("testdb: drop role %s: %v", all[i], err)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range stmts {
		if _, err := admin.ExecContext(ctx, s); err != nil {
			t.Fatalf("testdb: %s: %v", s, err)
		}
	}
	return r
}
