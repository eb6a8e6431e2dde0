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
	owner, app, role, exec := roleFixture(t, testdb.NewDSN(t, racefree.Postgres), "_group", "_other")
	group, other := role+"_group", role+"_other"
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

	// A privilege two grantors granted is named once. (The owner's REVOKE
	// takes back its own grant only: the other stays, and so does the
	// finding, until the other grantor's grant option goes too.)
	var schema string
	if err := owner.SQL().QueryRow(`SELECT quote_ident(current_schema())`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	exec(`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + other)
	exec(`GRANT TRUNCATE ON racefree_sequences TO ` + other + ` WITH GRANT OPTION`)
	exec(`SET ROLE ` + other + `; GRANT TRUNCATE ON racefree_sequences TO ` + role + `; RESET ROLE`)
	exec(`GRANT TRUNCATE ON racefree_sequences TO ` + role)
	f := want(t, check(t, app, doctor.Options{}), doctor.PrivilegeEscapesRLS, doctor.Error)
	if names := "TRUNCATE on racefree_sequences to " + role; !strings.Contains(f.Detail, "("+names+")") {
		t.Fatalf("a privilege two grantors granted: detail %q does not name just %q", f.Detail, names)
	}
	exec(f.Fix)
	want(t, check(t, app, doctor.Options{}), doctor.PrivilegeEscapesRLS, doctor.Error)
	exec(`REVOKE GRANT OPTION FOR TRUNCATE ON racefree_sequences FROM ` + other + ` CASCADE`)
	none(t, check(t, app, doctor.Options{}), doctor.PrivilegeEscapesRLS, doctor.RLSNotJudged)
}

// roleFixture opens the PostgreSQL test database d (a schema of the
// shared database, or a database of its own) as its owner and as an
// application role, and returns both, the role's name, and exec, which
// runs each statement as the owner and fails the test at the first error.
// The roles named the application role's name with each of suffixes
// appended, which the test makes, are dropped with what they own.
func roleFixture(t *testing.T, d string, suffixes ...string) (owner, app *racefree.DB, role string, exec func(...string)) {
	t.Helper()
	owner = testdb.Open(t, d, nil)
	app = testdb.App(t, owner, d)
	if err := app.SQL().QueryRow(`SELECT current_user`).Scan(&role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		// The role's privileges in d, which may be a database of its own
		// that the role's own clean-up does not reach.
		_, _ = owner.SQL().ExecContext(ctx, `DROP OWNED BY `+role)
		for _, s := range suffixes {
			_, _ = owner.SQL().ExecContext(ctx, `DROP OWNED BY `+role+s+` CASCADE`)
			_, _ = owner.SQL().ExecContext(ctx, `DROP ROLE IF EXISTS `+role+s)
		}
	})
	return owner, app, role, func(qs ...string) {
		t.Helper()
		for _, q := range qs {
			if _, err := owner.SQL().Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
}
