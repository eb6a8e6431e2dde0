package rlscheck_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/rlscheck"
)

// Edges found by a second round of mutants written from rls-check's code
// alone: each test here fails on a slip the other tests let through.

// TestOutside2EdgesRestrictiveMisreadsAreReported: the setting read
// outside the guarded form is reported on every applicable policy,
// restrictive ones too. Beside a correct permissive policy, a restrictive
// one reading current_setting without missing_ok is
// policy_setting_without_missing_ok, one without NULLIF
// policy_setting_without_nullif, one inside COALESCE
// policy_setting_coalesced, each on its own policy, with and without
// --role; and the first is a real fault: as the application role, on a
// connection that never set the setting, every read of the table fails.
func TestOutside2EdgesRestrictiveMisreadsAreReported(t *testing.T) {
	t.Parallel()
	f := setup(t)
	docsTable(t, f, "text", "acme")
	f.exec(t, `CREATE POLICY p ON docs USING (`+guardText+`) WITH CHECK (`+guardText+`)`)
	for _, c := range []struct {
		restrictive string
		want        rlscheck.Kind
	}{
		{`tenant_id = NULLIF(current_setting('racefree.tenant_id'), '')`, rlscheck.PolicyNoMissingOK},
		{`tenant_id = current_setting('racefree.tenant_id', true)`, rlscheck.PolicyNoNullIf},
		{`tenant_id = COALESCE(NULLIF(current_setting('racefree.tenant_id', true), ''), tenant_id)`, rlscheck.PolicyCoalesce},
	} {
		f.exec(t, `CREATE POLICY r ON docs AS RESTRICTIVE USING (`+c.restrictive+`)`)
		docsKinds(t, f, "restrictive "+c.restrictive, c.want)
		for _, role := range []string{f.app, ""} {
			fds := findingsOf(f.check(t, rlscheck.Options{Role: role}), c.want)
			if len(fds) != 1 || !strings.HasPrefix(fds[0].Object, `policy "r" on `) || !strings.Contains(fds[0].Problem, "USING") {
				t.Errorf("restrictive %s, role %q: %+v, want one %s on the restrictive policy naming USING", c.restrictive, role, fds, c.want)
			}
		}
		if c.want == rlscheck.PolicyNoMissingOK {
			if err := readWithoutSetting(t, f); err == nil || !strings.Contains(err.Error(), "racefree.tenant_id") {
				t.Errorf("a read on a connection that never set the setting: %v, want an error naming it", err)
			}
		}
		f.exec(t, `DROP POLICY r ON docs`)
	}
	docsKinds(t, f, "the correct permissive policy alone")
}

// readWithoutSetting reads docs as the fixture's app role on a connection
// of its own, which has never set racefree.tenant_id, and returns the
// read's error.
func readWithoutSetting(t *testing.T, f *fixture) error {
	t.Helper()
	db, err := sql.Open("pgx", f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SET LOCAL ROLE `+f.app); err != nil {
		t.Fatal(err)
	}
	var n int
	return tx.QueryRowContext(ctx, `SELECT count(*) FROM docs`).Scan(&n)
}

// TestOutside2EdgesColumnCastToBpchar: bpchar (character without a length)
// ignores trailing spaces in =, so tenant_id::bpchar = NULLIF(…)::bpchar on
// a text column admits, for tenant 'acme', the rows of tenant 'acme ':
// policy_not_proven with and without --role, and it leaks. The same guard
// with the column cast to text (or bare) passes and leaks nothing.
func TestOutside2EdgesColumnCastToBpchar(t *testing.T) {
	t.Parallel()
	f := setup(t)
	docsTable(t, f, "text", "acme", "acme ")
	g := `NULLIF(current_setting('racefree.tenant_id', true), '')`
	f.exec(t, `CREATE POLICY p ON docs USING (tenant_id::bpchar = `+g+`::bpchar) WITH CHECK (tenant_id::bpchar = `+g+`::bpchar)`)
	docsKinds(t, f, "the column cast to bpchar", rlscheck.PolicyNotProven)
	if leak, how := leaks(t, f.db, f.app, "acme", "acme "); !leak || !strings.Contains(how, "sees another's rows") {
		t.Fatalf("leaks %v (%s), want tenant 'acme' to see the rows of 'acme '", leak, how)
	}
	f.exec(t, `ALTER POLICY p ON docs USING (tenant_id::text = `+g+`::text) WITH CHECK (`+guardText+`)`)
	clean(t, f, "the column cast to text", "acme", "acme ")
}

// TestOutside2EdgesNameOverTheLimitSaysSo: a tenant column, role or
// schema name of 64 bytes (one past PostgreSQL's 63, which would cut it to
// another name) is an InputError that names the limit, not one that blames
// a control character the name does not have; 63 bytes is checked.
func TestOutside2EdgesNameOverTheLimitSaysSo(t *testing.T) {
	t.Parallel()
	f := setup(t)
	long := strings.Repeat("n", 63)
	for _, o := range []rlscheck.Options{
		{TenantColumn: long + "x"},
		{Role: long + "x"},
		{Schemas: []string{long + "x"}},
		{TenantColumn: strings.Repeat("é", 32)},
	} {
		_, err := rlscheck.New(f.db).Check(context.Background(), o)
		if !errors.Is(err, racefree.ErrInvalidInput) || !strings.Contains(err.Error(), "1 to 63 bytes, got 64") || strings.Contains(err.Error(), "control character") {
			t.Errorf("%+v: %v, want an InputError naming the 63-byte limit", o, err)
		}
	}
	rep := f.check(t, rlscheck.Options{TenantColumn: long})
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != rlscheck.NoTenantTable {
		t.Fatalf("a 63-byte tenant column no table has: %+v, want %s alone", rep.Findings, rlscheck.NoTenantTable)
	}
}
