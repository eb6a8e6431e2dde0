package rlscheck_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"

	"github.com/racefree/racefree/rlscheck"
)

// TestCheckJudgesWhatEqualsMeansForTheColumn: the guard proves one
// tenant's rows only where = on the tenant column holds between identical
// ids alone. A text column with a nondeterministic collation (= ignores
// case), a column of a type that is not PostgreSQL's own (a domain here,
// as citext would be), and an = of the user's that the checking session's
// search_path finds before pg_catalog's (it prints as a bare = there) are
// policy_not_proven, with and without --role, whatever the checker's
// search_path; the collation and the = leak, as the application role
// reads or writes 'ACME' as tenant 'acme' (the domain, whose = is text's,
// does not, and is reported all the same: a type of the user's brings its
// own = and casts, which the check does not read). The same guard on a column with a
// deterministic collation ("C", an ICU one) passes and leaks nothing.
func TestCheckJudgesWhatEqualsMeansForTheColumn(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `
CREATE SCHEMA ext;
CREATE COLLATION ext.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE COLLATION ext.cs (provider = icu, locale = 'und-u-ks-level3', deterministic = true);
CREATE DOMAIN ext.tid AS text;
CREATE FUNCTION ext.ci_eq(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT lower($1) OPERATOR(pg_catalog.=) lower($2)';
CREATE OPERATOR ext.= (LEFTARG = text, RIGHTARG = text, FUNCTION = ext.ci_eq)`)
	// The checker's second pool finds ext's = first, as the policy's
	// author did.
	extFirst, err := sql.Open("pgx", f.dsn+sep(f.dsn)+"search_path=ext,pg_catalog")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = extFirst.Close() })
	guard := `tenant_id = NULLIF(current_setting('racefree.tenant_id', true), '')`
	for _, c := range []struct {
		name, column string
		extFirst     bool // the policy is created with ext before pg_catalog on the search path
		proven       bool
		leaks        bool
	}{
		{"a nondeterministic collation", `text COLLATE ext.ci`, false, false, true},
		{"a domain", `ext.tid`, false, false, false}, // reported, though this one's = is text's
		{"an = of the user's found first", `text`, true, false, true},
		{`the collation "C"`, `text COLLATE "C"`, false, true, false},
		{"a deterministic ICU collation", `text COLLATE ext.cs`, false, true, false},
		{"the default collation, with ext first", `text`, false, true, false},
	} {
		create := `CREATE POLICY p ON docs USING (` + guard + `) WITH CHECK (` + guard + `)`
		if c.extFirst {
			create = `BEGIN; SET LOCAL search_path = ext, pg_catalog, public; ` + create + `; COMMIT`
		}
		f.exec(t, `DROP TABLE IF EXISTS docs;
CREATE TABLE docs (id bigint PRIMARY KEY, tenant_id `+c.column+`, author text);
ALTER TABLE docs ENABLE ROW LEVEL SECURITY;
ALTER TABLE docs FORCE ROW LEVEL SECURITY;
ALTER TABLE docs OWNER TO `+f.owner+`;
GRANT SELECT, INSERT, UPDATE, DELETE ON docs TO `+f.app+`;
INSERT INTO docs VALUES (1, 'acme', 'acme'), (2, 'ACME', 'acme');
`+create)
		for _, db := range []*sql.DB{f.db, extFirst} {
			for _, role := range []string{f.app, ""} {
				rep, err := rlscheck.New(db).Check(context.Background(), rlscheck.Options{Role: role, Schemas: []string{"public"}})
				if err != nil {
					t.Fatal(err)
				}
				var got []rlscheck.Kind
				for _, fd := range rep.Findings {
					if strings.Contains(fd.Object, `."docs"`) && !slices.Contains(got, fd.Kind) {
						got = append(got, fd.Kind)
						if !c.proven && c.column != "text" && !strings.Contains(fd.Problem, "the column \"tenant_id\"") {
							t.Errorf("%s: the problem does not say why: %s", c.name, fd.Problem)
						}
					}
				}
				want := []rlscheck.Kind{rlscheck.PolicyNotProven}
				if c.proven {
					want = nil
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s, role %q, ext first on the checker's path %v: kinds %v, want %v", c.name, role, db == extFirst, got, want)
				}
			}
		}
		if leak, how := leaks(t, f.db, f.app, "acme", "ACME"); leak != c.leaks {
			t.Errorf("%s: leaks %v (%s), want %v", c.name, leak, how, c.leaks)
		}
	}
}

// sep is what joins one more parameter to dsn.
func sep(dsn string) string {
	if strings.Contains(dsn, "?") {
		return "&"
	}
	return "?"
}
