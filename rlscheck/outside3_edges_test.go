package rlscheck_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/rlscheck"
)

// Edges found by a third round of mutants written from rls-check's code
// alone: each test here fails on a slip the other tests let through.

// docsFindings returns the findings on docs and its policies, checked
// with role ("" for none).
func docsFindings(t *testing.T, f *fixture, role string) []rlscheck.Finding {
	t.Helper()
	var fds []rlscheck.Finding
	for _, fd := range f.check(t, rlscheck.Options{Role: role}).Findings {
		if strings.Contains(fd.Object, `."docs"`) {
			fds = append(fds, fd)
		}
	}
	return fds
}

// TestOutside3EdgesRestrictiveWithoutUsingRestrictsNoRead: a restrictive
// FOR ALL policy with a WITH CHECK guard and no USING restricts the rows
// written but no row read (PostgreSQL ANDs in only the clauses a
// restrictive policy has), so beside a permissive USING (true) WITH CHECK
// (true) the reads stay open: policy_always_true naming USING alone, with
// and without --role, and tenant acme reads acme-corp's rows. With the
// guard in USING too it passes and leaks nothing.
func TestOutside3EdgesRestrictiveWithoutUsingRestrictsNoRead(t *testing.T) {
	t.Parallel()
	f := setup(t)
	docsTable(t, f, "text", "acme", "acme-corp")
	f.exec(t, `CREATE POLICY open ON docs USING (true) WITH CHECK (true);
CREATE POLICY guard ON docs AS RESTRICTIVE WITH CHECK (`+guardText+`)`)
	docsKinds(t, f, "a restrictive guard in WITH CHECK alone", rlscheck.PolicyAlwaysTrue)
	for _, role := range []string{f.app, ""} {
		fds := docsFindings(t, f, role)
		if len(fds) != 1 || !strings.Contains(fds[0].Problem, "policy's USING is true") || strings.Contains(fds[0].Problem, "WITH CHECK") {
			t.Errorf("role %q: %+v, want one policy_always_true naming USING alone", role, fds)
		}
	}
	if leak, how := leaks(t, f.db, f.app, "acme", "acme-corp"); !leak || !strings.Contains(how, "sees") {
		t.Fatalf("leaks %v (%s), want the reads open", leak, how)
	}
	f.exec(t, `ALTER POLICY guard ON docs USING (`+guardText+`)`)
	clean(t, f, "the restrictive guard in both clauses", "acme", "acme-corp")
}

// TestOutside3EdgesInsertIsJudgedByWithCheck: INSERT applies a policy's
// WITH CHECK only. A permissive FOR INSERT WITH CHECK (true) beside
// correct policies for the other commands is policy_always_true naming
// WITH CHECK, with and without --role, and tenant acme inserts a row of
// acme-corp's; its fix clears it.
func TestOutside3EdgesInsertIsJudgedByWithCheck(t *testing.T) {
	t.Parallel()
	f := setup(t)
	docsTable(t, f, "text", "acme", "acme-corp")
	f.exec(t, `CREATE POLICY r ON docs FOR SELECT USING (`+guardText+`);
CREATE POLICY u ON docs FOR UPDATE USING (`+guardText+`) WITH CHECK (`+guardText+`);
CREATE POLICY d ON docs FOR DELETE USING (`+guardText+`);
CREATE POLICY i ON docs FOR INSERT WITH CHECK (true)`)
	docsKinds(t, f, "FOR INSERT WITH CHECK (true)", rlscheck.PolicyAlwaysTrue)
	fds := docsFindings(t, f, f.app)
	if len(fds) != 1 || !strings.HasPrefix(fds[0].Object, `policy "i" on `) || !strings.Contains(fds[0].Problem, "WITH CHECK") {
		t.Fatalf("%+v, want one policy_always_true on i naming WITH CHECK", fds)
	}
	if n := insertAs(t, f, "acme", "acme-corp"); n != 1 {
		t.Fatalf("acme inserted %d row(s) of acme-corp's, want 1 (the leak)", n)
	}
	f.exec(t, fds[0].Fix)
	docsKinds(t, f, "after the fix")
	if n := insertAs(t, f, "acme", "acme-corp"); n != 0 {
		t.Fatalf("after the fix acme inserted %d row(s) of acme-corp's", n)
	}
}

// TestOutside3EdgesGuardsWrittenOtherwise: the verdict on guards written
// otherwise than the usual form, each on a text column (bigint for the
// cast to double precision) with and without --role, and whether it
// leaks. The guard with a cast between NULLIF and current_setting is
// guarded and proven; IS DISTINCT FROM the guarded setting, the guarded
// setting written first and compared with lower(tenant_id) (tenant acme
// reads ACME's rows), and the bigint column and the setting
// cast to double precision (which cannot tell 2^53 from 2^53+1), and the
// setting cast to integer and back to text on a text column (tenant 01
// reads tenant 1's rows), before or inside a sub-select, are
// policy_not_proven and leak (a cast to text around a sub-select of the
// guarded setting alone is proven); an OR with 1 < 1, false for every row, is
// policy_not_proven, never policy_always_true.
func TestOutside3EdgesGuardsWrittenOtherwise(t *testing.T) {
	t.Parallel()
	const g = `NULLIF(current_setting('racefree.tenant_id', true), '')`
	for _, c := range []struct {
		name, typ, expr string
		a, b            string
		want            []rlscheck.Kind
		leaks           bool
	}{
		{"cast inside NULLIF", "text", `tenant_id = NULLIF(current_setting('racefree.tenant_id', true)::varchar, '')`, "acme", "acme-corp", nil, false},
		{"IS DISTINCT FROM", "text", `tenant_id IS DISTINCT FROM ` + g, "acme", "acme-corp", []rlscheck.Kind{rlscheck.PolicyNotProven}, true},
		{"the setting first, lower of the column second", "text", g + ` = lower(tenant_id)`, "acme", "ACME", []rlscheck.Kind{rlscheck.PolicyNotProven}, true},
		{"double precision", "bigint", `tenant_id::float8 = ` + g + `::float8`, "9007199254740993", "9007199254740992", []rlscheck.Kind{rlscheck.PolicyNotProven}, true},
		{"the setting through integer and back to text", "text", `tenant_id = ` + g + `::integer::text`, "01", "1", []rlscheck.Kind{rlscheck.PolicyNotProven}, true},
		{"through integer inside a sub-select, to text outside it", "text", `tenant_id = (SELECT ` + g + `::integer)::text`, "01", "1", []rlscheck.Kind{rlscheck.PolicyNotProven}, true},
		{"through integer inside a sub-select, to text inside it too", "text", `tenant_id = (SELECT ` + g + `::integer::text)`, "01", "1", []rlscheck.Kind{rlscheck.PolicyNotProven}, true},
		{"to text outside a sub-select, none inside", "text", `tenant_id = (SELECT ` + g + `)::text`, "acme", "acme-corp", nil, false},
		{"OR 1 < 1", "text", guardText + ` OR 1 < 1`, "acme", "acme-corp", []rlscheck.Kind{rlscheck.PolicyNotProven}, false},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			docsTable(t, f, c.typ, c.a, c.b)
			f.exec(t, `CREATE POLICY p ON docs USING (`+c.expr+`) WITH CHECK (`+c.expr+`)`)
			docsKinds(t, f, c.expr, c.want...)
			if leak, how := leaks(t, f.db, f.app, c.a, c.b); leak != c.leaks {
				t.Fatalf("%s: leaks %v (%s), want %v", c.expr, leak, how, c.leaks)
			}
		})
	}
}

// TestOutside3EdgesAnOpenClauseIsNamedOnce: a FOR ALL policy's USING is
// open in every command (SELECT, UPDATE and DELETE read by it, and INSERT
// and UPDATE write by it, having no WITH CHECK), and the finding names it
// once: policy_always_true for USING (true), policy_without_setting for
// USING (id > 0), policy_not_proven quoting its text once for USING
// (tenant_id <> the guarded setting).
func TestOutside3EdgesAnOpenClauseIsNamedOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	docsTable(t, f, "text", "acme", "acme-corp")
	for _, c := range []struct {
		using string
		want  rlscheck.Kind
		text  string
	}{
		{"true", rlscheck.PolicyAlwaysTrue, "USING is true"},
		{"id > 0", rlscheck.PolicyNoSetting, "USING never reads"},
		{"tenant_id <> NULLIF(current_setting('racefree.tenant_id', true), '')", rlscheck.PolicyNotProven, "USING ((tenant_id <> "},
	} {
		f.exec(t, `DROP POLICY IF EXISTS p ON docs; CREATE POLICY p ON docs USING (`+c.using+`)`)
		for _, role := range []string{f.app, ""} {
			fds := docsFindings(t, f, role)
			if len(fds) != 1 || fds[0].Kind != c.want || strings.Count(fds[0].Problem, "USING") != 1 || !strings.Contains(fds[0].Problem, c.text) {
				t.Errorf("USING (%s), role %q: %+v, want one %s naming USING once (%s)", c.using, role, fds, c.want, c.text)
			}
		}
	}
}

// TestOutside3EdgesSettingOfTheMostBytes: a setting name is at most 200
// bytes: one of exactly 200, which PostgreSQL sets, is checked, and one of
// 201 is an InputError.
func TestOutside3EdgesSettingOfTheMostBytes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	s := "a." + strings.Repeat("b", 198)
	var got string
	if err := f.db.QueryRow(`SELECT set_config($1, 'x', false)`, s).Scan(&got); err != nil || got != "x" {
		t.Fatalf("set_config of a 200-byte setting: %q, %v", got, err)
	}
	rep := f.check(t, rlscheck.Options{Setting: s, Role: f.app})
	if rep.Setting != s || len(findingsOf(rep, rlscheck.PolicyNoSetting)) == 0 {
		t.Fatalf("a 200-byte setting: %+v, want policies that never read it", rep)
	}
	if _, err := rlscheck.New(f.db).Check(context.Background(), rlscheck.Options{Setting: s + "b", Role: f.app}); !errors.Is(err, racefree.ErrInvalidInput) {
		t.Fatalf("a 201-byte setting: %v, want an InputError", err)
	}
}

// TestOutside3EdgesSuperuserWithBypassRLSFix: an application role that is
// both a superuser and BYPASSRLS is one role_bypasses_rls naming both,
// whose fix takes both away: after it the check passes.
func TestOutside3EdgesSuperuserWithBypassRLSFix(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `ALTER ROLE `+f.app+` SUPERUSER BYPASSRLS`)
	rep := f.check(t, rlscheck.Options{Role: f.app})
	fds := findingsOf(rep, rlscheck.RoleBypassesRLS)
	if len(rep.Findings) != 1 || len(fds) != 1 || !strings.Contains(fds[0].Problem, "a superuser and BYPASSRLS") {
		t.Fatalf("%+v, want one role_bypasses_rls naming both", rep.Findings)
	}
	f.exec(t, fds[0].Fix)
	if rep := f.check(t, rlscheck.Options{Role: f.app}); len(rep.Findings) != 0 {
		t.Fatalf("after the fix %q: %+v", fds[0].Fix, rep.Findings)
	}
}

// TestOutside3EdgesDefinerPaths: a SECURITY DEFINER function is followed
// through what PostgreSQL records and what its body names: a BEGIN ATOMIC
// body into the function it calls, a view into the function it calls, a
// SET search_path of two schemas (stored with a space after the comma)
// into the second, and a body naming a partitioned tenant table to that
// table. Each is security_definer_reads_tenant_table naming its path, and
// its fix clears it.
func TestOutside3EdgesDefinerPaths(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE TABLE parts (id bigint, tenant_id text NOT NULL) PARTITION BY LIST (tenant_id);
CREATE TABLE parts_acme PARTITION OF parts FOR VALUES IN ('acme');
CREATE SCHEMA helpers;
CREATE FUNCTION helpers.notes_count() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM public.notes';
CREATE FUNCTION api_atomic() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER BEGIN ATOMIC SELECT order_count(); END;
CREATE VIEW order_stats WITH (security_invoker = true) AS SELECT order_count() AS n;
CREATE FUNCTION api_view() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT n FROM order_stats';
CREATE FUNCTION api_path() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_temp, helpers AS 'SELECT notes_count()';
CREATE FUNCTION api_parts() RETURNS bigint LANGUAGE plpgsql STABLE SECURITY DEFINER AS $$BEGIN RETURN (SELECT count(*) FROM parts); END$$`)
	paths := map[string]string{
		`"public"."api_atomic"()`: `"public"."api_atomic"() → "public"."order_count"() → "public"."orders"`,
		`"public"."api_view"()`:   `"public"."api_view"() → "public"."order_stats" → "public"."order_count"() → "public"."orders"`,
		`"public"."api_path"()`:   `"public"."api_path"() → "helpers"."notes_count"() → "public"."notes"`,
		`"public"."api_parts"()`:  `"public"."api_parts"() → "public"."parts"`,
	}
	fds := definerFindings(t, f)
	if len(fds) != len(paths) {
		t.Fatalf("%+v, want %d findings", fds, len(paths))
	}
	for _, fd := range fds {
		if path, ok := paths[fd.Object]; !ok || fd.Kind != rlscheck.DefinerReadsTenantTable || !strings.Contains(fd.Problem, path) {
			t.Errorf("%+v, want %s naming %s", fd, rlscheck.DefinerReadsTenantTable, path)
		}
	}
	for _, fd := range fds {
		f.exec(t, fd.Fix)
	}
	if fds := definerFindings(t, f); len(fds) != 0 {
		t.Fatalf("after the fixes: %+v", fds)
	}
}
