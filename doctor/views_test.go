package doctor_test

import (
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/doctor"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestPostgresViewEscapesRLS: a view or materialized view over a racefree
// table whose owner row-level security does not bind (a superuser, a role
// with BYPASSRLS), which the judged role can read (itself, through a role
// it is a member of, which a NOINHERIT role reaches by SET ROLE, as
// PUBLIC, one column of it, or through a view over it; a member of the
// table's owner where row-level security is not forced owns one too), is
// view-escapes-rls, an error naming the view, its owner and its
// tables; a plain view's fix (security_invoker) clears it. A view the
// role cannot read, one owned by a role row-level security binds, and one
// that reads as its caller are not; nor is any view for a superuser
// (role-is-superuser says the rest).
func TestPostgresViewEscapesRLS(t *testing.T) {
	t.Parallel()
	owner, app, role, exec := roleFixture(t, testdb.NewDSN(t, racefree.Postgres), "_group", "_bound", "_bypass", "_tables", "_heir")
	group, bound, bypass, tables, heir := role+"_group", role+"_bound", role+"_bypass", role+"_tables", role+"_heir"
	exec(`CREATE ROLE `+group+` NOLOGIN`, `CREATE ROLE `+bound+` NOLOGIN`, `CREATE ROLE `+bypass+` NOLOGIN BYPASSRLS`,
		`CREATE ROLE `+tables+` NOLOGIN`, `CREATE ROLE `+heir+` NOLOGIN IN ROLE `+tables,
		`GRANT `+group+` TO `+role,
		`GRANT SELECT ON racefree_claims, racefree_quotas TO `+bound+`, `+bypass)
	clean := func(what string) {
		t.Helper()
		if rep := check(t, app, doctor.Options{}); hasCode(rep, doctor.ViewEscapesRLS) || hasCode(rep, doctor.RLSNotJudged) {
			t.Fatalf("%s: %+v", what, rep.Findings)
		}
	}

	// Not findings: a superuser's view the role cannot read; a view a role
	// row-level security binds owns; a superuser's view that reads as its
	// caller.
	exec(`CREATE VIEW v_unread AS SELECT * FROM racefree_claims`,
		`CREATE VIEW v_bound AS SELECT * FROM racefree_claims`, `ALTER VIEW v_bound OWNER TO `+bound, `GRANT SELECT ON v_bound TO `+role,
		`CREATE VIEW v_invoker WITH (security_invoker = on) AS SELECT * FROM racefree_claims`, `GRANT SELECT ON v_invoker TO PUBLIC`,
		// A member of the table's owner while row-level security is
		// forced on it (the last case lifts FORCE).
		`ALTER TABLE racefree_quotas OWNER TO `+tables,
		`CREATE VIEW v_heir AS SELECT * FROM racefree_quotas`, `ALTER VIEW v_heir OWNER TO `+heir, `GRANT SELECT ON v_heir TO `+role)
	clean("views row-level security binds")

	for _, c := range []struct {
		name  string
		setup []string
		names string // in the detail
		fixed bool   // the finding's fix clears it
		after []string
	}{
		{"a superuser's view granted to the role",
			[]string{`CREATE VIEW v_all AS SELECT * FROM racefree_claims`, `GRANT SELECT ON v_all TO ` + role},
			"view v_all, owned by postgres, over racefree_claims", true, nil},
		{"a BYPASSRLS role's view, one column granted to a role it is a member of",
			[]string{`CREATE VIEW v_bypass AS SELECT c.key, q.key AS quota FROM racefree_claims c, racefree_quotas q`, `ALTER VIEW v_bypass OWNER TO ` + bypass, `GRANT SELECT (key) ON v_bypass TO ` + group},
			"view v_bypass, owned by " + bypass + ", over racefree_claims, racefree_quotas", true, nil},
		{"a view the role reads through a view over it",
			[]string{`CREATE VIEW v_inner AS SELECT * FROM racefree_quotas`, `CREATE VIEW v_outer AS SELECT * FROM v_inner`,
				`ALTER VIEW v_outer OWNER TO ` + bound, `GRANT SELECT ON v_inner TO ` + bound, `GRANT SELECT ON v_outer TO ` + role},
			"view v_inner, owned by postgres, over racefree_quotas", true, nil},
		{"a superuser's materialized view granted to PUBLIC",
			[]string{`CREATE MATERIALIZED VIEW m_all AS SELECT * FROM racefree_claims`, `GRANT SELECT ON m_all TO PUBLIC`},
			"materialized view m_all, owned by postgres, over racefree_claims", false, []string{`REVOKE SELECT ON m_all FROM PUBLIC`}},
		{"a view of a member of the table's owner while row-level security is not forced",
			[]string{`ALTER TABLE racefree_quotas NO FORCE ROW LEVEL SECURITY`},
			"view v_heir, owned by " + heir + ", over racefree_quotas", true,
			[]string{`ALTER TABLE racefree_quotas FORCE ROW LEVEL SECURITY`, `ALTER TABLE racefree_quotas OWNER TO postgres`}},
	} {
		exec(c.setup...)
		f := want(t, check(t, app, doctor.Options{}), doctor.ViewEscapesRLS, doctor.Error)
		if !strings.Contains(f.Detail, "("+c.names+")") {
			t.Fatalf("%s: detail %q does not name just %q", c.name, f.Detail, c.names)
		}
		want(t, check(t, owner, doctor.Options{Role: role}), doctor.ViewEscapesRLS, doctor.Error)
		if su := check(t, app, doctor.Options{Role: "postgres"}); hasCode(su, doctor.ViewEscapesRLS) {
			t.Fatalf("%s: a superuser is judged by role-is-superuser, not by views: %+v", c.name, su.Findings)
		}
		if c.fixed != (f.Fix != "") {
			t.Fatalf("%s: fix %q", c.name, f.Fix)
		}
		exec(f.Fix)
		exec(c.after...)
		clean(c.name + ", after its fix")
	}
}

func hasCode(rep doctor.Report, code string) bool {
	for _, f := range rep.Findings {
		if f.Code == code {
			return true
		}
	}
	return false
}
