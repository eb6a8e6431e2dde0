package rlscheck_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/racefree/racefree/rlscheck"
)

// Edges found by mutants written from rls-check's code alone: each test
// here fails on a slip the other tests let through.

// docsKinds checks the fixture's database with and without --role and
// wants the kinds of the findings on docs to be want (none for a pass).
func docsKinds(t *testing.T, f *fixture, what string, want ...rlscheck.Kind) {
	t.Helper()
	for _, role := range []string{f.app, ""} {
		var got []rlscheck.Kind
		for _, fd := range f.check(t, rlscheck.Options{Role: role}).Findings {
			if strings.Contains(fd.Object, `."docs"`) && !slices.Contains(got, fd.Kind) {
				got = append(got, fd.Kind)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s, role %q: kinds %v, want %v", what, role, got, want)
		}
	}
}

// clean wants no finding on docs, with and without --role, and no leak
// between tenants a and b: what a correct policy or a fix must leave.
func clean(t *testing.T, f *fixture, what, a, b string) {
	t.Helper()
	docsKinds(t, f, what)
	if leak, how := leaks(t, f.db, f.app, a, b); leak {
		t.Fatalf("%s leaks: %s", what, how)
	}
}

// docsTable creates the table docs (tenant_id of type typ), owned by the
// fixture's owner, readable and writable by its app role, with one row per
// tenant id given.
func docsTable(t *testing.T, f *fixture, typ string, tenants ...string) {
	t.Helper()
	f.exec(t, `DROP TABLE IF EXISTS docs;
CREATE TABLE docs (id bigint PRIMARY KEY, tenant_id `+typ+`, author text);
ALTER TABLE docs ENABLE ROW LEVEL SECURITY;
ALTER TABLE docs FORCE ROW LEVEL SECURITY;
ALTER TABLE docs OWNER TO `+f.owner+`;
GRANT SELECT, INSERT, UPDATE, DELETE ON docs TO `+f.app)
	for i, id := range tenants {
		if _, err := f.db.Exec(`INSERT INTO docs (id, tenant_id, author) VALUES ($1, $2, 'x')`, i+1, id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOutsideEdgesRestrictiveGuardMustHoldForWrites: a restrictive policy
// excuses an open permissive one for the rows INSERT and UPDATE write only
// by its WITH CHECK (its USING where it has none). A restrictive guard
// whose USING holds the equality and whose WITH CHECK (true) does not
// leaves the open policy's WITH CHECK open: policy_always_true naming WITH
// CHECK, with and without --role, and it leaks (tenant a inserts tenant
// b's row). With the guard in both clauses it passes and leaks nothing.
func TestOutsideEdgesRestrictiveGuardMustHoldForWrites(t *testing.T) {
	t.Parallel()
	f := setup(t)
	docsTable(t, f, "text", "acme", "acme-corp")
	f.exec(t, `CREATE POLICY open ON docs USING (true) WITH CHECK (true);
CREATE POLICY guard ON docs AS RESTRICTIVE USING (`+guardText+`) WITH CHECK (true)`)
	docsKinds(t, f, "restrictive WITH CHECK (true)", rlscheck.PolicyAlwaysTrue)
	fds := findingsOf(f.check(t, rlscheck.Options{Role: f.app}), rlscheck.PolicyAlwaysTrue)
	if len(fds) != 1 || !strings.Contains(fds[0].Object, `"open"`) || !strings.Contains(fds[0].Problem, "policy's WITH CHECK is true") ||
		strings.Contains(fds[0].Problem, "USING") {
		t.Fatalf("%+v, want one finding on open's WITH CHECK alone", fds)
	}
	if leak, how := leaks(t, f.db, f.app, "acme", "acme-corp"); !leak || !strings.Contains(how, "inserts") {
		t.Fatalf("leaks %v (%s), want tenant a to insert tenant b's row", leak, how)
	}
	f.exec(t, `ALTER POLICY guard ON docs WITH CHECK (`+guardText+`)`)
	clean(t, f, "restrictive guard in both clauses", "acme", "acme-corp")
}

// TestOutsideEdgesUntrustedEqualityInEveryClause: on a tenant column with a
// nondeterministic collation no clause is proven, WITH CHECK as much as
// USING: with one policy per command, each guarded, every one of them is
// policy_not_proven (the INSERT policy, whose only clause is WITH CHECK,
// too), and UPDATE's names both its clauses; a restrictive WITH CHECK
// guard there excuses no open INSERT policy. Tenant acme inserts ACME's
// row through the guarded INSERT policy.
func TestOutsideEdgesUntrustedEqualityInEveryClause(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE SCHEMA ext;
CREATE COLLATION ext.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`)
	docsTable(t, f, "text COLLATE ext.ci", "acme")
	f.exec(t, `CREATE POLICY s ON docs FOR SELECT USING (`+guardText+`);
CREATE POLICY i ON docs FOR INSERT WITH CHECK (`+guardText+`);
CREATE POLICY u ON docs FOR UPDATE USING (`+guardText+`) WITH CHECK (`+guardText+`);
CREATE POLICY d ON docs FOR DELETE USING (`+guardText+`)`)
	for _, role := range []string{f.app, ""} {
		fds := findingsOf(f.check(t, rlscheck.Options{Role: role}), rlscheck.PolicyNotProven)
		var objs []string
		for _, fd := range fds {
			objs = append(objs, fd.Object)
			if strings.Contains(fd.Object, `"u"`) && !(strings.Contains(fd.Problem, "USING (") && strings.Contains(fd.Problem, "WITH CHECK (")) {
				t.Errorf("role %q: the UPDATE policy's problem %q does not name both clauses", role, fd.Problem)
			}
		}
		for _, p := range []string{`"s"`, `"i"`, `"u"`, `"d"`} {
			if !slices.ContainsFunc(objs, func(o string) bool { return strings.HasPrefix(o, "policy "+p+" on ") }) {
				t.Errorf("role %q: no policy_not_proven on policy %s: %v", role, p, objs)
			}
		}
	}
	if n := insertAs(t, f, "acme", "ACME"); n != 1 {
		t.Fatalf("tenant acme inserted %d rows of ACME's, want 1 (the collation's = leaks)", n)
	}

	f.exec(t, `DROP POLICY i ON docs;
CREATE POLICY i ON docs FOR INSERT WITH CHECK (true);
CREATE POLICY ig ON docs AS RESTRICTIVE FOR INSERT WITH CHECK (`+guardText+`)`)
	fds := findingsOf(f.check(t, rlscheck.Options{Role: f.app}), rlscheck.PolicyAlwaysTrue)
	if len(fds) != 1 || !strings.HasPrefix(fds[0].Object, `policy "i" on `) {
		t.Fatalf("%+v, want the open INSERT policy unexcused by a guard on the nondeterministic column", fds)
	}
}

// insertAs inserts, as the fixture's app role with tenant set, a row of
// docs for tenant other, and returns how many rows it inserted (0 when
// row-level security refused it).
func insertAs(t *testing.T, f *fixture, tenant, other string) int64 {
	t.Helper()
	tx, err := f.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.Exec(`SET LOCAL ROLE ` + f.app); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`SELECT set_config('racefree.tenant_id', $1, true)`, tenant); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Exec(`INSERT INTO docs (id, tenant_id, author) VALUES (1000, $1, 'x')`, other)
	if err != nil {
		if strings.Contains(err.Error(), "row-level security") {
			return 0
		}
		t.Fatal(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOutsideEdgesTenantColumnNameIsExact: the tenant column is the one of
// that exact name. A table with both tenant_id and "Tenant_ID" whose
// policy holds "Tenant_ID" = the guarded setting is policy_not_proven for
// --tenant-column tenant_id (with and without --role), and leaks: tenant
// acme reads the row whose tenant_id is acme-corp's.
func TestOutsideEdgesTenantColumnNameIsExact(t *testing.T) {
	t.Parallel()
	f := setup(t)
	docsTable(t, f, "text")
	g := `NULLIF(current_setting('racefree.tenant_id', true), '')`
	f.exec(t, `ALTER TABLE docs ADD COLUMN "Tenant_ID" text;
INSERT INTO docs (id, tenant_id, "Tenant_ID") VALUES (1, 'acme', 'acme'), (2, 'acme-corp', 'acme');
CREATE POLICY p ON docs USING ("Tenant_ID" = `+g+`) WITH CHECK ("Tenant_ID" = `+g+`)`)
	docsKinds(t, f, `"Tenant_ID" for tenant_id`, rlscheck.PolicyNotProven)
	if leak, how := leaks(t, f.db, f.app, "acme", "acme-corp"); !leak {
		t.Fatalf("no leak (%s), want tenant acme to read acme-corp's row", how)
	}
}

// TestOutsideEdgesSettingCastToName: a cast to name cuts a value to 63
// bytes, so tenant_id = NULLIF(…)::name on a text column admits, for a
// tenant id of 64 bytes, the rows of the tenant whose id is its first 63:
// policy_not_proven with and without --role, and it leaks.
func TestOutsideEdgesSettingCastToName(t *testing.T) {
	t.Parallel()
	f := setup(t)
	long := strings.Repeat("t", 63) + "1"
	short := long[:63]
	docsTable(t, f, "text", long, short)
	f.exec(t, `CREATE POLICY p ON docs USING (`+guardText+`::name) WITH CHECK (`+guardText+`::name)`)
	docsKinds(t, f, "the setting cast to name", rlscheck.PolicyNotProven)
	if leak, how := leaks(t, f.db, f.app, long, short); !leak || !strings.Contains(how, "sees another's rows") {
		t.Fatalf("leaks %v (%s), want the 64-byte tenant to see the 63-byte one's rows", leak, how)
	}
}

// TestOutsideEdgesDefinerLoopingOverExecute: a SECURITY DEFINER PL/pgSQL
// function that loops over a query built at run time (FOR r IN EXECUTE)
// is security_definer_not_followed, saying so, never a pass; SECURITY
// INVOKER clears it.
func TestOutsideEdgesDefinerLoopingOverExecute(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE FUNCTION api_loop(t text) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE r record; n bigint := 0;
BEGIN
  FOR r IN EXECUTE format('SELECT id FROM %I', t) LOOP n := n + 1; END LOOP;
  RETURN n;
END$$`)
	fds := definerFindings(t, f)
	if len(fds) != 1 || fds[0].Kind != rlscheck.DefinerNotFollowed || !strings.HasSuffix(fds[0].Object, `."api_loop"(t text)`) ||
		!strings.Contains(fds[0].Problem, `."api_loop"(t text): it runs SQL built at run time (EXECUTE)`) {
		t.Fatalf("%+v, want one %s on api_loop saying it runs SQL built at run time", fds, rlscheck.DefinerNotFollowed)
	}
	f.exec(t, fds[0].Fix)
	if fds := definerFindings(t, f); len(fds) != 0 {
		t.Fatalf("after the fix: %+v", fds)
	}
}

// TestOutsideEdgesDefinerSearchPathSchemas: the schemas of a SECURITY
// DEFINER function's SET search_path are where its unqualified names
// resolve: "$user" (the owner's own schema, by its name: any schema, to
// the check) followed by public finds a helper in the schema named after
// the owner, and a quoted mixed-case schema ("Api") is that schema, its
// quotes gone. Each definer reaches the tenant table through its helper,
// and the finding names the path.
func TestOutsideEdgesDefinerSearchPathSchemas(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE SCHEMA `+f.owner+` AUTHORIZATION `+f.owner+`;
CREATE FUNCTION `+f.owner+`.tally() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM public.orders';
CREATE FUNCTION api_user() RETURNS bigint LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = "$user", public AS $$BEGIN RETURN tally(); END$$;
ALTER FUNCTION api_user() OWNER TO `+f.owner+`;
CREATE SCHEMA "Api";
CREATE FUNCTION "Api".notes_count() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM public.notes';
CREATE FUNCTION api_quoted() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER SET search_path = "Api" AS 'SELECT notes_count()'`)
	fds := definerFindings(t, f)
	paths := map[string]string{
		`"public"."api_user"()`:   `"public"."api_user"() → "` + f.owner + `"."tally"() → "public"."orders"`,
		`"public"."api_quoted"()`: `"public"."api_quoted"() → "Api"."notes_count"() → "public"."notes"`,
	}
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

// TestOutsideEdgesAnOperatorInPublic: an = of the user's in public for
// (uuid, text), true for every row, is what the usual guard without a cast
// (tenant_id = NULLIF(…), a text) resolves to on a uuid column
// (PostgreSQL's own has no uuid = text). With search_path pinned to
// pg_catalog it prints qualified and is policy_not_proven, with and
// without --role, whatever the checker's search_path (public is on it by
// default); it leaks.
func TestOutsideEdgesAnOperatorInPublic(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a, b := "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"
	docsTable(t, f, "uuid", a, b)
	f.exec(t, `CREATE FUNCTION public.any_eq(uuid, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR public.= (LEFTARG = uuid, RIGHTARG = text, FUNCTION = public.any_eq);
CREATE POLICY p ON docs USING (`+guardText+`) WITH CHECK (`+guardText+`)`)
	docsKinds(t, f, "public.=(uuid, text)", rlscheck.PolicyNotProven)
	if leak, how := leaks(t, f.db, f.app, a, b); !leak {
		t.Fatalf("no leak (%s), want public's = to admit every row", how)
	}
}
