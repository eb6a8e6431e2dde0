package main

import (
	"context"
	"strings"
	"testing"

	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestAuditVerifyOnAReadOnlyNodeWithEachOptionalFlag: audit verify --db
// only reads with each of its optional flags too: --format json,
// --parallel 1, --strict, --tenant of a tenant with chains and of one the
// database never saw (which a read must not register); each exits by its
// verdict, 0 intact and 1 broken, never 2.
func TestAuditVerifyOnAReadOnlyNodeWithEachOptionalFlag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewPostgresDatabase(t)
	dir := t.TempDir()
	keys, ring := keygenKeyring(t, dir)
	db := testdb.Open(t, d, nil)
	l, _ := audit.New(db, ring)
	tctx, err := tenant.With(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ctx   context.Context
		scope string
	}{{ctx, "orders"}, {ctx, "globex"}, {tctx, "orders"}} {
		if _, err := l.Append(c.ctx, db, c.scope, audit.Entry{Actor: "alice", Action: "login"}); err != nil {
			t.Fatal(err)
		}
	}
	forgeActor(t, db, "scope = 'globex'")
	_ = db.Close()
	testdb.SetReadOnly(t, d, true)

	base := []string{"audit", "verify", "--db", d, "--keys", keys}
	for _, c := range []struct {
		flags []string
		code  int
		out   string
	}{
		{[]string{"--scope", "orders", "--format", "json"}, 0, `"scope":"orders"`},
		{[]string{"--format", "json"}, 1, `"scope":"globex"`},
		{[]string{"--parallel", "1"}, 1, "globex: BROKEN at 1: modified"},
		{[]string{"--scope", "orders", "--strict"}, 0, "orders: intact, 1 entries"},
		{[]string{"--strict"}, 1, "globex: BROKEN at 1: modified"},
		{[]string{"--tenant", "acme"}, 0, "orders: intact, 1 entries"},
		{[]string{"--tenant", "never-seen"}, 0, ""},
		{[]string{"--tenant", "never-seen", "--format", "json", "--parallel", "1", "--strict"}, 0, ""},
	} {
		r := runCLI(t, append(base, c.flags...)...)
		if r.code != c.code || !strings.Contains(r.stdout, c.out) || strings.Contains(r.stderr, "read-only") {
			t.Errorf("verify %q on a read-only node: exit %d, stdout %q, stderr %q; want exit %d and %q", c.flags, r.code, r.stdout, r.stderr, c.code, c.out)
		}
	}
}
