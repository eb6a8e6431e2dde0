package doctor_test

import (
	"context"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/doctor"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestPostgresPrivilegeEscapesRLS: a privilege row-level security does not
// bind (TRUNCATE, TRIGGER, REFERENCES) on a racefree table is
// privilege-escapes-rls, an error, whether granted to the judged role
// itself, to a role it is a member of, or to PUBLIC, each table and
// grantee named with its privileges in the order TRUNCATE, TRIGGER,
// REFERENCES, and the fix the REVOKE that clears it. A grant of SELECT, a
// grant to a role the judged one is not a member of, and, for a superuser
// (role-is-superuser says the rest), another role's grant are not; a
// grant to PUBLIC is every role's.
func TestPostgresPrivilegeEscapesRLS(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	app := testdb.App(t, owner, d)
	var role string
	if err := app.SQL().QueryRow(`SELECT current_user`).Scan(&role); err != nil {
		t.Fatal(err)
	}
	group, other := role+"_group", role+"_other"
	exec := func(q string) {
		t.Helper()
		if _, err := owner.SQL().Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, r := range []string{group, other} {
			_, _ = owner.SQL().ExecContext(ctx, `DROP OWNED BY `+r)
			_, _ = owner.SQL().ExecContext(ctx, `DROP ROLE IF EXISTS `+r)
		}
	})
	exec(`CREATE ROLE ` + group + ` NOLOGIN`)
	exec(`CREATE ROLE ` + other + ` NOLOGIN`)
	exec(`GRANT ` + group + ` TO ` + role)
	// Not findings: SELECT, and a grant to a role the judged one is not in.
	exec(`GRANT SELECT ON racefree_claims TO ` + other)
	exec(`GRANT TRUNCATE ON racefree_claims TO ` + other)
	none(t, check(t, app, doctor.Options{}), doctor.PrivilegeEscapesRLS, doctor.RLSNotJudged)

	for _, c := range []struct {
		grant, names string
	}{
		{`GRANT TRUNCATE ON racefree_claims TO ` + role, "TRUNCATE on racefree_claims to " + role},
		{`GRANT REFERENCES, TRIGGER ON racefree_quotas TO ` + group, "TRIGGER, REFERENCES on racefree_quotas to " + group},
		{`GRANT TRUNCATE ON racefree_outbox TO PUBLIC`, "TRUNCATE on racefree_outbox to PUBLIC"},
	} {
		exec(c.grant)
		f := want(t, check(t, app, doctor.Options{}), doctor.PrivilegeEscapesRLS, doctor.Error)
		if !strings.Contains(f.Detail, "("+c.names+")") || strings.Contains(f.Detail, other) {
			t.Fatalf("%s: detail %q does not name just %q", c.grant, f.Detail, c.names)
		}
		// The same grant seen by the role named with Options.Role.
		want(t, check(t, owner, doctor.Options{Role: role}), doctor.PrivilegeEscapesRLS, doctor.Error)
		// A superuser is judged by its own grants and PUBLIC's, not by
		// every role's.
		if su := check(t, app, doctor.Options{Role: "postgres"}); strings.HasSuffix(c.names, "PUBLIC") {
			want(t, su, doctor.PrivilegeEscapesRLS, doctor.Error)
		} else {
			none(t, su, doctor.PrivilegeEscapesRLS, doctor.RLSNotJudged)
		}
		exec(f.Fix)
		none(t, check(t, app, doctor.Options{}), doctor.PrivilegeEscapesRLS, doctor.RLSNotJudged)
	}
}
