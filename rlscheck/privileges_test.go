package rlscheck_test

import (
	"strings"
	"testing"

	"github.com/racefree/racefree/rlscheck"
)

// grantFindings returns the problems of the privilege_escapes_rls
// findings on table (a quoted name's last part), one line each.
func grantFindings(rep *rlscheck.Report, table string) []string {
	var out []string
	for _, fd := range rep.Findings {
		if fd.Kind == rlscheck.PrivilegeEscapesRLS && strings.HasSuffix(fd.Object, `."`+table+`"`) {
			out = append(out, fd.Problem)
		}
	}
	return out
}

// TestPrivilegesThatRLSDoesNotBind: TRUNCATE, TRIGGER and REFERENCES on a
// tenant table (GRANT ALL grants them) are not bound by row-level
// security: the application role holding them is privilege_escapes_rls,
// and it empties every tenant's rows with TRUNCATE while its policies
// show it its own. Each privilege alone is named; a grant to PUBLIC or to
// a group the role is a member of reaches it, one to another role does
// not under --role and does without it; the owner's own rights are no
// such finding; a parent's grants count. The fix revokes them, and
// TRUNCATE is then refused.
func TestPrivilegesThatRLSDoesNotBind(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `GRANT ALL ON orders TO `+f.app+`;
INSERT INTO orders VALUES (1, '00000000-0000-0000-0000-00000000000a', 1), (2, '00000000-0000-0000-0000-00000000000b', 2)`)
	rep := f.check(t, rlscheck.Options{Role: f.app})
	got := grantFindings(rep, "orders")
	if len(got) != 1 || !strings.Contains(got[0], f.app+" holds TRUNCATE, TRIGGER, REFERENCES on it") {
		t.Fatalf("GRANT ALL to the application role: %q", got)
	}
	var fix string
	for _, fd := range rep.Findings {
		if fd.Kind == rlscheck.PrivilegeEscapesRLS {
			fix = fd.Fix
		}
	}
	if want := `REVOKE TRUNCATE, TRIGGER, REFERENCES ON "public"."orders" FROM ` + f.app + `;`; fix != want {
		t.Fatalf("fix %q, want %q", fix, want)
	}
	truncate := func() (int, error) {
		t.Helper()
		tx := asTenant(t, f.db, f.app, "00000000-0000-0000-0000-00000000000a")
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.Exec(`TRUNCATE orders`); err != nil {
			return 0, err
		}
		if _, err := tx.Exec(`RESET ROLE`); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := tx.QueryRow(`SELECT count(*) FROM orders`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n, nil
	}
	if n, err := truncate(); err != nil || n != 0 {
		t.Fatalf("TRUNCATE as tenant a: %d rows left, %v; want every tenant's rows gone (the leak)", n, err)
	}
	f.exec(t, fix)
	if n, err := truncate(); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("TRUNCATE after the fix: %d rows left, %v; want it refused", n, err)
	}
	if got := grantFindings(f.check(t, rlscheck.Options{Role: f.app}), "orders"); len(got) != 0 {
		t.Fatalf("after the fix: %q", got)
	}

	f.exec(t, `GRANT TRUNCATE ON orders TO PUBLIC; GRANT TRIGGER ON notes TO `+f.admin+`;
GRANT REFERENCES ON events TO `+f.group+`; GRANT `+f.group+` TO `+f.app)
	rep = f.check(t, rlscheck.Options{Role: f.app})
	if got := grantFindings(rep, "orders"); len(got) != 1 || !strings.HasPrefix(got[0], "PUBLIC holds TRUNCATE on it") {
		t.Fatalf("TRUNCATE to PUBLIC: %q", got)
	}
	if got := grantFindings(rep, "notes"); len(got) != 0 {
		t.Fatalf("TRIGGER to another role under --role: %q", got)
	}
	if got := grantFindings(rep, "events"); len(got) != 1 || !strings.HasPrefix(got[0], f.group+" holds REFERENCES on it") {
		t.Fatalf("REFERENCES to the role's group: %q", got)
	}
	rep = f.check(t, rlscheck.Options{})
	if got := grantFindings(rep, "notes"); len(got) != 1 || !strings.HasPrefix(got[0], f.admin+" holds TRIGGER on it") {
		t.Fatalf("TRIGGER to another role without --role: %q", got)
	}
	for _, fd := range rep.Findings {
		if fd.Kind == rlscheck.PrivilegeEscapesRLS && strings.Contains(fd.Problem, f.owner) {
			t.Fatalf("the owner's own rights: %+v", fd)
		}
	}

	f.exec(t, `CREATE TABLE docs_base (id bigint)`)
	inheritedDocs(t, f, "docs_base")
	f.exec(t, `ALTER TABLE docs_base ENABLE ROW LEVEL SECURITY; ALTER TABLE docs_base FORCE ROW LEVEL SECURITY;
ALTER TABLE docs_base OWNER TO `+f.owner+`;
GRANT TRUNCATE ON docs_base TO `+f.app)
	if got := grantFindings(f.check(t, rlscheck.Options{Role: f.app}), "docs_base"); len(got) != 1 || !strings.HasPrefix(got[0], f.app+" holds TRUNCATE on it") {
		t.Fatalf("TRUNCATE on a parent (which truncates its children): %q", got)
	}
}
