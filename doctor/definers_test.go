package doctor_test

import (
	"strings"
	"testing"

	"github.com/racefree/racefree/doctor"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestPostgresDefinerEscapesRLS: a SECURITY DEFINER function or procedure
// that reaches a racefree table (directly, through a function it calls),
// or whose body cannot be followed, whose body may run as a role
// row-level security does not bind (its owner a superuser, a role with
// BYPASSRLS, a member of the table's owner while row-level security is
// not forced; or its owner one that can run, through other definers, a
// definer of such a role that reaches a racefree table) and which the
// judged role can run (as PUBLIC, through a role it is a member of, which
// a NOINHERIT role reaches by SET ROLE, or as a trigger that fires
// whoever writes) is definer-escapes-rls, an error naming each function
// once with its owner; its fix (SECURITY INVOKER) clears it. A definer
// the role cannot run, one of a bound owner that can run no unbound
// definer reaching racefree's tables, one that reads nothing of
// racefree's and an invoker are not; nor is any for a superuser
// (role-is-superuser says the rest).
func TestPostgresDefinerEscapesRLS(t *testing.T) {
	t.Parallel()
	// A database of its own: the definers of every schema count, and
	// other tests' would show up here, as this test's would there.
	owner, app, role, exec := roleFixture(t, testdb.NewDatabaseDSN(t), "_group", "_bound", "_bound2", "_bypass", "_tables", "_heir")
	group, bound, bound2, bypass, tables, heir := role+"_group", role+"_bound", role+"_bound2", role+"_bypass", role+"_tables", role+"_heir"
	exec(`CREATE ROLE `+group+` NOLOGIN`, `CREATE ROLE `+bound+` NOLOGIN`, `CREATE ROLE `+bound2+` NOLOGIN`, `CREATE ROLE `+bypass+` NOLOGIN BYPASSRLS`,
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
	// racefree's; definers a role row-level security binds owns, one that
	// reads racefree's tables and one that builds SQL at run time; a
	// superuser's invoker; a definer of a member of a table's owner while
	// row-level security is forced on it (the last case lifts FORCE).
	exec(`CREATE FUNCTION d_none() RETURNS int LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'`,
		`CREATE FUNCTION d_bound() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT count(*) FROM racefree_claims'`,
		`ALTER FUNCTION d_bound() OWNER TO `+bound,
		`CREATE FUNCTION d_bdyn(q text) RETURNS void LANGUAGE plpgsql SECURITY DEFINER AS $$BEGIN EXECUTE q; END$$`,
		`ALTER FUNCTION d_bdyn(text) OWNER TO `+bound,
		`CREATE FUNCTION d_invoker() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM racefree_claims'`,
		`ALTER TABLE racefree_claims OWNER TO `+tables,
		`CREATE FUNCTION d_heir() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT count(*) FROM racefree_claims'`,
		`ALTER FUNCTION d_heir() OWNER TO `+heir)
	clean("definers row-level security binds")
	// Nor a superuser's definer over racefree's tables the role cannot
	// run (no definer the bound role can run reaches it either: the
	// bound definers' owner can run none of the superuser's).
	exec(`DROP FUNCTION d_bound(), d_bdyn(text), d_none(), d_heir()`,
		`CREATE FUNCTION d_revoked() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT count(*) FROM racefree_claims'`,
		`REVOKE EXECUTE ON FUNCTION d_revoked() FROM PUBLIC`)
	clean("a definer the role cannot run")

	for _, c := range []struct {
		name  string
		setup []string
		names []string // in the detail; those with ", owned by " name the functions reported
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
		{"a bound role's definer calling, through another bound role's, a superuser's definer that only that role can run, and one building SQL at run time",
			[]string{`CREATE FUNCTION d_q() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT count(*) FROM racefree_claims'`,
				`REVOKE EXECUTE ON FUNCTION d_q() FROM PUBLIC`, `GRANT EXECUTE ON FUNCTION d_q() TO ` + bound2,
				`CREATE FUNCTION d_r() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT d_q()'`,
				`ALTER FUNCTION d_r() OWNER TO ` + bound2, `REVOKE EXECUTE ON FUNCTION d_r() FROM PUBLIC`, `GRANT EXECUTE ON FUNCTION d_r() TO ` + bound,
				`CREATE FUNCTION d_p() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT d_r()'`,
				`ALTER FUNCTION d_p() OWNER TO ` + bound,
				`CREATE FUNCTION d_bdyn(q text) RETURNS void LANGUAGE plpgsql SECURITY DEFINER AS $$BEGIN EXECUTE q; END$$`,
				`ALTER FUNCTION d_bdyn(text) OWNER TO ` + bound},
			[]string{`."d_p"(), owned by ` + bound + `: `, `."d_r"() → `, `."d_q"() → `, `."d_bdyn"(q text), owned by ` + bound + `: `},
			[]string{`DROP FUNCTION d_q(), d_r()`}},
		{"a definer of a member of the table's owner while row-level security is not forced",
			[]string{`CREATE FUNCTION d_heir() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT count(*) FROM racefree_claims'`,
				`ALTER FUNCTION d_heir() OWNER TO ` + heir, `ALTER TABLE racefree_claims NO FORCE ROW LEVEL SECURITY`},
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
		n := 0
		for _, name := range c.names {
			n += strings.Count(name, ", owned by ")
		}
		if strings.Count(f.Detail, ", owned by ") != n {
			t.Fatalf("%s: detail %q does not name just %d function(s)", c.name, f.Detail, n)
		}
		want(t, check(t, owner, doctor.Options{Role: role}), doctor.DefinerEscapesRLS, doctor.Error)
		if su := check(t, app, doctor.Options{Role: "postgres"}); hasCode(su, doctor.DefinerEscapesRLS) {
			t.Fatalf("%s: a superuser is judged by role-is-superuser, not by definers: %+v", c.name, su.Findings)
		}
		if strings.Count(f.Fix, "SECURITY INVOKER;") != n {
			t.Fatalf("%s: fix %q", c.name, f.Fix)
		}
		exec(f.Fix)
		exec(c.after...)
		clean(c.name + ", after its fix")
	}
}
