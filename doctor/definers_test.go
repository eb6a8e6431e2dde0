package doctor_test

import (
	"strings"
	"testing"

	"github.com/racefree/racefree/doctor"
)

// TestPostgresDefinerEscapesRLS: a SECURITY DEFINER function or procedure
// that reaches a racefree table (directly, through a function it calls),
// or whose body cannot be followed, whose owner row-level security does
// not bind (a superuser, a role with BYPASSRLS, a member of the table's
// owner while row-level security is not forced) and which the judged
// role can run (as PUBLIC, through a role it is a member of, which a
// NOINHERIT role reaches by SET ROLE, or as a trigger that fires whoever
// writes) is definer-escapes-rls, an error naming the function and its
// owner; its fix (SECURITY INVOKER) clears it. A definer the role cannot
// run, one owned by a role row-level security binds, one that reads
// nothing of racefree's and an invoker are not; nor is any for a
// superuser (role-is-superuser says the rest).
func TestPostgresDefinerEscapesRLS(t *testing.T) {
	t.Parallel()
	owner, app, role, exec := roleFixture(t, "_group", "_bound", "_bypass", "_tables", "_heir")
	group, bound, bypass, tables, heir := role+"_group", role+"_bound", role+"_bypass", role+"_tables", role+"_heir"
	exec(`CREATE ROLE `+group+` NOLOGIN`, `CREATE ROLE `+bound+` NOLOGIN`, `CREATE ROLE `+bypass+` NOLOGIN BYPASSRLS`,
		`CREATE ROLE `+tables+` NOLOGIN`, `CREATE ROLE `+heir+` NOLOGIN IN ROLE `+tables,
		`GRANT `+group+` TO `+role,
		`GRANT SELECT ON racefree_claims, racefree_quotas TO `+bound+`, `+bypass)
	clean := func(what string) {
		t.Helper()
		if rep := check(t, app, doctor.Options{}); hasCode(rep, doctor.DefinerEscapesRLS) || hasCode(rep, doctor.RLSNotJudged) {
			t.Fatalf("%s: %+v", what, rep.Findings)
		}
	}

	// Not findings: a superuser's definer that reads nothing of
	// racefree's; one the role cannot run; one a role row-level security
	// binds owns; a superuser's invoker.
	exec(`CREATE FUNCTION d_none() RETURNS int LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'`,
		`CREATE FUNCTION d_revoked() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT count(*) FROM racefree_claims'`,
		`REVOKE EXECUTE ON FUNCTION d_revoked() FROM PUBLIC`,
		`CREATE FUNCTION d_bound() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT count(*) FROM racefree_claims'`,
		`ALTER FUNCTION d_bound() OWNER TO `+bound,
		`CREATE FUNCTION d_invoker() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM racefree_claims'`,
		// A member of the table's owner while row-level security is
		// forced on it (the last case lifts FORCE).
		`ALTER TABLE racefree_claims OWNER TO `+tables,
		`CREATE FUNCTION d_heir() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT count(*) FROM racefree_claims'`,
		`ALTER FUNCTION d_heir() OWNER TO `+heir)
	clean("definers row-level security binds, or the role cannot run")

	for _, c := range []struct {
		name  string
		setup []string
		names []string // in the detail
		after []string
	}{
		{"a superuser's definer PUBLIC can run",
			[]string{`CREATE FUNCTION d_all() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT count(*) FROM racefree_claims'`},
			[]string{`."d_all"(), owned by postgres: `, `racefree_claims`}, nil},
		{"a BYPASSRLS role's definer granted to a role the role is a member of",
			[]string{`CREATE FUNCTION d_bypass(k text) RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT count(*) FROM racefree_quotas WHERE key = k'`,
				`ALTER FUNCTION d_bypass(text) OWNER TO ` + bypass, `REVOKE EXECUTE ON FUNCTION d_bypass(text) FROM PUBLIC`,
				`GRANT EXECUTE ON FUNCTION d_bypass(text) TO ` + group},
			[]string{`."d_bypass"(k text), owned by ` + bypass + `: `, `racefree_quotas`}, nil},
		{"a superuser's definer that reaches through an invoker it calls",
			[]string{`CREATE FUNCTION d_inner() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM racefree_quotas'`,
				`CREATE FUNCTION d_outer() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT d_inner()'`},
			[]string{`."d_outer"(), owned by postgres: `, `racefree_quotas`}, nil},
		{"a superuser's procedure that builds its SQL at run time",
			[]string{`CREATE PROCEDURE d_dynamic(t text) LANGUAGE plpgsql SECURITY DEFINER AS $$BEGIN EXECUTE 'DELETE FROM ' || t; END$$`},
			[]string{`."d_dynamic"(IN t text), owned by postgres: `, `cannot be followed`}, nil},
		{"a superuser's definer that calls one function reaching a racefree table and one building SQL at run time",
			[]string{`CREATE FUNCTION d_exec(t text) RETURNS bigint LANGUAGE plpgsql AS $$BEGIN EXECUTE 'SELECT 1 FROM ' || t; RETURN 1; END$$`,
				`CREATE FUNCTION d_both() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT d_inner() + d_exec(''x'')'`},
			[]string{`."d_both"(), owned by postgres: `, `racefree_quotas`, `cannot be followed`}, nil},
		{"a superuser's trigger function the role cannot EXECUTE",
			[]string{`CREATE FUNCTION d_trigger() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$BEGIN PERFORM count(*) FROM racefree_claims; RETURN NEW; END$$`,
				`REVOKE EXECUTE ON FUNCTION d_trigger() FROM PUBLIC`,
				`CREATE TABLE d_written (x int)`, `CREATE TRIGGER d_fires BEFORE INSERT ON d_written FOR EACH ROW EXECUTE FUNCTION d_trigger()`},
			[]string{`."d_trigger"(), owned by postgres: `, `racefree_claims`}, nil},
		{"a definer of a member of the table's owner while row-level security is not forced",
			[]string{`ALTER TABLE racefree_claims NO FORCE ROW LEVEL SECURITY`},
			[]string{`."d_heir"(), owned by ` + heir + `: `, `racefree_claims`},
			[]string{`ALTER TABLE racefree_claims FORCE ROW LEVEL SECURITY`, `ALTER TABLE racefree_claims OWNER TO postgres`}},
	} {
		exec(c.setup...)
		f := want(t, check(t, app, doctor.Options{}), doctor.DefinerEscapesRLS, doctor.Error)
		for _, n := range c.names {
			if !strings.Contains(f.Detail, n) {
				t.Fatalf("%s: detail %q does not name %q", c.name, f.Detail, n)
			}
		}
		if strings.Count(f.Detail, ", owned by ") != 1 {
			t.Fatalf("%s: detail %q names more than the one function", c.name, f.Detail)
		}
		want(t, check(t, owner, doctor.Options{Role: role}), doctor.DefinerEscapesRLS, doctor.Error)
		if su := check(t, app, doctor.Options{Role: "postgres"}); hasCode(su, doctor.DefinerEscapesRLS) {
			t.Fatalf("%s: a superuser is judged by role-is-superuser, not by definers: %+v", c.name, su.Findings)
		}
		if strings.Count(f.Fix, "SECURITY INVOKER;") != 1 {
			t.Fatalf("%s: fix %q", c.name, f.Fix)
		}
		exec(f.Fix)
		exec(c.after...)
		clean(c.name + ", after its fix")
	}
}
