package rlscheck_test

import (
	"context"
	"strings"
	"testing"

	"github.com/racefree/racefree/rlscheck"
)

// TestCheckFindsRulesThatReachTenantTables: a rewrite rule on an ordinary
// table runs its action with the table owner's rights, so a rule that
// reads or writes a tenant table, directly, through a view
// (security_invoker or not) or through another table's rule, is
// rule_reaches_tenant_table naming what it reaches, with and without
// --role; so is a rule on a tenant table itself (what its action reads of
// its own table cannot be told from NEW and OLD). A rule over other tables
// alone is no finding. The first case leaks: the application role, with no
// tenant set, inserts into the rule's table and reads every tenant's rows
// back; the fix (DROP RULE) clears each finding.
func TestCheckFindsRulesThatReachTenantTables(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, seed string
		reaches    string // in the problem of the rule leak; "" for no finding
		count      int    // findings; 0 means 1
		on         string // the table of rule leak; "" means probe
	}{
		{name: "a rule that copies a tenant table", reaches: `"public"."orders"`,
			seed: `CREATE RULE leak AS ON INSERT TO probe DO INSTEAD INSERT INTO sink SELECT id, tenant_id::text FROM orders`},
		{name: "a rule that writes a tenant table", reaches: `"public"."notes"`,
			seed: `CREATE RULE leak AS ON INSERT TO probe DO ALSO INSERT INTO notes VALUES (NEW.x, 'someone else', 'x')`},
		{name: "a rule through a security_invoker view", reaches: `"public"."orders"`,
			seed: `CREATE RULE leak AS ON UPDATE TO probe DO ALSO INSERT INTO sink SELECT 1, tenant_id::text FROM order_totals`},
		{name: "a rule through another table's rule", reaches: `"public"."orders"`, count: 2, // hop too
			seed: `CREATE TABLE relay (x int); CREATE RULE hop AS ON INSERT TO relay DO INSTEAD INSERT INTO sink SELECT id, tenant_id::text FROM orders;
CREATE RULE leak AS ON INSERT TO probe DO INSTEAD INSERT INTO relay VALUES (NEW.x)`},
		{name: "a rule on a tenant table", reaches: "its own tenant table", on: "notes",
			seed: `CREATE RULE leak AS ON DELETE TO notes DO INSTEAD NOTHING`},
		{name: "a rule over other tables", seed: `CREATE RULE leak AS ON INSERT TO probe DO ALSO INSERT INTO sink SELECT NEW.x, code FROM countries`},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			// probe and sink belong to the superuser that runs the tests.
			f.exec(t, `CREATE TABLE probe (x int); CREATE TABLE sink (id bigint, body text);
INSERT INTO orders VALUES (1, '00000000-0000-0000-0000-00000000000a', 1), (2, '00000000-0000-0000-0000-00000000000b', 2);
`+c.seed+`;
GRANT INSERT, UPDATE ON probe TO `+f.app+`; GRANT SELECT ON sink TO `+f.app)
			for _, role := range []string{f.app, ""} {
				var fds []rlscheck.Finding
				for _, fd := range f.check(t, rlscheck.Options{Role: role}).Findings {
					if fd.Kind != rlscheck.PolicyAlwaysTrue { // admin_all, without a role
						fds = append(fds, fd)
					}
				}
				if c.reaches == "" {
					if len(fds) != 0 {
						t.Fatalf("role %q: %+v, want none", role, fds)
					}
					continue
				}
				count, found, on := max(c.count, 1), false, c.on
				if on == "" {
					on = "probe"
				}
				for _, fd := range fds {
					if fd.Kind != rlscheck.RuleReachesTenantTable {
						t.Fatalf("role %q: %+v, want %s only", role, fds, rlscheck.RuleReachesTenantTable)
					}
					found = found || fd.Object == `rule "leak" on "public"."`+on+`"` && strings.Contains(fd.Problem, c.reaches)
				}
				if len(fds) != count || !found {
					t.Fatalf("role %q: %+v, want %d %s, one on rule leak reaching %s", role, fds, count, rlscheck.RuleReachesTenantTable, c.reaches)
				}
			}
			if c.name == "a rule that copies a tenant table" {
				if n := leakedThroughRule(t, f); n != 2 {
					t.Fatalf("the application role without a tenant read %d tenants' rows through the rule, want 2", n)
				}
			}
			if c.reaches == "" {
				return
			}
			for _, fd := range f.check(t, rlscheck.Options{Role: f.app}).Findings {
				f.exec(t, fd.Fix)
			}
			if rep := f.check(t, rlscheck.Options{Role: f.app}); len(rep.Findings) != 0 {
				t.Fatalf("after the fix: %+v", rep.Findings)
			}
		})
	}
}

// leakedThroughRule inserts into probe as the application role with no
// tenant set and returns how many tenants' rows it then reads from sink.
func leakedThroughRule(t *testing.T, f *fixture) int {
	t.Helper()
	ctx := context.Background()
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SET LOCAL ROLE `+f.app); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO probe VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(DISTINCT body) FROM sink`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
