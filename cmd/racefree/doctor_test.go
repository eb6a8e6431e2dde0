package main

import (
	"context"
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
)

type doctorFinding struct {
	Code, Severity, Detail, Fix string
}

func doctorJSON(t *testing.T, r result) []doctorFinding {
	t.Helper()
	var got []doctorFinding
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	return got
}

func codes(fs []doctorFinding) map[string]string {
	m := map[string]string{}
	for _, f := range fs {
		m[f.Code] = f.Severity
	}
	return m
}

// TestDoctorCLISQLite: racefree's default SQLite (WAL, synchronous
// NORMAL) exits 0 with one info line; --format json prints the array; a
// schema behind exits 1; bad flags and an engine without roles exit 2.
func TestDoctorCLISQLite(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.SQLite)
	db := testdb.Open(t, d, nil)
	r := runCLI(t, "doctor", "--db", d)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "info sqlite-wal-normal: ") || strings.Count(r.stdout, "\n") != 1 || r.stderr != "" {
		t.Fatalf("default: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "doctor", "--db", d, "--format", "json")
	if got := codes(doctorJSON(t, r)); r.code != 0 || len(got) != 1 || got["sqlite-wal-normal"] != "info" {
		t.Fatalf("json: exit %d %v", r.code, got)
	}
	_ = db.Close()

	behind := testdb.NewDSN(t, racefree.SQLite)
	h, err := dsn.Open(context.Background(), behind, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.MigrateUpTo(context.Background(), 11); err != nil {
		t.Fatal(err)
	}
	_ = h.Close()
	r = runCLI(t, "doctor", "--db", behind, "--format", "json")
	if got := codes(doctorJSON(t, r)); r.code != 1 || got["schema-behind"] != "warn" || r.stderr != "racefree: doctor: 1 findings\n" {
		t.Fatalf("behind: exit %d %v %q", r.code, got, r.stderr)
	}
	r = runCLI(t, "doctor", "--db", behind)
	if r.code != 1 || !strings.Contains(r.stdout, "warn schema-behind: the schema is at version 11") || !strings.Contains(r.stdout, "(fix: racefree migrate up)") {
		t.Fatalf("behind, text: exit %d\n%s", r.code, r.stdout)
	}
	// What the finding tells a user to do names serve's real flags only.
	help := runCLI(t, "serve", "--help")
	for _, flag := range regexp.MustCompile(`--[a-z-]+`).FindAllString(r.stdout, -1) {
		if !strings.Contains(help.stdout+help.stderr, flag+" ") {
			t.Errorf("schema-behind names %s, which serve does not have:\n%s", flag, r.stdout)
		}
	}

	for _, args := range [][]string{
		{"doctor", "--db", d, "--format", "xml"},
		{"doctor", "--db", d, "--role", "app"},
		{"doctor", "--db", d, "--timeout", "0s"},
		{"doctor", "--db", d, "--no-such-flag"},
		{"doctor", "--db", "mysql://x"},
	} {
		if r := runCLI(t, args...); r.code != 2 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
}

// TestDoctorCLIPostgres: connecting as the superuser exits 1 with
// role-is-superuser; --role judging the application role exits 0; an
// unknown role and a server that does not answer exit 2.
func TestDoctorCLIPostgres(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	appDSN := testdb.AppDSN(t, owner, d)
	u, _ := url.Parse(appDSN)
	app := u.User.Username()

	r := runCLI(t, "doctor", "--db", d, "--format", "json")
	if got := codes(doctorJSON(t, r)); r.code != 1 || got["role-is-superuser"] != "error" {
		t.Fatalf("superuser: exit %d %v", r.code, got)
	}
	r = runCLI(t, "doctor", "--db", d)
	if r.code != 1 || !strings.Contains(r.stdout, "error role-is-superuser: \"postgres\" is a superuser") {
		t.Fatalf("superuser, text: exit %d\n%s", r.code, r.stdout)
	}
	if r := runCLI(t, "doctor", "--db", d, "--role", app); r.code != 0 || r.stderr != "" {
		t.Fatalf("--role %s: exit %d\n%s%s", app, r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "doctor", "--db", appDSN, "--format", "json"); r.code != 0 {
		t.Fatalf("as %s: exit %d\n%s%s", app, r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "doctor", "--db", d, "--role", "rf_no_such_role"); r.code != 2 || !strings.Contains(r.stderr, `"rf_no_such_role" does not exist`) {
		t.Fatalf("unknown role: exit %d %q", r.code, r.stderr)
	}
	if r := runCLI(t, "doctor", "--db", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2"); r.code != 2 || r.stdout != "" {
		t.Fatalf("no server: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}
