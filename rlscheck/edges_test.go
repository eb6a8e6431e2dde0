package rlscheck_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/ident"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/rlscheck"
)

// The boundary matrix of rls-check (docs/rlscheck.md, "edges"): each test
// shares one fixture database and walks its edges in turn.

// only wants exactly n findings, each of kind want on an object containing
// obj.
func only(t *testing.T, what string, rep *rlscheck.Report, want []rlscheck.Kind, n int, obj string) {
	t.Helper()
	if got := kinds(rep); !slices.Equal(got, want) || len(rep.Findings) != n {
		t.Fatalf("%s: kinds %v in %d findings, want %v in %d: %+v", what, got, len(rep.Findings), want, n, rep.Findings)
	}
	for _, fd := range rep.Findings {
		if !strings.Contains(fd.Object, obj) {
			t.Fatalf("%s: finding on %s, want one on %s: %+v", what, fd.Object, obj, fd)
		}
	}
}

// TestEdgesIsolation: a policy open in one command alone (SELECT, INSERT,
// UPDATE's USING, UPDATE's WITH CHECK, DELETE) is found in that command;
// a partition without RLS of its own is found although its parent is
// correct (a partition queried directly applies only its own policies);
// a table of a second schema with the same name as a correct one is judged
// by its own policies, and only when that schema is checked.
func TestEdgesIsolation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	opts := rlscheck.Options{Role: f.app}

	// One command open, the other three proven.
	for _, c := range []struct{ policy, clause string }{
		{"notes_select", "USING"},
		{"notes_insert", "WITH CHECK"},
		{"notes_update", "USING"},
		{"notes_update", "WITH CHECK"},
		{"notes_delete", "USING"},
	} {
		what := c.policy + " " + c.clause
		f.exec(t, fmt.Sprintf(`ALTER POLICY %s ON notes %s (true)`, c.policy, c.clause))
		rep := f.check(t, opts)
		only(t, what, rep, []rlscheck.Kind{rlscheck.PolicyAlwaysTrue}, 1, `"`+c.policy+`"`)
		if p := rep.Findings[0].Problem; !strings.Contains(p, "policy's "+c.clause+" is true for every row") {
			t.Errorf("%s: problem %q does not name the clause", what, p)
		}
		f.exec(t, rep.Findings[0].Fix)
		if rep := f.check(t, opts); len(rep.Findings) != 0 {
			t.Fatalf("%s: after the fix: %+v", what, rep.Findings)
		}
	}

	// A correct partitioned table whose partition has no RLS of its own.
	f.exec(t, `
CREATE TABLE ledger (id bigint NOT NULL, tenant_id text NOT NULL) PARTITION BY RANGE (id);
ALTER TABLE ledger ENABLE ROW LEVEL SECURITY;
ALTER TABLE ledger FORCE ROW LEVEL SECURITY;
CREATE POLICY ledger_tenant ON ledger USING (`+guardText+`) WITH CHECK (`+guardText+`);
CREATE TABLE ledger_1 PARTITION OF ledger FOR VALUES FROM (0) TO (1000);
ALTER TABLE ledger OWNER TO `+f.owner+`;
ALTER TABLE ledger_1 OWNER TO `+f.owner)
	rep := f.check(t, opts)
	only(t, "partition", rep, []rlscheck.Kind{rlscheck.RLSDisabled, rlscheck.RLSNotForced, rlscheck.PolicyMissing}, 6, `."ledger_1"`)
	if len(rep.Tables) != 5 {
		t.Fatalf("tenant tables %v, want the partitioned table and its partition among them", rep.Tables)
	}
	for _, fd := range rep.Findings {
		f.exec(t, fd.Fix)
	}
	if rep := f.check(t, opts); len(rep.Findings) != 0 {
		t.Fatalf("partition: after the fixes: %+v", rep.Findings)
	}

	// A second schema with a table of the same name, without RLS.
	schema := rep.Schemas[0]
	f.exec(t, `CREATE SCHEMA edge_b; CREATE TABLE edge_b.notes (id bigint PRIMARY KEY, tenant_id text NOT NULL)`)
	if rep := f.check(t, opts); len(rep.Findings) != 0 || len(rep.Tables) != 5 {
		t.Fatalf("edge_b not asked for: %+v", rep)
	}
	two := rlscheck.Options{Role: f.app, Schemas: []string{schema, "edge_b"}}
	rep = f.check(t, two)
	only(t, "second schema", rep, []rlscheck.Kind{rlscheck.RLSDisabled, rlscheck.RLSNotForced, rlscheck.PolicyMissing}, 6, `"edge_b"."notes"`)
	if len(rep.Tables) != 6 {
		t.Fatalf("tenant tables %v, want 6", rep.Tables)
	}
	// Enabled and forced, still without a policy of its own: the other
	// schema's notes policies are not its.
	f.exec(t, rep.Findings[0].Fix)
	f.exec(t, rep.Findings[1].Fix)
	only(t, "second schema, enabled", f.check(t, two), []rlscheck.Kind{rlscheck.PolicyMissing}, 4, `"edge_b"."notes"`)
	for _, fd := range rep.Findings[2:] {
		f.exec(t, fd.Fix)
	}
	if rep := f.check(t, two); len(rep.Findings) != 0 {
		t.Fatalf("second schema: after the fixes: %+v", rep.Findings)
	}
}

// TestEdgesBounds: names of exactly 63 bytes (PostgreSQL's limit, in
// multi-byte characters) for the tenant column, a table, a policy and the
// role are checked and quoted, one byte more is an InputError; an OR of
// five arms is proven only when every arm is, wherever the unguarded one
// stands; a long AND and many policies on one table are judged each.
func TestEdgesBounds(t *testing.T) {
	t.Parallel()
	f := setup(t)
	q := func(s string) string {
		t.Helper()
		v, err := ident.Quote(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	col := "t" + strings.Repeat("é", 31)
	tbl := "Tab " + strings.Repeat("é", 29) + "x"
	pol := strings.Repeat("p", 62) + `"`
	role := "rf_rls_e_" + randomHex()
	role += strings.Repeat("r", 63-len(role))
	for _, s := range []string{col, tbl, pol, role} {
		if len(s) != 63 {
			t.Fatalf("%q is %d bytes, want 63", s, len(s))
		}
	}
	f.exec(t, `CREATE ROLE `+q(role)+` NOLOGIN`)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := f.db.ExecContext(ctx, `DROP OWNED BY `+q(role)+` CASCADE; DROP ROLE `+q(role)); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	guard := q(col) + ` = NULLIF(current_setting('racefree.tenant_id', true), '')`
	f.exec(t, `
CREATE TABLE `+q(tbl)+` (id bigint PRIMARY KEY, `+q(col)+` text NOT NULL);
ALTER TABLE `+q(tbl)+` ENABLE ROW LEVEL SECURITY;
ALTER TABLE `+q(tbl)+` FORCE ROW LEVEL SECURITY;
CREATE POLICY `+q(pol)+` ON `+q(tbl)+` TO `+q(role)+` USING (`+guard+`) WITH CHECK (`+guard+`);
ALTER TABLE `+q(tbl)+` OWNER TO `+f.owner)
	opts := rlscheck.Options{TenantColumn: col, Role: role}
	rep := f.check(t, opts)
	if len(rep.Findings) != 0 || len(rep.Tables) != 1 || !strings.HasSuffix(rep.Tables[0], "."+q(tbl)) {
		t.Fatalf("63-byte names: %+v", rep)
	}
	f.exec(t, `ALTER POLICY `+q(pol)+` ON `+q(tbl)+` USING (`+guard+` OR id > 0)`)
	rep = f.check(t, opts)
	only(t, "63-byte names, open", rep, []rlscheck.Kind{rlscheck.PolicyNotProven}, 1, q(pol))
	if !strings.Contains(rep.Findings[0].Fix, q(col)) {
		t.Errorf("fix %q does not quote the column", rep.Findings[0].Fix)
	}
	f.exec(t, rep.Findings[0].Fix)
	if rep := f.check(t, opts); len(rep.Findings) != 0 {
		t.Fatalf("63-byte names: after the fix: %+v", rep.Findings)
	}
	for _, o := range []rlscheck.Options{
		{TenantColumn: col + "x", Role: role},
		{TenantColumn: col, Role: role + "x"},
		{TenantColumn: col, Role: role, Schemas: []string{rep.Schemas[0] + strings.Repeat("s", 64-len(rep.Schemas[0]))}},
	} {
		if _, err := rlscheck.New(f.db).Check(context.Background(), o); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("64 bytes %+v: %v, want an InputError", o, err)
		}
	}

	// OR arms: five, each guarded, is proven; an unguarded one anywhere is
	// not.
	app := rlscheck.Options{Role: f.app}
	arms := []string{"id > 0", "id < 0", "body IS NULL", "id = 0", "body = 'x'"}
	guarded := make([]string, len(arms))
	for i, a := range arms {
		guarded[i] = "(" + guardText + " AND " + a + ")"
	}
	f.exec(t, `ALTER POLICY notes_select ON notes USING (`+strings.Join(guarded, " OR ")+`)`)
	if rep := f.check(t, app); len(rep.Findings) != 0 {
		t.Fatalf("five guarded arms: %+v", rep.Findings)
	}
	for i := range arms {
		open := slices.Clone(guarded)
		open[i] = "(" + arms[i] + ")"
		f.exec(t, `ALTER POLICY notes_select ON notes USING (`+strings.Join(open, " OR ")+`)`)
		only(t, fmt.Sprintf("arm %d of 5 unguarded", i+1), f.check(t, app), []rlscheck.Kind{rlscheck.PolicyNotProven}, 1, `"notes_select"`)
	}
	// A long AND with the guard last is proven.
	var conj []string
	for i := range 40 {
		conj = append(conj, fmt.Sprintf("id <> %d", i))
	}
	f.exec(t, `ALTER POLICY notes_select ON notes USING (`+strings.Join(conj, " AND ")+` AND `+guardText+`)`)
	if rep := f.check(t, app); len(rep.Findings) != 0 {
		t.Fatalf("a long AND: %+v", rep.Findings)
	}

	// Many policies: 60 proven SELECT policies and one not, in the middle.
	var many strings.Builder
	for i := range 61 {
		expr := guardText
		if i == 37 {
			expr += " OR id > 0"
		}
		fmt.Fprintf(&many, "CREATE POLICY notes_sel_%02d ON notes FOR SELECT USING (%s AND id <> %d);\n", i, expr, i)
	}
	f.exec(t, many.String())
	rep = f.check(t, app)
	only(t, "61 policies", rep, []rlscheck.Kind{rlscheck.PolicyNotProven}, 1, `"notes_sel_37"`)
}

// TestEdgesCancel: a check whose context is cancelled, before it starts or
// while it waits on a lock, gives no report and the context's error, never
// a verdict, and is not called a timeout.
func TestEdgesCancel(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := rlscheck.New(f.db).Check(ctx, rlscheck.Options{Role: f.app})
	if rep != nil || !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "timed out") {
		t.Fatalf("cancelled before: report %+v, err %v; want no report and context.Canceled", rep, err)
	}

	// Held up by a migration's lock, then cancelled.
	bg := context.Background()
	tx, err := f.db.BeginTx(bg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(bg, `LOCK TABLE orders IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(bg)
	defer cancel()
	type result struct {
		rep *rlscheck.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := rlscheck.New(f.db).Check(ctx, rlscheck.Options{Role: f.app})
		done <- result{rep, err}
	}()
	// Wait until the check waits on the lock.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := f.db.QueryRowContext(bg, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("the check ended before it waited on the lock: %+v, %v", r.rep, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the check never waited on the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case r := <-done:
		if r.rep != nil || !errors.Is(r.err, context.Canceled) || strings.Contains(r.err.Error(), "timed out") {
			t.Fatalf("cancelled while held: report %+v, err %v; want no report and context.Canceled", r.rep, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the check did not end on cancel")
	}
}

// TestAViewOverTwoTablesIsOneFinding: a view without security_invoker
// that reads two tenant tables is one ViewNotInvoker finding naming both,
// not one per table; a second such view, created after an invoker view,
// is a finding of its own, not folded into the view before it.
func TestAViewOverTwoTablesIsOneFinding(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE VIEW orders_and_notes AS SELECT o.tenant_id FROM orders AS o JOIN notes AS n ON true;
CREATE VIEW zz_all_notes AS SELECT * FROM notes`)
	rep := f.check(t, rlscheck.Options{Role: f.app})
	var views []rlscheck.Finding
	for _, fd := range rep.Findings {
		if fd.Kind == rlscheck.ViewNotInvoker {
			views = append(views, fd)
		}
	}
	if len(views) != 2 || len(rep.Findings) != 2 {
		t.Fatalf("%d ViewNotInvoker findings in %d, want 2 in 2 (one per view): %+v", len(views), len(rep.Findings), rep.Findings)
	}
	for _, fd := range views {
		if strings.Contains(fd.Object, "orders_and_notes") && !(strings.Contains(fd.Problem, "orders") && strings.Contains(fd.Problem, "notes")) {
			t.Errorf("the view over two tables names %q, want both", fd.Problem)
		}
	}
	if !strings.Contains(views[0].Object+views[1].Object, "zz_all_notes") {
		t.Errorf("the second view has no finding of its own: %+v", views)
	}
}

// TestADefinerReadingAMaterializedViewIsFollowed: a SECURITY DEFINER
// function that reads a materialized view over a tenant table reaches
// the table, through the view: it is a finding naming that path, beside
// the materialized view's own.
func TestADefinerReadingAMaterializedViewIsFollowed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE MATERIALIZED VIEW order_snapshot AS SELECT * FROM orders;
CREATE FUNCTION snapshot_count() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS 'SELECT count(*) FROM public.order_snapshot'`)
	rep := f.check(t, rlscheck.Options{Role: f.app})
	var definer *rlscheck.Finding
	for i, fd := range rep.Findings {
		if fd.Kind == rlscheck.DefinerReadsTenantTable {
			definer = &rep.Findings[i]
		}
	}
	if definer == nil || !strings.Contains(definer.Problem, "order_snapshot") || !strings.Contains(definer.Problem, "orders") {
		t.Fatalf("no finding naming the path through the materialized view: %+v", rep.Findings)
	}
}

// definerFindings checks as the app role and returns the findings about
// SECURITY DEFINER functions.
func definerFindings(t *testing.T, f *fixture) []rlscheck.Finding {
	t.Helper()
	var fds []rlscheck.Finding
	for _, fd := range f.check(t, rlscheck.Options{Role: f.app}).Findings {
		if fd.Kind == rlscheck.DefinerReadsTenantTable || fd.Kind == rlscheck.DefinerNotFollowed {
			fds = append(fds, fd)
		}
	}
	return fds
}

// TestADefinerWhoseSQLBodyDoesNotParseIsNotFollowed: PostgreSQL keeps a
// SQL body it never parsed when check_function_bodies is off at CREATE
// time; a SECURITY DEFINER function with such a body (one that names a
// tenant table, besides) is security_definer_not_followed, saying why,
// never a pass; SECURITY INVOKER clears it.
func TestADefinerWhoseSQLBodyDoesNotParseIsNotFollowed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `BEGIN;
SET LOCAL check_function_bodies = off;
CREATE FUNCTION api_broken() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT count(*) FROM orders WHERE';
COMMIT`)
	fds := definerFindings(t, f)
	if len(fds) != 1 || fds[0].Kind != rlscheck.DefinerNotFollowed || !strings.HasSuffix(fds[0].Object, `."api_broken"()`) ||
		!strings.Contains(fds[0].Problem, `."api_broken"(): its SQL body does not parse: `) {
		t.Fatalf("%+v, want one %s on api_broken saying its SQL body does not parse", fds, rlscheck.DefinerNotFollowed)
	}
	f.exec(t, fds[0].Fix)
	if fds := definerFindings(t, f); len(fds) != 0 {
		t.Fatalf("after the fix: %+v", fds)
	}
}

// TestADefinerInALanguageItCannotReadIsNotFollowed: a SECURITY DEFINER
// function of its own in LANGUAGE internal (no extension's: created here)
// is security_definer_not_followed naming the language, not taken as
// reading nothing; SECURITY INVOKER clears it.
func TestADefinerInALanguageItCannotReadIsNotFollowed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE FUNCTION api_add(a integer, b integer) RETURNS integer LANGUAGE internal IMMUTABLE STRICT SECURITY DEFINER AS 'int4pl';
CREATE VIEW sums WITH (security_invoker = true) AS SELECT api_add(total, 1) AS total FROM orders`)
	fds := definerFindings(t, f)
	if len(fds) != 1 || fds[0].Kind != rlscheck.DefinerNotFollowed || !strings.HasSuffix(fds[0].Object, `."api_add"(a integer, b integer)`) ||
		!strings.Contains(fds[0].Problem, `."api_add"(a integer, b integer): written in internal, which rls-check cannot read`) {
		t.Fatalf("%+v, want one %s on api_add naming its language", fds, rlscheck.DefinerNotFollowed)
	}
	f.exec(t, fds[0].Fix)
	if fds := definerFindings(t, f); len(fds) != 0 {
		t.Fatalf("after the fix: %+v", fds)
	}
}

// TestADefinerCallingASchemaQualifiedFunctionIsFollowed: two schemas hold
// a function of the same name, only one of which reads a tenant table. A
// definer calling the one that does by its qualified name is followed
// there, even with a search path that does not hold it; a definer calling
// the other by its qualified name (no SET search_path, where an
// unqualified name would resolve anywhere), or by its name under a search
// path pinned to its schema, is no finding.
func TestADefinerCallingASchemaQualifiedFunctionIsFollowed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE SCHEMA defa; CREATE SCHEMA defb;
CREATE FUNCTION defa.tally() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM public.orders';
CREATE FUNCTION defb.tally() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM public.countries';
CREATE FUNCTION api_a() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS 'SELECT defa.tally()';
CREATE FUNCTION api_b() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT defb.tally()';
CREATE FUNCTION api_c() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER SET search_path = defb AS 'SELECT tally()'`)
	fds := definerFindings(t, f)
	const path = `"public"."api_a"() → "defa"."tally"() → "public"."orders"`
	if len(fds) != 1 || fds[0].Kind != rlscheck.DefinerReadsTenantTable || fds[0].Object != `"public"."api_a"()` || !strings.Contains(fds[0].Problem, path) {
		t.Fatalf("%+v, want one %s on api_a naming %s", fds, rlscheck.DefinerReadsTenantTable, path)
	}
	f.exec(t, fds[0].Fix)
	if fds := definerFindings(t, f); len(fds) != 0 {
		t.Fatalf("after the fix: %+v", fds)
	}
}

// TestEdgesDefinerCallsIntoASchemaOfFunctionsOnly: a SECURITY DEFINER
// function without SET search_path calls a helper by its bare name, and the
// helper lives in a schema that holds functions and no table (the caller's
// search path, say ALTER ROLE … SET search_path = public, api_fns, finds
// it there). The unqualified call may resolve to that schema, so the
// helper is followed to the tenant table it reads; a helper of that schema
// that reads no tenant table is no finding.
func TestEdgesDefinerCallsIntoASchemaOfFunctionsOnly(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE SCHEMA api_fns;
CREATE FUNCTION api_fns.tally() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM public.orders';
CREATE FUNCTION api_fns.codes() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM public.countries';
BEGIN;
SET LOCAL search_path = public, api_fns;
CREATE FUNCTION public.api_tally() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT tally()';
CREATE FUNCTION public.api_codes() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT codes()';
COMMIT`)
	fds := definerFindings(t, f)
	const path = `"public"."api_tally"() → "api_fns"."tally"() → "public"."orders"`
	if len(fds) != 1 || fds[0].Kind != rlscheck.DefinerReadsTenantTable || fds[0].Object != `"public"."api_tally"()` || !strings.Contains(fds[0].Problem, path) {
		t.Fatalf("%+v, want one %s on api_tally naming %s", fds, rlscheck.DefinerReadsTenantTable, path)
	}
	f.exec(t, fds[0].Fix)
	if fds := definerFindings(t, f); len(fds) != 0 {
		t.Fatalf("after the fix: %+v", fds)
	}
}

// findingsOf returns the findings of kind k.
func findingsOf(rep *rlscheck.Report, k rlscheck.Kind) []rlscheck.Finding {
	var fds []rlscheck.Finding
	for _, fd := range rep.Findings {
		if fd.Kind == k {
			fds = append(fds, fd)
		}
	}
	return fds
}

// TestEdgesFindingsWithAndWithoutRole: the findings that name the role
// name it with --role and only then. A missing policy is one "that applies
// to" the role with it, and plainly missing without; a materialized view's
// fix revokes from PUBLIC and the role with it (after the fix the role,
// granted SELECT directly and through PUBLIC, can no longer read it), and
// from PUBLIC alone without (a fix that runs).
func TestEdgesFindingsWithAndWithoutRole(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `DROP POLICY notes_delete ON notes`)
	for _, c := range []struct {
		opts rlscheck.Options
		want string
	}{
		{rlscheck.Options{Role: f.app}, `no permissive policy for DELETE that applies to "` + f.app + `": `},
		{rlscheck.Options{}, `no permissive policy for DELETE: `},
	} {
		fds := findingsOf(f.check(t, c.opts), rlscheck.PolicyMissing)
		if len(fds) != 1 || !strings.HasPrefix(fds[0].Problem, c.want) {
			t.Fatalf("role %q: %+v, want one %s saying %q", c.opts.Role, fds, rlscheck.PolicyMissing, c.want)
		}
	}

	canRead := func(who string) bool {
		t.Helper()
		var ok bool
		if err := f.db.QueryRowContext(context.Background(), `SELECT has_table_privilege($1, 'order_snapshot', 'SELECT')`, who).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	publicCanRead := func() bool {
		t.Helper()
		var n int
		if err := f.db.QueryRowContext(context.Background(), `SELECT count(*) FROM aclexplode((SELECT relacl FROM pg_class WHERE oid = 'order_snapshot'::regclass)) WHERE grantee = 0`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	f.exec(t, `CREATE MATERIALIZED VIEW order_snapshot AS SELECT * FROM orders;
GRANT USAGE ON SCHEMA public TO `+f.app+`;
GRANT SELECT ON order_snapshot TO PUBLIC;
GRANT SELECT ON order_snapshot TO `+f.app)
	if !canRead(f.app) || !publicCanRead() {
		t.Fatal("the grants did not take")
	}
	fds := findingsOf(f.check(t, rlscheck.Options{Role: f.app}), rlscheck.MaterializedView)
	if len(fds) != 1 || !strings.Contains(fds[0].Fix, `FROM PUBLIC, "`+f.app+`";`) {
		t.Fatalf("with the role: %+v, want one %s whose fix revokes from PUBLIC and %s", fds, rlscheck.MaterializedView, f.app)
	}
	f.exec(t, fds[0].Fix)
	if canRead(f.app) || publicCanRead() {
		t.Fatalf("after the fix %q, %s or PUBLIC can still read the materialized view", fds[0].Fix, f.app)
	}

	f.exec(t, `GRANT SELECT ON order_snapshot TO PUBLIC`)
	fds = findingsOf(f.check(t, rlscheck.Options{}), rlscheck.MaterializedView)
	if len(fds) != 1 || !strings.HasPrefix(fds[0].Fix, `REVOKE ALL ON "public"."order_snapshot" FROM PUBLIC;`) {
		t.Fatalf("without a role: %+v, want one %s whose fix revokes from PUBLIC", fds, rlscheck.MaterializedView)
	}
	f.exec(t, fds[0].Fix)
	if publicCanRead() {
		t.Fatalf("after the fix %q, PUBLIC can still read the materialized view", fds[0].Fix)
	}
}

// TestEdgesNotProvenQuotesTheOpenClause: a policy with a USING and a WITH
// CHECK, one of them left open, is policy_not_proven quoting the open
// clause's own text, whichever of the two it is.
func TestEdgesNotProvenQuotesTheOpenClause(t *testing.T) {
	t.Parallel()
	f := setup(t)
	opts := rlscheck.Options{Role: f.app}
	for _, c := range []struct {
		alter, clause, want, notWant string
	}{
		{`ALTER POLICY notes_update ON notes USING (` + guardText + ` OR id > 0)`, "USING", "(id > 0)", "body = "},
		{`ALTER POLICY notes_update ON notes USING (` + guardText + `) WITH CHECK (` + guardText + ` OR body = 'x')`, "WITH CHECK", "(body = 'x'::text)", "id > 0"},
	} {
		f.exec(t, c.alter)
		rep := f.check(t, opts)
		only(t, c.clause, rep, []rlscheck.Kind{rlscheck.PolicyNotProven}, 1, `"notes_update"`)
		p := rep.Findings[0].Problem
		if !strings.Contains(p, "policy's "+c.clause+" (") || !strings.Contains(p, c.want) || strings.Contains(p, c.notWant) {
			t.Fatalf("%s open: problem %q, want it to quote %s with %s", c.clause, p, c.clause, c.want)
		}
	}
}

// TestEdgesPolicyNameAtTheLimit: the policies a missing-policy fix creates
// are named <table>_tenant_<command>, the table part cut only when the
// whole would pass PostgreSQL's 63 bytes: a table name of 49 bytes gives
// names of exactly 63, kept whole; one of 50 is cut by one byte; one of 50
// ending in a two-byte character loses the whole character. Each fix runs
// and creates the policy under the name it says.
func TestEdgesPolicyNameAtTheLimit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	opts := rlscheck.Options{Role: f.app}
	for _, c := range []struct{ table, part string }{
		{"t" + strings.Repeat("a", 48), "t" + strings.Repeat("a", 48)},
		{"u" + strings.Repeat("b", 49), "u" + strings.Repeat("b", 48)},
		{"v" + strings.Repeat("c", 47) + "é", "v" + strings.Repeat("c", 47)},
	} {
		if len(c.table) < 49 || len(c.table) > 50 {
			t.Fatalf("%q is %d bytes", c.table, len(c.table))
		}
		f.exec(t, `CREATE TABLE `+c.table+` (id bigint PRIMARY KEY, tenant_id text NOT NULL);
ALTER TABLE `+c.table+` ENABLE ROW LEVEL SECURITY;
ALTER TABLE `+c.table+` FORCE ROW LEVEL SECURITY;
ALTER TABLE `+c.table+` OWNER TO `+f.owner)
		rep := f.check(t, opts)
		only(t, c.table, rep, []rlscheck.Kind{rlscheck.PolicyMissing}, 4, `."`+c.table+`"`)
		for _, fd := range rep.Findings {
			f.exec(t, fd.Fix)
		}
		var want []string
		for _, cmd := range []string{"delete", "insert", "select", "update"} {
			want = append(want, c.part+"_tenant_"+cmd)
		}
		if got := policyNames(t, f, c.table); !slices.Equal(got, want) {
			t.Fatalf("%s (%d bytes): the fixes made policies %q, want %q", c.table, len(c.table), got, want)
		}
		if rep := f.check(t, opts); len(rep.Findings) != 0 {
			t.Fatalf("%s: after the fixes: %+v", c.table, rep.Findings)
		}
	}
}

// policyNames returns the names of table's policies, sorted.
func policyNames(t *testing.T, f *fixture, table string) []string {
	t.Helper()
	return testdb.Strings(t, f.db, `SELECT polname FROM pg_policy WHERE polrelid = $1::regclass ORDER BY polname`, table)
}

// TestEdgesCastsAroundTheGuard: a policy whose guard is cast to a type of
// the user's, and from there to boolean (by a cast written out, or by the
// assignment cast PostgreSQL applies to a policy's expression), admits
// whatever that type's cast to boolean says: here every row. It is
// policy_not_proven, and it leaks; so is a type of the user's named like
// PostgreSQL's own, "boolean" or bool in another schema (pg_get_expr
// prints PostgreSQL's as boolean). A guard cast through text and back is
// reported too (rls-check does not follow casts), though it leaks nothing;
// a cast to PostgreSQL's boolean itself passes.
func TestEdgesCastsAroundTheGuard(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `
CREATE TABLE docs (id bigint PRIMARY KEY, tenant_id text, author text, archived boolean NOT NULL DEFAULT false);
ALTER TABLE docs ENABLE ROW LEVEL SECURITY;
ALTER TABLE docs FORCE ROW LEVEL SECURITY;
ALTER TABLE docs OWNER TO `+f.owner+`;
GRANT SELECT, INSERT, UPDATE, DELETE ON docs TO `+f.app+`;
INSERT INTO docs VALUES (1, 'acme', 'acme', false), (2, 'acme-corp', 'acme', true), (3, NULL, NULL, false);
CREATE TYPE verdict AS ENUM ('yes');
CREATE FUNCTION to_verdict(boolean) RETURNS verdict LANGUAGE sql IMMUTABLE AS $$SELECT 'yes'::verdict$$;
CREATE FUNCTION from_verdict(verdict) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$SELECT true$$;
CREATE CAST (boolean AS verdict) WITH FUNCTION to_verdict(boolean);
CREATE CAST (verdict AS boolean) WITH FUNCTION from_verdict(verdict) AS ASSIGNMENT;
CREATE TYPE "boolean" AS ENUM ('yes');
CREATE FUNCTION to_b(pg_catalog.bool) RETURNS "boolean" LANGUAGE sql IMMUTABLE AS $$SELECT 'yes'::"boolean"$$;
CREATE FUNCTION from_b("boolean") RETURNS pg_catalog.bool LANGUAGE sql IMMUTABLE AS $$SELECT true$$;
CREATE CAST (pg_catalog.bool AS "boolean") WITH FUNCTION to_b(pg_catalog.bool);
CREATE CAST ("boolean" AS pg_catalog.bool) WITH FUNCTION from_b("boolean") AS ASSIGNMENT;
CREATE TYPE public.bool AS ENUM ('yes');
CREATE FUNCTION to_pb(pg_catalog.bool) RETURNS public.bool LANGUAGE sql IMMUTABLE AS $$SELECT 'yes'::public.bool$$;
CREATE FUNCTION from_pb(public.bool) RETURNS pg_catalog.bool LANGUAGE sql IMMUTABLE AS $$SELECT true$$;
CREATE CAST (pg_catalog.bool AS public.bool) WITH FUNCTION to_pb(pg_catalog.bool);
CREATE CAST (public.bool AS pg_catalog.bool) WITH FUNCTION from_pb(public.bool) AS ASSIGNMENT`)
	g := "(" + guardText + ")"
	for _, c := range []struct {
		name, using string
		want        rlscheck.Kind // "" for a pass
		leaks       bool
	}{
		{"a cast to a type of the user's, then to boolean", `(` + g + `::verdict)::boolean`, rlscheck.PolicyNotProven, true},
		{"a cast to a type of the user's, PostgreSQL's to boolean", g + `::verdict`, rlscheck.PolicyNotProven, true},
		{`a type of the user's named "boolean"`, g + `::"boolean"`, rlscheck.PolicyNotProven, true},
		{"a type of the user's named bool in another schema", g + `::public.bool`, rlscheck.PolicyNotProven, true},
		{"through text and back", `(` + g + `::text)::boolean`, rlscheck.PolicyNotProven, false},
		{"through integer and back", `(` + g + `::integer)::boolean`, rlscheck.PolicyNotProven, false},
		{"a cast to boolean", g + `::boolean`, "", false},
	} {
		f.exec(t, `DROP POLICY IF EXISTS p ON docs; CREATE POLICY p ON docs USING (`+c.using+`)`)
		for _, role := range []string{f.app, ""} {
			var got []rlscheck.Kind
			for _, fd := range f.check(t, rlscheck.Options{Role: role}).Findings {
				if strings.Contains(fd.Object, `."docs"`) && !slices.Contains(got, fd.Kind) {
					got = append(got, fd.Kind)
				}
			}
			if want := []rlscheck.Kind{c.want}; c.want == "" && len(got) != 0 || c.want != "" && !slices.Equal(got, want) {
				t.Errorf("%s, role %q: kinds %v, want %q", c.name, role, got, c.want)
			}
		}
		if leak, how := leaks(t, f.db, f.app, "acme", "acme-corp"); leak != c.leaks {
			t.Errorf("%s: leaks %v (%s), want %v", c.name, leak, how, c.leaks)
		}
	}
}

// TestEdgesSettingName: a custom setting is prefix.name, as PostgreSQL
// requires of one (set_config refuses anything else): the dot as the
// first byte, as the last, or alone is an InputError, and the shortest
// setting that has a byte either side of it, a.b, is checked (the
// fixture's policies read another setting, so they never read it).
func TestEdgesSettingName(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, s := range []string{".tenant_id", "racefree.", ".", "tenant_id"} {
		if _, err := rlscheck.New(f.db).Check(context.Background(), rlscheck.Options{Setting: s, Role: f.app}); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("setting %q: %v, want an InputError", s, err)
		}
	}
	rep := f.check(t, rlscheck.Options{Setting: "a.b", Role: f.app})
	if rep.Setting != "a.b" || len(findingsOf(rep, rlscheck.PolicyNoSetting)) == 0 {
		t.Fatalf("setting a.b: %+v, want policies that never read it", rep)
	}
}

// TestEdgesNamesWithAControlCharacter: PostgreSQL holds a name with a tab
// in it, which rls-check cannot quote in a finding or a fix; a tenant
// column or a schema named so is an InputError before the catalogue is
// read, even where the schema exists and a table has the column, and a
// bad schema after a good one is refused too.
func TestEdgesNamesWithAControlCharacter(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const col, schema = "tenant\tid", "tab\tschema"
	f.exec(t, `CREATE SCHEMA "`+schema+`"; CREATE TABLE "`+schema+`".t (id int, "`+col+`" text)`)
	for _, o := range []rlscheck.Options{
		{TenantColumn: col, Role: f.app},
		{Schemas: []string{schema}, Role: f.app},
		{Schemas: []string{"public", schema}},
		{TenantColumn: col, Schemas: []string{schema}},
	} {
		if _, err := rlscheck.New(f.db).Check(context.Background(), o); !errors.Is(err, racefree.ErrInvalidInput) || !strings.Contains(err.Error(), "control character") {
			t.Errorf("%+v: %v, want an InputError naming the control character", o, err)
		}
	}
}

// TestEdgesRoleCanBecomeOwnerNamesItsTables: a role that can SET ROLE to
// the owner of some tenant tables is role_can_become_owner naming exactly
// that owner's tables, not a tenant table another role owns.
func TestEdgesRoleCanBecomeOwnerNamesItsTables(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `ALTER ROLE `+f.app+` NOINHERIT; GRANT `+f.owner+` TO `+f.app+`;
CREATE TABLE other_owned (id bigint PRIMARY KEY, tenant_id text NOT NULL);
ALTER TABLE other_owned ENABLE ROW LEVEL SECURITY;
ALTER TABLE other_owned FORCE ROW LEVEL SECURITY;
CREATE POLICY other_owned_tenant ON other_owned USING (`+guardText+`) WITH CHECK (`+guardText+`);
ALTER TABLE other_owned OWNER TO `+f.admin)
	rep := f.check(t, rlscheck.Options{Role: f.app})
	only(t, "owner of three of four", rep, []rlscheck.Kind{rlscheck.RoleCanBecomeOwner}, 1, f.app)
	p := rep.Findings[0].Problem
	for _, tbl := range []string{`."orders"`, `."notes"`, `."events"`} {
		if !strings.Contains(p, tbl) {
			t.Errorf("problem %q does not name %s, which the owner owns", p, tbl)
		}
	}
	if strings.Contains(p, "other_owned") {
		t.Errorf("problem %q names other_owned, which another role owns", p)
	}
}

// TestEdgesOpen: Open on a postgres:// URL returns a Checker that checks
// (the fixture passes) and that Close closes; a URL that does not parse is
// an error and no Checker.
func TestEdgesOpen(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c, err := rlscheck.Open(f.dsn)
	if err != nil || c == nil {
		t.Fatalf("Open: %v, %v; want a Checker", c, err)
	}
	rep, err := c.Check(context.Background(), rlscheck.Options{Role: f.app})
	if err != nil || len(rep.Findings) != 0 {
		t.Fatalf("a check through Open: %+v, %v; want no findings", rep, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := rlscheck.Open("postgres://%zz"); err == nil || c != nil {
		t.Fatalf("Open of a URL that does not parse: %v, %v; want an error", c, err)
	}
}

// failAfter is a writer that fails once it has taken n writes.
type failAfter struct {
	n int
	strings.Builder
}

func (w *failAfter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errors.New("disk full")
	}
	w.n--
	return w.Builder.Write(p)
}

// TestEdgesWriteTextWarnings: WriteText writes a report's warnings, each on
// a line of its own, then the summary line, whatever the number of
// warnings; a writer that fails on a warning's line is WriteText's error.
func TestEdgesWriteTextWarnings(t *testing.T) {
	t.Parallel()
	rep := &rlscheck.Report{Schemas: []string{"public"}, TenantColumn: "tenant_id", Setting: "racefree.tenant_id", Tables: []string{`"public"."orders"`}}
	const summary = "no findings: 1 tenant tables (column tenant_id) in public, setting racefree.tenant_id\n"
	for n := range 3 {
		rep.Warnings = nil
		want := ""
		for i := range n {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("note %d", i))
			want += fmt.Sprintf("warning: note %d\n", i)
		}
		var b strings.Builder
		if err := rlscheck.WriteText(&b, rep); err != nil || b.String() != want+summary {
			t.Fatalf("%d warnings: %q, %v; want %q", n, b.String(), err, want+summary)
		}
		for fail := range n + 1 {
			w := &failAfter{n: fail}
			if err := rlscheck.WriteText(w, rep); err == nil || err.Error() != "disk full" {
				t.Fatalf("%d warnings, the writer failing after %d writes: %v, want its error", n, fail, err)
			}
		}
	}
}

// TestEdgesADefinerCallingAnExtensionsCompiledCodeIsNoFinding: a
// SECURITY DEFINER function that calls an extension's functions in C
// (citext's citext_cmp) and in LANGUAGE internal (citext's citext(bpchar)
// and its overloads) is followed into them, and they are taken as
// reading no table: no finding. (One of the user's own in LANGUAGE
// internal is a finding: TestADefinerInALanguageItCannotReadIsNotFollowed.)
func TestEdgesADefinerCallingAnExtensionsCompiledCodeIsNoFinding(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE EXTENSION citext;
CREATE FUNCTION api_same(a bpchar, b bpchar) RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT citext_cmp(citext(a), citext(b)) = 0'`)
	if fds := definerFindings(t, f); len(fds) != 0 {
		t.Fatalf("%+v, want none: an extension's compiled functions read no table", fds)
	}
}
