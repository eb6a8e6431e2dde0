package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
)

func TestRLSCheckCLI(t *testing.T) {
	t.Parallel()
	// A database of its own: rls-check follows SECURITY DEFINER functions
	// in every schema, and other tests' would show up.
	dsn := testdb.NewDatabaseDSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	app := "rf_rls_cli_" + hex.EncodeToString(b)
	mustExec := func(q string) {
		t.Helper()
		if _, err := db.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	mustExec(`CREATE ROLE ` + app + ` NOLOGIN`)
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.Background(), `DROP OWNED BY `+app)
		if _, err := db.ExecContext(context.Background(), `DROP ROLE `+app); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	mustExec(`CREATE TABLE orders (id bigint PRIMARY KEY, tenant_id uuid NOT NULL);
ALTER TABLE orders ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON orders
  USING (tenant_id = NULLIF(current_setting('racefree.tenant_id', true), '')::uuid)
  WITH CHECK (tenant_id = NULLIF(current_setting('racefree.tenant_id', true), '')::uuid);
CREATE TABLE ledger (id bigint PRIMARY KEY, account_id bigint NOT NULL)`)

	// Each run that reads policies compiles the policy parser in a new
	// process (a minute under -race on a busy machine): two runs do.
	r := runCLI(t, "rls-check", "--db", dsn, "--role", app)
	if r.code != 1 || !strings.HasPrefix(r.stdout, `rls_not_forced "`) || !strings.Contains(r.stdout, `fix: ALTER TABLE "`) ||
		!strings.Contains(r.stdout, `."orders" FORCE ROW LEVEL SECURITY;`) || !strings.Contains(r.stdout, "\n1 findings: 1 tenant tables (column tenant_id)") {
		t.Fatalf("not forced: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r.stderr != "racefree: rls-check: 1 findings\n" {
		t.Errorf("stderr %q", r.stderr)
	}
	mustExec(`ALTER TABLE orders FORCE ROW LEVEL SECURITY`)
	if r := runCLI(t, "rls-check", "--db", dsn, "--role", app); r.code != 0 || !strings.HasPrefix(r.stdout, "no findings: 1 tenant tables (column tenant_id)") || r.stderr != "" {
		t.Fatalf("clean: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// ledger, a tenant table by account_id, has no policy to parse.
	r = runCLI(t, "rls-check", "--db", dsn, "--role", app, "--tenant-column", "account_id", "--format", "json")
	var got struct {
		Schemas      []string `json:"schemas"`
		TenantColumn string   `json:"tenant_column"`
		Setting      string   `json:"setting"`
		Role         string   `json:"role"`
		Tables       []string `json:"tenant_tables"`
		Findings     []struct {
			Kind, Object, Problem, Fix string
		} `json:"findings"`
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 1 || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("json: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	var kinds []string
	for _, f := range got.Findings {
		kinds = append(kinds, f.Kind)
		if !strings.Contains(f.Object, `."ledger"`) || f.Problem == "" || f.Fix == "" {
			t.Errorf("finding %+v", f)
		}
	}
	if len(got.Schemas) != 1 || got.TenantColumn != "account_id" || got.Setting != "racefree.tenant_id" || got.Role != app || len(got.Tables) != 1 ||
		strings.Join(kinds, " ") != "rls_disabled rls_not_forced policy_missing policy_missing policy_missing policy_missing" || got.Warnings == nil {
		t.Fatalf("json: %+v", got)
	}
	if !strings.Contains(got.Findings[3].Fix, `"account_id" = NULLIF(current_setting('racefree.tenant_id', true), '')::bigint`) {
		t.Errorf("fix %q", got.Findings[3].Fix)
	}

	// A tenant column no table has: nothing was checked, which is a
	// finding, not a pass.
	r = runCLI(t, "rls-check", "--db", dsn, "--role", app, "--tenant-column", "tenant_uuid")
	if r.code != 1 || !strings.HasPrefix(r.stdout, `no_tenant_table column "tenant_uuid"`+"\n") || !strings.Contains(r.stdout, `has the column "tenant_uuid": nothing was checked`) ||
		!strings.Contains(r.stdout, "\n1 findings: 0 tenant tables (column tenant_uuid)") || r.stderr != "racefree: rls-check: 1 findings\n" {
		t.Errorf("no tenant table: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	for _, args := range [][]string{
		{"--db", "sqlite:" + filepath.Join(t.TempDir(), "app.db")},
		{"--db", dsn, "--format", "xml"},
		{"--db", dsn, "--role", "rf_rls_no_such_role"},
		{"--db", dsn, "--schema", "rf_rls_no_such_schema"},
		{"--db", dsn, "--setting", "nodot"},
		{"--db", dsn, "--tenant-column", ""},
		{"--db", dsn, "--setting", ""},
		{"--db", dsn, "--timeout", "0s"},
		{"--db", "mysql://x"},
		{"--db", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2"},
		{},
		{"--db", dsn, "--no-such-flag"},
	} {
		r := runCLI(t, append([]string{"rls-check"}, args...)...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "racefree: ") || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := runCLI(t, "rls-check", "--db", "sqlite:app.db"); !strings.Contains(r.stderr, "row-level security is a PostgreSQL feature") {
		t.Errorf("sqlite: %q", r.stderr)
	}
}

// TestRLSCheckCLICancelled: rls-check under a cancelled context gives no
// verdict: nothing on stdout and exit 2 (could not check), never 0.
func TestRLSCheckCLICancelled(t *testing.T) {
	t.Parallel()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, args := range [][]string{{"--db", dsn}, {"--db", dsn, "--role", "postgres", "--format", "json"}} {
		var out bytes.Buffer
		cmd := rlsCheckCmd()
		cmd.SetArgs(args)
		cmd.SetOut(&out)
		cmd.SetErr(io.Discard)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.ExecuteContext(ctx)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitFailed || !errors.Is(ee.err, context.Canceled) || out.Len() != 0 {
			t.Errorf("%v, cancelled: err %v, stdout %q; want exit %d with context.Canceled and no output", args, err, out.String(), exitFailed)
		}
	}
}
