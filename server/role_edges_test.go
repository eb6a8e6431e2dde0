package server_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/roles"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// judgedAs migrates racefree's tables in a fresh schema as their owner,
// calls role (with a superuser's database, the schema and the owner) for
// the role the server logs in as, and opens a server logged in as it,
// with searchPath's search_path when searchPath is not nil. It returns
// the server, the superuser's database and the schema.
func judgedAs(t *testing.T, role func(admin *racefree.DB, schema, owner string) string, searchPath func(schema string) string) (*server.Server, *racefree.DB, string) {
	t.Helper()
	ctx := context.Background()
	base := testdb.NewDSN(t, racefree.Postgres)
	ownerDSN := testdb.OwnerDSN(t, base)
	testdb.Open(t, ownerDSN, nil) // migrated: the owner owns racefree's tables
	admin := testdb.Open(t, base, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
	u, _ := url.Parse(ownerDSN)
	schema := u.Query().Get("search_path")
	u.User = url.User(role(admin, schema, u.User.Username()))
	if searchPath != nil {
		q := u.Query()
		q.Set("search_path", searchPath(schema))
		u.RawQuery = q.Encode()
	}
	db, err := dsn.Open(ctx, u.String(), &racefree.Config{Schema: racefree.SchemaAllowOutdated})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return server.New(db, server.Options{}), admin, schema
}

// TestEdgesJudgeRoleCountsEveryWay: a role that escapes by two ways of
// the same code (it can SET ROLE to two BYPASSRLS roles) gets both paths
// from JudgeRole, one /readyz warning of the code (the codes are listed
// once) and the gauge at 2, the number of ways, not 1.
func TestEdgesJudgeRoleCountsEveryWay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var bypass1, bypass2 string
	s, _, _ := judgedAs(t, func(admin *racefree.DB, schema, _ string) string {
		app := schema + "_app"
		bypass1, bypass2 = schema+"_bypass1", schema+"_bypass2"
		t.Cleanup(func() {
			for _, r := range []string{app, bypass1, bypass2} {
				_, _ = admin.SQL().ExecContext(context.Background(), `DROP OWNED BY `+r)
				if _, err := admin.SQL().ExecContext(context.Background(), `DROP ROLE IF EXISTS `+r); err != nil {
					t.Errorf("drop role %s: %v", r, err)
				}
			}
		})
		testdb.ExecAll(t, admin,
			`CREATE ROLE `+bypass1+` NOLOGIN BYPASSRLS`,
			`CREATE ROLE `+bypass2+` NOLOGIN BYPASSRLS`,
			`CREATE ROLE `+app+` LOGIN NOSUPERUSER NOBYPASSRLS IN ROLE `+bypass1+`, `+bypass2,
			`GRANT USAGE ON SCHEMA `+schema+` TO `+app,
			`GRANT SELECT ON `+schema+`.racefree_schema_migrations TO `+app,
		)
		return app
	}, nil)
	found, err := s.JudgeRole(ctx)
	if err != nil || len(found) != 2 {
		t.Fatalf("JudgeRole = %+v, %v; want two ways", found, err)
	}
	for i, b := range []string{bypass1, bypass2} {
		if found[i].Code != roles.BypassRLS.Code() || !strings.Contains(found[i].Path, `can SET ROLE to "`+b+`"`) {
			t.Errorf("way %d: %+v, want %s reaching %s", i, found[i], roles.BypassRLS.Code(), b)
		}
	}
	h := s.Handler()
	code, body, _ := do(t, h, "GET", "/readyz", "")
	ws, _ := body["warnings"].([]any)
	if code != 200 || body["status"] != "ready" || len(ws) != 1 || ws[0].(map[string]any)["code"] != roles.BypassRLS.Code() {
		t.Fatalf("readyz: %d %v; want ready with one warning %s", code, body, roles.BypassRLS.Code())
	}
	m := metricsOf(h)
	for _, k := range roles.Kinds {
		want := `racefree_role_findings{code="` + k.Code() + `"} 0`
		if k == roles.BypassRLS {
			want = `racefree_role_findings{code="` + k.Code() + `"} 2`
		}
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestEdgesJudgeRoleThatFailsIsNotJudged: when the catalogue query of
// the judgement fails (here pg_has_role, shadowed for the server's
// connections by a function that raises, ahead of pg_catalog in their
// search path), JudgeRole returns the error, and the server, still
// ready, warns role-not-judged on /readyz and sets
// racefree_role_findings{code="role-not-judged"} to 1: a role it could
// not judge never reads as clean. Once the query works again the same
// role, the tables' owner, is judged: role-owns-tables, and
// role-not-judged back to 0.
func TestEdgesJudgeRoleThatFailsIsNotJudged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, admin, schema := judgedAs(t, func(_ *racefree.DB, _, owner string) string { return owner }, func(schema string) string { return schema + ",pg_catalog" })
	testdb.ExecAll(t, admin, `CREATE FUNCTION `+schema+`.pg_has_role(a oid, b oid, priv text) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the catalogue cannot be read (test)';
END $$`)
	found, err := s.JudgeRole(ctx)
	if err == nil || !strings.Contains(err.Error(), "the catalogue cannot be read") || len(found) != 0 {
		t.Fatalf("JudgeRole = %+v, %v; want the catalogue's error and no finding", found, err)
	}
	h := s.Handler()
	code, body, _ := do(t, h, "GET", "/readyz", "")
	ws, _ := body["warnings"].([]any)
	if code != 200 || body["status"] != "ready" || len(ws) != 1 || ws[0].(map[string]any)["code"] != server.RoleNotJudged {
		t.Fatalf("readyz: %d %v; want ready with the one warning %s", code, body, server.RoleNotJudged)
	}
	m := metricsOf(h)
	if want := `racefree_role_findings{code="` + server.RoleNotJudged + `"} 1`; !strings.Contains(m, want) {
		t.Errorf("metrics lack %q", want)
	}
	for _, k := range roles.Kinds {
		if want := `racefree_role_findings{code="` + k.Code() + `"} 0`; !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	testdb.ExecAll(t, admin, `DROP FUNCTION `+schema+`.pg_has_role(oid, oid, text)`)
	found, err = s.JudgeRole(ctx)
	if err != nil || len(found) != 1 || found[0].Code != roles.Owner.Code() {
		t.Fatalf("JudgeRole once the query works = %+v, %v; want %s", found, err, roles.Owner.Code())
	}
	m = metricsOf(h)
	for _, want := range []string{`racefree_role_findings{code="` + server.RoleNotJudged + `"} 0`, `racefree_role_findings{code="` + roles.Owner.Code() + `"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
