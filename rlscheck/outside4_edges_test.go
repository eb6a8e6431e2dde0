package rlscheck_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree/rlscheck"
)

// Edges found by a third round of slips written from rls-check's code
// alone (mutants 3120 to 3135): each test here fails on a slip the other
// tests let through.

// extraRole creates a role of the test's own (roles are cluster-wide),
// dropped with what it owns at the end.
func extraRole(t *testing.T, f *fixture, name string) string {
	t.Helper()
	r := f.group + "_" + name
	f.exec(t, `CREATE ROLE `+r+` NOLOGIN`)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := f.db.ExecContext(ctx, `DROP OWNED BY `+r+` CASCADE`); err != nil {
			t.Errorf("drop owned by %s: %v", r, err)
		}
		if _, err := f.db.ExecContext(ctx, `DROP ROLE `+r); err != nil {
			t.Errorf("drop role %s: %v", r, err)
		}
	})
	return r
}

// TestOutside4EdgesUsingAloneIsAppliedToWrites: a permissive policy
// without WITH CHECK admits the rows INSERT and UPDATE write by its USING.
// A permissive USING (true) whose reads a restrictive USING guard closes,
// beside that restrictive policy's WITH CHECK (true), leaves the writes
// open: policy_always_true on the permissive policy, with and without
// --role, and tenant acme inserts a row of acme-corp's. With the guard in
// the restrictive WITH CHECK too it passes and leaks nothing.
func TestOutside4EdgesUsingAloneIsAppliedToWrites(t *testing.T) {
	t.Parallel()
	f := setup(t)
	docsTable(t, f, "text", "acme", "acme-corp")
	f.exec(t, `CREATE POLICY open ON docs USING (true);
CREATE POLICY guard ON docs AS RESTRICTIVE USING (`+guardText+`) WITH CHECK (true)`)
	docsKinds(t, f, "a permissive USING (true) whose writes nothing closes", rlscheck.PolicyAlwaysTrue)
	for _, role := range []string{f.app, ""} {
		fds := docsFindings(t, f, role)
		if len(fds) != 1 || !strings.HasPrefix(fds[0].Object, `policy "open" on `) {
			t.Errorf("role %q: %+v, want one finding on the policy open", role, fds)
		}
	}
	if n := insertAs(t, f, "acme", "acme-corp"); n != 1 {
		t.Fatalf("acme inserted %d row(s) of acme-corp's, want 1 (the leak)", n)
	}
	f.exec(t, `ALTER POLICY guard ON docs WITH CHECK (`+guardText+`)`)
	clean(t, f, "the restrictive guard in both clauses", "acme", "acme-corp")
}

// TestOutside4EdgesNullIfOfAnotherString: NULLIF(current_setting(…, true),
// 'none') keeps the empty string a connection reads once an earlier
// transaction set the tenant, so a transaction without a tenant reads the
// rows whose tenant_id is the empty string: policy_setting_without_nullif, with and
// without --role, and it leaks. The usual guard passes.
func TestOutside4EdgesNullIfOfAnotherString(t *testing.T) {
	t.Parallel()
	f := setup(t)
	docsTable(t, f, "text", "acme", "")
	const g = `tenant_id = NULLIF(current_setting('racefree.tenant_id', true), 'none')`
	f.exec(t, `CREATE POLICY p ON docs USING (`+g+`) WITH CHECK (`+g+`)`)
	docsKinds(t, f, "NULLIF of 'none'", rlscheck.PolicyNoNullIf)
	if leak, how := leaks(t, f.db, f.app, "acme", "acme-corp"); !leak || !strings.Contains(how, "without a tenant") {
		t.Fatalf("leaks %v (%s), want a transaction without a tenant to see rows", leak, how)
	}
	f.exec(t, `ALTER POLICY p ON docs USING (`+guardText+`) WITH CHECK (`+guardText+`)`)
	clean(t, f, "the usual guard", "acme", "acme-corp")
}

// TestOutside4EdgesViews: a view WITH (security_barrier), which is not
// security_invoker, and a view in another schema than its tenant table
// (reporting.all_docs over public.docs) both read with their owner's
// rights: each is view_without_security_invoker, with and without --role,
// and the application role reads acme-corp's row through it as tenant
// acme; their fixes clear them and close the leak.
func TestOutside4EdgesViews(t *testing.T) {
	t.Parallel()
	f := setup(t)
	docsTable(t, f, "text", "acme", "acme-corp")
	f.exec(t, `CREATE POLICY p ON docs USING (`+guardText+`) WITH CHECK (`+guardText+`);
CREATE VIEW barrier_docs WITH (security_barrier) AS SELECT * FROM docs;
CREATE SCHEMA reporting;
CREATE VIEW reporting.all_docs AS SELECT * FROM public.docs;
GRANT USAGE ON SCHEMA reporting TO `+f.app+`;
GRANT SELECT ON barrier_docs, reporting.all_docs TO `+f.app)
	views := []string{`"public"."barrier_docs"`, `"reporting"."all_docs"`}
	viewFindings := func(role string) []rlscheck.Finding {
		var fds []rlscheck.Finding
		for _, fd := range f.check(t, rlscheck.Options{Role: role}).Findings {
			if fd.Kind == rlscheck.ViewNotInvoker {
				fds = append(fds, fd)
			}
		}
		return fds
	}
	seen := func(view string) int {
		tx := asTenant(t, f.db, f.app, "acme")
		defer func() { _ = tx.Rollback() }()
		var n int
		if err := tx.QueryRow(`SELECT count(*) FROM ` + view + ` WHERE tenant_id <> 'acme'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, role := range []string{f.app, ""} {
		fds := viewFindings(role)
		var got []string
		for _, fd := range fds {
			got = append(got, fd.Object)
		}
		if !slices.Equal(got, views) {
			t.Errorf("role %q: view findings on %v, want %v", role, got, views)
		}
	}
	for _, v := range views {
		if n := seen(v); n != 1 {
			t.Errorf("tenant acme sees %d of acme-corp's rows through %s, want 1 (the leak)", n, v)
		}
	}
	for _, fd := range viewFindings(f.app) {
		f.exec(t, fd.Fix)
	}
	if fds := viewFindings(f.app); len(fds) != 0 {
		t.Fatalf("after the fixes: %+v", fds)
	}
	for _, v := range views {
		if n := seen(v); n != 0 {
			t.Errorf("after the fixes tenant acme sees %d of acme-corp's rows through %s", n, v)
		}
	}
}

// TestOutside4EdgesEverySchemaOfTheSearchPath: without --schema the check
// reads every schema of the connection's search path, not the first
// alone: with search_path app, public, a tenant table in public without
// row-level security is rls_disabled, and the report lists both schemas.
func TestOutside4EdgesEverySchemaOfTheSearchPath(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE SCHEMA app;
CREATE TABLE app.items (id bigint PRIMARY KEY, tenant_id text NOT NULL);
ALTER TABLE app.items ENABLE ROW LEVEL SECURITY;
ALTER TABLE app.items FORCE ROW LEVEL SECURITY;
CREATE POLICY p ON app.items USING (`+guardText+`) WITH CHECK (`+guardText+`);
CREATE TABLE public.docs (id bigint PRIMARY KEY, tenant_id text NOT NULL)`)
	appFirst, err := sql.Open("pgx", f.dsn+sep(f.dsn)+"search_path=app,public")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = appFirst.Close() })
	rep, err := rlscheck.New(appFirst).Check(context.Background(), rlscheck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(rep.Schemas)); !slices.Equal(got, []string{"app", "public"}) {
		t.Errorf("schemas %v, want app and public", rep.Schemas)
	}
	var disabled []string
	for _, fd := range rep.Findings {
		if fd.Kind == rlscheck.RLSDisabled {
			disabled = append(disabled, fd.Object)
		}
	}
	if !slices.Equal(disabled, []string{`"public"."docs"`}) {
		t.Errorf("rls_disabled on %v, want on \"public\".\"docs\" alone: %+v", disabled, rep.Findings)
	}
}

// TestOutside4EdgesRolesReachedThroughAChain: the application role is
// judged by every role it reaches through a chain of two memberships
// (app → group → another), not only through direct ones: a wide-open
// policy for the role at the chain's end applies to it (policy_always_true
// with --role, and app reads every tenant's rows); a role with CREATEROLE
// is role_can_create_roles, a superuser role_can_become_superuser, and,
// with app NOINHERIT, a tenant table's owner role_can_become_owner, each
// naming the path and revoking its first membership, which clears it.
func TestOutside4EdgesRolesReachedThroughAChain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, seed string // seed: %[1]s app, %[2]s group, %[3]s the chain's end
		end        string // "" for an extra role, else "owner" or "admin"
		want       rlscheck.Kind
	}{
		{"a wide-open policy for the end", ``, "admin", rlscheck.PolicyAlwaysTrue},
		{"createrole at the end", `ALTER ROLE %[1]s NOINHERIT; ALTER ROLE %[3]s CREATEROLE`, "", rlscheck.RoleCanCreateRoles},
		{"a superuser at the end", `ALTER ROLE %[3]s SUPERUSER`, "", rlscheck.RoleCanBecomeSuperuser},
		{"the owner at the end, app noinherit", `ALTER ROLE %[1]s NOINHERIT`, "owner", rlscheck.RoleCanBecomeOwner},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			end := map[string]string{"owner": f.owner, "admin": f.admin}[c.end]
			if end == "" {
				end = extraRole(t, f, "end")
			}
			f.exec(t, `GRANT SELECT, INSERT ON orders TO `+f.app+`;
INSERT INTO orders VALUES (1, '00000000-0000-0000-0000-00000000000b', 1)`)
			if k := kinds(f.check(t, rlscheck.Options{Role: f.app})); len(k) != 0 {
				t.Fatalf("before the chain: %v", k)
			}
			if c.seed != "" {
				f.exec(t, sprintf(c.seed, f.app, f.group, end))
			}
			f.exec(t, `GRANT `+end+` TO `+f.group+`; GRANT `+f.group+` TO `+f.app)
			rep := f.check(t, rlscheck.Options{Role: f.app})
			if k := kinds(rep); !slices.Equal(k, []rlscheck.Kind{c.want}) {
				t.Fatalf("kinds %v, want [%s]: %+v", k, c.want, rep.Findings)
			}
			fd := rep.Findings[0]
			if c.want == rlscheck.PolicyAlwaysTrue {
				if !strings.HasPrefix(fd.Object, `policy "admin_all" on `) {
					t.Fatalf("%+v, want the finding on admin_all", fd)
				}
				var n int
				tx, err := f.db.Begin()
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx.Rollback() }()
				if _, err := tx.Exec(`SET LOCAL ROLE ` + f.app + `; SELECT set_config('racefree.tenant_id', '00000000-0000-0000-0000-00000000000a', true)`); err != nil {
					t.Fatal(err)
				}
				if err := tx.QueryRow(`SELECT count(*) FROM orders`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 1 {
					t.Fatalf("tenant a sees %d of tenant b's orders through the chain, want 1 (the leak)", n)
				}
				return
			}
			if path := `(through "` + f.group + `")`; len(rep.Findings) != 1 || !strings.Contains(fd.Problem, path) || fd.Fix != `REVOKE "`+f.group+`" FROM "`+f.app+`";` {
				t.Fatalf("%+v, want one finding naming %s, revoking %s from %s", rep.Findings, path, f.group, f.app)
			}
			f.exec(t, fd.Fix)
			if k := kinds(f.check(t, rlscheck.Options{Role: f.app})); len(k) != 0 {
				t.Fatalf("after the fix: %v", k)
			}
		})
	}
}

// TestOutside4EdgesCastToATypeOfAnotherSchema: a cast to a type named
// text, but of the user's schema ext (a domain under a case-insensitive
// collation), is not PostgreSQL's text: tenant_id::ext.text =
// NULLIF(…)::ext.text is policy_not_proven, with and without --role, and
// tenant acme reads ACME's rows.
func TestOutside4EdgesCastToATypeOfAnotherSchema(t *testing.T) {
	t.Parallel()
	f := setup(t)
	docsTable(t, f, "text", "acme", "ACME")
	const g = `tenant_id::ext.text = NULLIF(current_setting('racefree.tenant_id', true), '')::ext.text`
	f.exec(t, `CREATE SCHEMA ext;
GRANT USAGE ON SCHEMA ext TO `+f.app+`;
CREATE COLLATION ext.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE DOMAIN ext.text AS pg_catalog.text COLLATE ext.ci;
CREATE POLICY p ON docs USING (`+g+`) WITH CHECK (`+g+`)`)
	docsKinds(t, f, "a cast to ext.text", rlscheck.PolicyNotProven)
	if leak, how := leaks(t, f.db, f.app, "acme", "ACME"); !leak {
		t.Fatalf("no leak (%s), want tenant acme to read ACME's rows", how)
	}
}

// TestOutside4EdgesDefinerNames: what a SECURITY DEFINER function's body
// names is found as PostgreSQL finds it: a call into every overload of
// the name (helper(1), whose helper(integer) reads a tenant table, beside
// a harmless helper(text) created after it), a schema-qualified table in
// the schema it names (vault.docs, with SET search_path = public), and a
// quoted table name in its own case ("Docs"). Each is
// security_definer_reads_tenant_table naming its path, and its fix clears
// it.
func TestOutside4EdgesDefinerNames(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE SCHEMA vault;
CREATE TABLE vault.docs (id bigint, tenant_id text NOT NULL);
CREATE TABLE "Docs" (id bigint, tenant_id text NOT NULL);
CREATE FUNCTION helper(integer) RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM notes';
CREATE FUNCTION helper(text) RETURNS bigint LANGUAGE sql STABLE AS 'SELECT 0::bigint';
CREATE FUNCTION api_overload() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT helper(1)';
CREATE FUNCTION api_vault() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS 'SELECT count(*) FROM vault.docs';
CREATE FUNCTION api_quoted() RETURNS bigint LANGUAGE plpgsql STABLE SECURITY DEFINER AS $$BEGIN RETURN (SELECT count(*) FROM "Docs"); END$$`)
	paths := map[string]string{
		`"public"."api_overload"()`: `"public"."api_overload"() → "public"."helper"(integer) → "public"."notes"`,
		`"public"."api_vault"()`:    `"public"."api_vault"() → "vault"."docs"`,
		`"public"."api_quoted"()`:   `"public"."api_quoted"() → "public"."Docs"`,
	}
	findings := func() []rlscheck.Finding {
		var fds []rlscheck.Finding
		for _, fd := range f.check(t, rlscheck.Options{Role: f.app, Schemas: []string{"public", "vault"}}).Findings {
			if fd.Kind == rlscheck.DefinerReadsTenantTable || fd.Kind == rlscheck.DefinerNotFollowed {
				fds = append(fds, fd)
			}
		}
		return fds
	}
	fds := findings()
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
	if fds := findings(); len(fds) != 0 {
		t.Fatalf("after the fixes: %+v", fds)
	}
}

// TestOutside4EdgesInheritingChild: a table that INHERITS a tenant table
// (not a partition of it) applies its own row-level security when a query
// names it, not its parent's: without any, it is rls_disabled (with
// rls_not_forced and policy_missing), with and without --role, and the
// application role reads every tenant's rows there.
func TestOutside4EdgesInheritingChild(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE TABLE docs_child () INHERITS (notes);
GRANT SELECT ON docs_child TO `+f.app+`;
INSERT INTO docs_child VALUES (1, 'acme-corp', 'x')`)
	for _, role := range []string{f.app, ""} {
		var got []rlscheck.Kind
		for _, fd := range f.check(t, rlscheck.Options{Role: role}).Findings {
			if strings.Contains(fd.Object, `"docs_child"`) && !slices.Contains(got, fd.Kind) {
				got = append(got, fd.Kind)
			}
		}
		if want := []rlscheck.Kind{rlscheck.RLSDisabled, rlscheck.RLSNotForced, rlscheck.PolicyMissing}; !slices.Equal(got, want) {
			t.Errorf("role %q: kinds %v on docs_child, want %v", role, got, want)
		}
	}
	if n := readsAs(t, f.db, f.app, "acme", `SELECT count(*) FROM docs_child`); n != 1 {
		t.Fatalf("tenant acme sees %d of acme-corp's rows in the child, want 1 (the leak)", n)
	}
}

// TestOutside4EdgesFixCastsWithoutALength: the fix of a missing policy on
// a tenant column with a length (varchar(8), character(8)) casts the
// setting to the column's type without it, as the check proves a guard:
// a cast to character varying(8) would cut a longer id to one of 8
// bytes, and is not proven. Run, the fixes pass, and tenant acme reads
// nothing of acme-cor's.
func TestOutside4EdgesFixCastsWithoutALength(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ typ, cast string }{
		{"varchar(8)", "::character varying)"},
		{"character(8)", "::bpchar)"},
	} {
		t.Run(c.typ, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			docsTable(t, f, c.typ, "acme", "acme-cor")
			fds := docsFindings(t, f, f.app)
			if len(fds) != 4 {
				t.Fatalf("%+v, want 4 policy_missing", fds)
			}
			for _, fd := range fds {
				if fd.Kind != rlscheck.PolicyMissing || !strings.Contains(fd.Fix, c.cast) {
					t.Fatalf("%+v, want policy_missing whose fix casts with %s", fd, c.cast)
				}
				f.exec(t, fd.Fix)
			}
			clean(t, f, "after the fixes", "acme", "acme-cor")
		})
	}
}
