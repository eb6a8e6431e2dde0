package rlscheck_test

import (
	"database/sql"
	"slices"
	"strings"
	"testing"

	"github.com/racefree/racefree/rlscheck"
)

// asTenant begins a transaction as role with tenant set, rolled back when
// the test ends.
func asTenant(t *testing.T, db *sql.DB, role, tenant string) *sql.Tx {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	if _, err := tx.Exec(`SET LOCAL ROLE ` + role + `; SELECT set_config('racefree.tenant_id', '` + tenant + `', true)`); err != nil {
		t.Fatal(err)
	}
	return tx
}

// readsAs counts the rows of query that role reads with tenant set, in a
// transaction rolled back at the end.
func readsAs(t *testing.T, db *sql.DB, role, tenant, query string) int {
	t.Helper()
	tx := asTenant(t, db, role, tenant)
	defer func() { _ = tx.Rollback() }()
	var n int
	if err := tx.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// inheritedDocs creates the tenant table docs (tenant_id text) that
// INHERITS parent, with row-level security enabled and forced and the
// guard, owned by the fixture's owner.
func inheritedDocs(t *testing.T, f *fixture, parent string) {
	t.Helper()
	f.exec(t, `CREATE TABLE docs (tenant_id text NOT NULL) INHERITS (`+parent+`);
ALTER TABLE docs ENABLE ROW LEVEL SECURITY;
ALTER TABLE docs FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON docs USING (`+guardText+`) WITH CHECK (`+guardText+`);
ALTER TABLE docs OWNER TO `+f.owner)
}

// parentFindings returns the findings on obj (a quoted name's last part).
func parentFindings(rep *rlscheck.Report, obj string) []rlscheck.Finding {
	var fds []rlscheck.Finding
	for _, fd := range rep.Findings {
		if strings.HasSuffix(fd.Object, `."`+obj+`"`) {
			fds = append(fds, fd)
		}
	}
	return fds
}

// beside returns the findings but the one the set-up has without a role
// (its admins' policy for every row).
func beside(rep *rlscheck.Report) []rlscheck.Finding {
	var fds []rlscheck.Finding
	for _, fd := range rep.Findings {
		if !strings.Contains(fd.Object, `"admin_all"`) {
			fds = append(fds, fd)
		}
	}
	return fds
}

// TestParentByInheritanceMustDeny: a table a tenant table INHERITS reads
// the child's rows under its own policies alone, so rls-check reports it
// (inheritance_parent_not_denied) until it denies the application every
// row: row-level security enabled, forced, and no permissive policy for
// the role (a restrictive one admits nothing alone), with and without
// --role. The application role reads another
// tenant's row through the parent before the fix and nothing after it; a
// parent that is a tenant table itself is judged as one, not as a parent.
func TestParentByInheritanceMustDeny(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE TABLE docs_base (id bigint, body text)`)
	inheritedDocs(t, f, "docs_base")
	f.exec(t, `ALTER TABLE docs_base OWNER TO `+f.owner+`;
GRANT SELECT ON docs_base, docs TO `+f.app+`;
INSERT INTO docs VALUES (1, 'x', 'acme-corp');
CREATE TABLE notes_child () INHERITS (notes);
ALTER TABLE notes_child ENABLE ROW LEVEL SECURITY;
ALTER TABLE notes_child FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON notes_child USING (`+guardText+`) WITH CHECK (`+guardText+`);
ALTER TABLE notes_child OWNER TO `+f.owner)
	if n := readsAs(t, f.db, f.app, "acme", `SELECT count(*) FROM docs_base`); n != 1 {
		t.Fatalf("tenant acme reads %d of acme-corp's rows through the parent, want 1 (the leak)", n)
	}
	var fix string
	for _, role := range []string{f.app, ""} {
		rep := f.check(t, rlscheck.Options{Role: role})
		fds := parentFindings(rep, "docs_base")
		if len(fds) != 1 || fds[0].Kind != rlscheck.ParentNotDenied ||
			!strings.Contains(fds[0].Problem, `"docs"`) || !strings.Contains(fds[0].Problem, "not enabled") || !strings.Contains(fds[0].Problem, "not forced") {
			t.Fatalf("role %q: findings on docs_base %+v, want one %s naming docs, not enabled, not forced", role, fds, rlscheck.ParentNotDenied)
		}
		if got := parentFindings(rep, "notes"); len(got) != 0 {
			t.Fatalf("role %q: notes, a tenant table and a parent, judged as a parent: %+v", role, got)
		}
		if got := beside(rep); len(got) != 1 {
			t.Fatalf("role %q: %+v, want the parent's finding alone", role, got)
		}
		fix = fds[0].Fix
	}
	f.exec(t, fix)
	if n := readsAs(t, f.db, f.app, "acme", `SELECT count(*) FROM docs_base`); n != 0 {
		t.Fatalf("after the fix tenant acme reads %d rows through the parent", n)
	}
	for _, role := range []string{f.app, ""} {
		if got := beside(f.check(t, rlscheck.Options{Role: role})); len(got) != 0 {
			t.Fatalf("role %q after the fix: %+v", role, got)
		}
	}

	// Each of the three alone: a parent that is only not forced (its owner
	// reads through it), or whose permissive policy admits rows.
	f.exec(t, `ALTER TABLE docs_base NO FORCE ROW LEVEL SECURITY`)
	if fds := parentFindings(f.check(t, rlscheck.Options{Role: f.app}), "docs_base"); len(fds) != 1 || strings.Contains(fds[0].Problem, "not enabled") || !strings.Contains(fds[0].Problem, "not forced") {
		t.Fatalf("not forced alone: %+v", fds)
	}
	f.exec(t, `ALTER TABLE docs_base FORCE ROW LEVEL SECURITY; ALTER TABLE docs_base DISABLE ROW LEVEL SECURITY`)
	if fds := parentFindings(f.check(t, rlscheck.Options{Role: f.app}), "docs_base"); len(fds) != 1 || !strings.Contains(fds[0].Problem, "not enabled") || strings.Contains(fds[0].Problem, "not forced") {
		t.Fatalf("not enabled alone: %+v", fds)
	}
	f.exec(t, `ALTER TABLE docs_base ENABLE ROW LEVEL SECURITY;
CREATE POLICY open ON docs_base USING (true);
CREATE POLICY closed ON docs_base AS RESTRICTIVE USING (false);
CREATE POLICY admins ON docs_base TO `+f.admin+` USING (true)`)
	if n := readsAs(t, f.db, f.app, "acme", `SELECT count(*) FROM docs_base`); n != 0 {
		t.Fatalf("a restrictive false closes the parent, yet acme reads %d rows", n)
	}
	f.exec(t, `DROP POLICY closed ON docs_base; CREATE POLICY narrow ON docs_base AS RESTRICTIVE USING (id > 0)`)
	if n := readsAs(t, f.db, f.app, "acme", `SELECT count(*) FROM docs_base`); n != 1 {
		t.Fatalf("through a permissive policy on the parent acme reads %d of acme-corp's rows, want 1 (the leak)", n)
	}
	fds := parentFindings(f.check(t, rlscheck.Options{Role: f.app}), "docs_base")
	if len(fds) != 1 || !strings.Contains(fds[0].Problem, `"open"`) || strings.Contains(fds[0].Problem, `"admins"`) || strings.Contains(fds[0].Problem, "not enabled") || strings.Contains(fds[0].Problem, "not forced") {
		t.Fatalf("with --role: %+v, want the open policy alone", fds)
	}
	fds = parentFindings(f.check(t, rlscheck.Options{}), "docs_base")
	if len(fds) != 1 || !strings.Contains(fds[0].Problem, `"open"`) || !strings.Contains(fds[0].Problem, `"admins"`) || strings.Contains(fds[0].Problem, `"narrow"`) {
		t.Fatalf("without a role: %+v, want both permissive policies, not the restrictive one", fds)
	}
	f.exec(t, fds[0].Fix)
	if got := beside(f.check(t, rlscheck.Options{})); len(got) != 0 {
		t.Fatalf("after dropping the permissive policies (a restrictive one alone admits nothing): %+v", got)
	}
	if n := readsAs(t, f.db, f.app, "acme", `SELECT count(*) FROM docs_base`); n != 0 {
		t.Fatalf("after the fix tenant acme reads %d rows through the parent", n)
	}
}

// TestParentsAtEveryDepthAndSchema: the parent of a parent is a parent
// too; a partitioned table in a schema that is not checked reads its
// partitions under its own policies; the application role owning a parent
// can disable its row-level security; a view without security_invoker, a
// SECURITY DEFINER function and a rewrite rule over a parent read it with
// their owner's rights, as over a tenant table.
func TestParentsAtEveryDepthAndSchema(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `
CREATE TABLE docs_root (id bigint);
CREATE TABLE docs_base () INHERITS (docs_root);
ALTER TABLE docs_base ENABLE ROW LEVEL SECURITY;
ALTER TABLE docs_base FORCE ROW LEVEL SECURITY`)
	inheritedDocs(t, f, "docs_base")
	f.exec(t, `
ALTER TABLE docs_base OWNER TO `+f.owner+`;
ALTER TABLE docs_root OWNER TO `+f.app+`;
CREATE SCHEMA elsewhere_`+f.app+`;
CREATE TABLE elsewhere_`+f.app+`.items (tenant_id text NOT NULL, id bigint) PARTITION BY LIST (tenant_id);
CREATE TABLE items_acme PARTITION OF elsewhere_`+f.app+`.items FOR VALUES IN ('acme');
ALTER TABLE items_acme ENABLE ROW LEVEL SECURITY;
ALTER TABLE items_acme FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON items_acme USING (`+guardText+`) WITH CHECK (`+guardText+`);
ALTER TABLE items_acme OWNER TO `+f.owner+`;
ALTER TABLE elsewhere_`+f.app+`.items OWNER TO `+f.owner+`;
CREATE TABLE elsewhere_`+f.app+`.open_items (tenant_id text NOT NULL, id bigint) PARTITION BY LIST (tenant_id);
CREATE TABLE open_items_acme PARTITION OF elsewhere_`+f.app+`.open_items FOR VALUES IN ('acme');
ALTER TABLE open_items_acme ENABLE ROW LEVEL SECURITY;
ALTER TABLE open_items_acme FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON open_items_acme USING (`+guardText+`) WITH CHECK (`+guardText+`);
ALTER TABLE open_items_acme OWNER TO `+f.owner+`;
ALTER TABLE elsewhere_`+f.app+`.open_items ENABLE ROW LEVEL SECURITY;
ALTER TABLE elsewhere_`+f.app+`.open_items FORCE ROW LEVEL SECURITY;
CREATE POLICY everyone ON elsewhere_`+f.app+`.open_items USING (true);
ALTER TABLE elsewhere_`+f.app+`.open_items OWNER TO `+f.owner+`;
CREATE VIEW base_ids AS SELECT id FROM docs_base;
CREATE FUNCTION base_count() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT count(*) FROM docs_base';
CREATE TABLE base_log (id bigint);
CREATE RULE copy AS ON INSERT TO base_log DO ALSO INSERT INTO docs_root (id) VALUES (NEW.id)`)
	rep := f.check(t, rlscheck.Options{Role: f.app})
	root := parentFindings(rep, "docs_root")
	var rootKinds []rlscheck.Kind
	for _, fd := range root {
		rootKinds = append(rootKinds, fd.Kind)
	}
	if !slices.Contains(rootKinds, rlscheck.ParentNotDenied) || !slices.Contains(rootKinds, rlscheck.RoleOwnsTable) {
		t.Fatalf("the grandparent owned by the application: %+v, want %s and %s", root, rlscheck.ParentNotDenied, rlscheck.RoleOwnsTable)
	}
	for _, fd := range root {
		if fd.Kind == rlscheck.ParentNotDenied && !strings.Contains(fd.Problem, `"docs"`) {
			t.Fatalf("the grandparent's finding does not name the tenant table below it: %+v", fd)
		}
	}
	if got := parentFindings(rep, "docs_base"); len(got) != 0 {
		t.Fatalf("docs_base denies every row: %+v", got)
	}
	items := parentFindings(rep, "items")
	if len(items) != 1 || items[0].Kind != rlscheck.ParentNotDenied || !strings.Contains(items[0].Problem, `"items_acme"`) {
		t.Fatalf("the partitioned parent in an unchecked schema: %+v", items)
	}
	// A parent in an unchecked schema with row-level security enabled and
	// forced is judged by its own policies, which are read however far
	// from the checked schemas it is: a permissive one admits the rows.
	open := parentFindings(rep, "open_items")
	if len(open) != 1 || open[0].Kind != rlscheck.ParentNotDenied || !strings.Contains(open[0].Problem, `permissive policy "everyone"`) {
		t.Fatalf("the partitioned parent in an unchecked schema with a permissive policy: %+v", open)
	}
	var view, definer, rule bool
	for _, fd := range rep.Findings {
		rule = rule || fd.Kind == rlscheck.RuleReachesTenantTable && strings.Contains(fd.Object, `"copy"`) && strings.Contains(fd.Problem, `"docs_root"`)
		view = view || fd.Kind == rlscheck.ViewNotInvoker && strings.Contains(fd.Object, `"base_ids"`) && strings.Contains(fd.Problem, `"docs_base"`)
		definer = definer || fd.Kind == rlscheck.DefinerReadsTenantTable && strings.Contains(fd.Object, `"base_count"`) && strings.Contains(fd.Problem, `"docs_base"`)
	}
	if !view || !definer || !rule {
		t.Fatalf("a view (%v), a definer (%v) and a rule (%v) over a parent: %+v", view, definer, rule, rep.Findings)
	}
}
