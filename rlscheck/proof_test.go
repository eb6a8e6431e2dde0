package rlscheck_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/rlscheck"
)

// TestCheckPassesOnlyProvenPolicies seeds one policy set-up per case on a
// table of its own, checks it with and without --role and wants the
// verdict; then, as the application role with SET LOCAL
// racefree.tenant_id, reads and writes the table and wants the verdict to
// match what happens: a set-up that passes leaks nothing, and the cases
// marked leaky do leak (a tenant sees or writes another's row, or a
// transaction without a tenant sees a row). The policies are the ones that
// used to pass: they read the setting in the blessed form somewhere but do
// not restrict the tenant column to it.
func TestCheckPassesOnlyProvenPolicies(t *testing.T) {
	t.Parallel()
	const (
		g     = `NULLIF(current_setting('racefree.tenant_id', true), '')`
		guard = `tenant_id = ` + g
	)
	cases := []struct {
		name     string
		uuid     bool   // the tenant column is uuid (else text)
		policies string // %[1]s the application role, %[2]s another role
		want     rlscheck.Kind
		wantRole rlscheck.Kind // with --role; "-" for the same as want
		leaks    bool
	}{
		// Proven: these pass, and leak nothing.
		{name: "correct", policies: `CREATE POLICY p ON docs USING (` + guard + `) WITH CHECK (` + guard + `)`, wantRole: "-"},
		{name: "extra and conditions", policies: `CREATE POLICY p ON docs USING (` + guard + ` AND NOT archived AND id > 0) WITH CHECK (id > 0 AND ` + guard + `)`, wantRole: "-"},
		{name: "casts on both sides", uuid: true, policies: `CREATE POLICY p ON docs USING (tenant_id::text = ` + g + `::text) WITH CHECK (tenant_id::text = ` + g + `::text)`, wantRole: "-"},
		{name: "setting on the left", uuid: true, policies: `CREATE POLICY p ON docs USING (` + g + `::uuid = tenant_id)`, wantRole: "-"},
		{name: "sub-select of the setting", policies: `CREATE POLICY p ON docs USING (tenant_id = (SELECT ` + g + `))`, wantRole: "-"},
		{name: "or of two guarded arms", policies: `CREATE POLICY p ON docs USING ((` + guard + ` AND archived) OR (` + guard + ` AND NOT archived))`, wantRole: "-"},
		{name: "restrictive guard for public", policies: `CREATE POLICY open ON docs USING (true) WITH CHECK (true); CREATE POLICY guard ON docs AS RESTRICTIVE USING (` + guard + `)`, wantRole: "-"},
		{name: "restrictive guard for the same role", policies: `CREATE POLICY open ON docs TO %[1]s USING (true); CREATE POLICY guard ON docs AS RESTRICTIVE TO %[1]s, %[2]s USING (` + guard + `)`, wantRole: "-"},
		// Scoped: right for the application role, not for every role.
		// A restrictive guard for the application role alone does not
		// apply once it SET ROLEs to a group, where the open policy for
		// PUBLIC still does: not proven, with --role too.
		{name: "restrictive guard for the application role only", policies: `CREATE POLICY open ON docs USING (true) WITH CHECK (true); CREATE POLICY guard ON docs AS RESTRICTIVE TO %[1]s USING (` + guard + `)`, want: rlscheck.PolicyAlwaysTrue, wantRole: "-"},
		{name: "open policy for another role", policies: `CREATE POLICY p ON docs USING (` + guard + `); CREATE POLICY admin ON docs TO %[2]s USING (true)`, want: rlscheck.PolicyAlwaysTrue},
		// Not proven: reported, and (where marked) they leak.
		{name: "setting only tested not null", policies: `CREATE POLICY p ON docs USING (` + g + ` IS NOT NULL)`, want: rlscheck.PolicyNotProven, wantRole: "-", leaks: true},
		{name: "raw setting tested not null", policies: `CREATE POLICY p ON docs USING (current_setting('racefree.tenant_id', true) IS NOT NULL)`, want: rlscheck.PolicyNoNullIf, wantRole: "-", leaks: true},
		{name: "not equal", policies: `CREATE POLICY p ON docs USING (tenant_id <> ` + g + `)`, want: rlscheck.PolicyNotProven, wantRole: "-", leaks: true},
		{name: "or no tenant set", policies: `CREATE POLICY p ON docs USING (` + guard + ` OR ` + g + ` IS NULL)`, want: rlscheck.PolicyNotProven, wantRole: "-", leaks: true},
		{name: "or raw setting null", policies: `CREATE POLICY p ON docs USING (` + guard + ` OR current_setting('racefree.tenant_id', true) IS NULL)`, want: rlscheck.PolicyNoNullIf, wantRole: "-", leaks: true},
		{name: "or 1 = 1", policies: `CREATE POLICY p ON docs USING (` + guard + ` OR 1 = 1)`, want: rlscheck.PolicyAlwaysTrue, wantRole: "-", leaks: true},
		{name: "or a constant comparison", policies: `CREATE POLICY p ON docs USING (` + guard + ` OR 2 > 1)`, want: rlscheck.PolicyNotProven, wantRole: "-", leaks: true},
		{name: "or id > 0", policies: `CREATE POLICY p ON docs USING (` + guard + ` OR id > 0)`, want: rlscheck.PolicyNotProven, wantRole: "-", leaks: true},
		{name: "or true", policies: `CREATE POLICY p ON docs USING (` + guard + ` OR true)`, want: rlscheck.PolicyAlwaysTrue, wantRole: "-", leaks: true},
		{name: "like prefix", policies: `CREATE POLICY p ON docs USING (tenant_id LIKE ` + g + ` || '%%')`, want: rlscheck.PolicyNotProven, wantRole: "-", leaks: true},
		{name: "uuid as text like", uuid: true, policies: `CREATE POLICY p ON docs USING (tenant_id::text LIKE ` + g + `)`, want: rlscheck.PolicyNotProven, wantRole: "-"},
		{name: "restrictive guard for another role", policies: `CREATE POLICY open ON docs USING (true) WITH CHECK (true); CREATE POLICY guard ON docs AS RESTRICTIVE TO %[2]s USING (` + guard + `)`, want: rlscheck.PolicyAlwaysTrue, wantRole: "-", leaks: true},
		{name: "restrictive guard that does not prove", policies: `CREATE POLICY open ON docs USING (true) WITH CHECK (true); CREATE POLICY guard ON docs AS RESTRICTIVE USING (` + guard + ` OR id > 0)`, want: rlscheck.PolicyAlwaysTrue, wantRole: "-", leaks: true},
		{name: "restrictive guard for select only", policies: `CREATE POLICY open ON docs USING (true) WITH CHECK (true); CREATE POLICY guard ON docs AS RESTRICTIVE FOR SELECT USING (` + guard + `)`, want: rlscheck.PolicyAlwaysTrue, wantRole: "-", leaks: true},
		{name: "restrictive update guard beside an open insert", policies: `CREATE POLICY open ON docs USING (` + guard + `) WITH CHECK (true); CREATE POLICY guard ON docs AS RESTRICTIVE FOR UPDATE USING (` + guard + `)`, want: rlscheck.PolicyAlwaysTrue, wantRole: "-", leaks: true},
		{name: "column equal to itself", policies: `CREATE POLICY p ON docs USING (tenant_id = tenant_id)`, want: rlscheck.PolicyNoSetting, wantRole: "-", leaks: true},
		{name: "setting compared with another column", policies: `CREATE POLICY p ON docs USING (author = ` + g + `)`, want: rlscheck.PolicyNotProven, wantRole: "-", leaks: true},
		{name: "equality only inside not", policies: `CREATE POLICY p ON docs USING (NOT (tenant_id <> ` + g + `))`, want: rlscheck.PolicyNotProven, wantRole: "-"},
		{name: "not equal inside not", policies: `CREATE POLICY p ON docs USING (NOT (` + guard + `))`, want: rlscheck.PolicyNotProven, wantRole: "-", leaks: true},
		{name: "is not distinct from", policies: `CREATE POLICY p ON docs USING (tenant_id IS NOT DISTINCT FROM ` + g + `)`, want: rlscheck.PolicyNotProven, wantRole: "-", leaks: true},
		{name: "in a list", policies: `CREATE POLICY p ON docs USING (tenant_id IN (` + g + `, 'acme-corp'))`, want: rlscheck.PolicyNotProven, wantRole: "-", leaks: true},
		{name: "with check open", policies: `CREATE POLICY p ON docs USING (` + guard + `) WITH CHECK (true)`, want: rlscheck.PolicyAlwaysTrue, wantRole: "-", leaks: true},
		{name: "with check not proven", policies: `CREATE POLICY p ON docs USING (` + guard + `) WITH CHECK (` + guard + ` OR author = 'x')`, want: rlscheck.PolicyNotProven, wantRole: "-", leaks: true},
		{name: "insert policy not proven", policies: `CREATE POLICY p ON docs FOR SELECT USING (` + guard + `); CREATE POLICY i ON docs FOR INSERT WITH CHECK (tenant_id <> ` + g + `); CREATE POLICY u ON docs FOR UPDATE USING (` + guard + `); CREATE POLICY d ON docs FOR DELETE USING (` + guard + `)`, want: rlscheck.PolicyNotProven, wantRole: "-", leaks: true},
	}

	base := testdb.NewDSN(t, racefree.Postgres) // a schema for the roles' clean-up
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	suffix := randomHex()
	app, other := "rf_rls_papp_"+suffix, "rf_rls_pother_"+suffix
	for _, r := range []string{app, other} {
		if _, err := admin.Exec(`CREATE ROLE ` + r + ` NOLOGIN`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := admin.ExecContext(ctx, `DROP OWNED BY `+r+` CASCADE`); err != nil {
				t.Errorf("drop owned by %s: %v", r, err)
			}
			if _, err := admin.ExecContext(ctx, `DROP ROLE `+r); err != nil {
				t.Errorf("drop role %s: %v", r, err)
			}
		})
	}

	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			dsn := testdb.NewDSN(t, racefree.Postgres)
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			ctx := context.Background()
			var schema string
			if err := db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
				t.Fatal(err)
			}
			typ, a, b := "text", "acme", "acme-corp"
			if c.uuid {
				typ, a, b = "uuid", "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"
			}
			seed := `
CREATE TABLE docs (id bigint PRIMARY KEY, tenant_id ` + typ + `, author text, archived boolean NOT NULL DEFAULT false);
ALTER TABLE docs ENABLE ROW LEVEL SECURITY;
ALTER TABLE docs FORCE ROW LEVEL SECURITY;
GRANT USAGE ON SCHEMA ` + schema + ` TO ` + app + `;
GRANT SELECT, INSERT, UPDATE, DELETE ON docs TO ` + app + `;
INSERT INTO docs VALUES (1, '` + a + `', 'acme', false), (2, '` + b + `', 'acme', true), (3, NULL, NULL, false);
` + strings.NewReplacer("%[1]s", app, "%[2]s", other, "%%", "%").Replace(c.policies)
			if _, err := db.ExecContext(ctx, seed); err != nil {
				t.Fatalf("%s: %v", seed, err)
			}
			for _, role := range []string{"", app} {
				want := c.want
				if role != "" && c.wantRole != "-" {
					want = c.wantRole
				}
				rep, err := rlscheck.New(db).Check(ctx, rlscheck.Options{Role: role, Schemas: []string{schema}})
				if err != nil {
					t.Fatal(err)
				}
				var got []rlscheck.Kind
				for _, f := range rep.Findings {
					if strings.Contains(f.Object, `."docs"`) && !slices.Contains(got, f.Kind) { // the shared database's functions are other tests'
						got = append(got, f.Kind)
					}
					if f.Kind == rlscheck.PolicyNotProven && !strings.Contains(f.Problem, "(") {
						t.Errorf("policy_not_proven without the policy's text: %s", f.Problem)
					}
				}
				if wantKinds := []rlscheck.Kind{want}; want == "" && len(got) != 0 || want != "" && !slices.Equal(got, wantKinds) {
					t.Errorf("role %q: kinds %v, want %q: %+v", role, got, want, rep.Findings)
				}
			}
			leak, how := leaks(t, db, app, a, b)
			if leak != c.leaks {
				t.Errorf("leaks: %v (%s), want %v", leak, how, c.leaks)
			}
			if passes := c.wantRole == "" || c.wantRole == "-" && c.want == ""; leak && passes {
				t.Errorf("the application role's set-up leaks (%s) and passed", how)
			}
		})
	}
}

// leaks acts as role with SET LOCAL racefree.tenant_id and reports whether
// tenant a sees or writes a row that is not a's, or a transaction without a
// tenant (never set on the connection, or set to the empty string) sees any row. The pool
// is the test's own, so its connections start without the setting.
func leaks(t *testing.T, db *sql.DB, role, a, b string) (bool, string) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	exec := func(q string, args ...any) error {
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	}
	if err := exec(`SET LOCAL ROLE ` + role); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM docs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		return true, "a transaction on a connection that never set a tenant sees rows"
	}
	if err := exec(`SELECT set_config('racefree.tenant_id', $1, true)`, a); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM docs WHERE tenant_id::text IS DISTINCT FROM $1`, a).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		return true, "tenant a sees another's rows"
	}
	if err := exec(`SAVEPOINT w`); err != nil {
		t.Fatal(err)
	}
	err = exec(`INSERT INTO docs (id, tenant_id, author) VALUES (100, $1, 'x')`, b)
	if err == nil {
		return true, "tenant a inserts tenant b's row"
	}
	if !strings.Contains(err.Error(), "row-level security") {
		t.Fatalf("insert: %v", err)
	}
	if err := exec(`ROLLBACK TO SAVEPOINT w`); err != nil {
		t.Fatal(err)
	}
	if err := exec(`SELECT set_config('racefree.tenant_id', '', true)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM docs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		return true, "a transaction without a tenant sees rows"
	}
	return false, ""
}
