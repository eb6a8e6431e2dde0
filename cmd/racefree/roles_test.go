package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/roles"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// becomeKind is the rls-check kind of an escape by SET ROLE.
var becomeKind = map[roles.Kind]string{
	roles.Superuser: "role_can_become_superuser",
	roles.BypassRLS: "role_can_become_bypassrls",
	roles.Owner:     "role_can_become_owner",
}

// TestAppRoleEscapesAreJudgedEverywhere: roles whose own attributes are
// clean but that read every tenant after one SET ROLE (a member of a
// BYPASSRLS role, a NOINHERIT member of the tables' owner, a member of a
// superuser role, a chain of two memberships) are refused by migrate up
// --app-role before anything is migrated (exit 1, one line naming the
// path), and reported by rls-check --role (exit 1). A clean role is
// granted and passes.
func TestAppRoleEscapesAreJudgedEverywhere(t *testing.T) {
	t.Parallel()
	base := testdb.NewDSN(t, racefree.Postgres)
	ownerDSN := testdb.OwnerDSN(t, base)
	ownSchema(t, ownerDSN)
	ou, _ := url.Parse(ownerDSN)
	rs := testdb.MakeEscapeRoles(t, ou.User.Username())
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	migrated := func() bool {
		var ok bool
		if err := admin.QueryRowContext(context.Background(), `SELECT to_regclass('racefree_schema_migrations') IS NOT NULL`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// On the fresh database: no table exists yet, the owner-to-be is the
	// role that migrates.
	for _, e := range rs.Escapes {
		r := runCLI(t, "migrate", "up", "--db", ownerDSN, "--app-role", e.Role)
		if r.code != 1 || !strings.Contains(r.stderr, `can SET ROLE to "`+e.Reached+`"`) || !strings.Contains(r.stderr, "nothing migrated or granted") ||
			strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || strings.Contains(r.stdout, "granted") {
			t.Errorf("migrate up --app-role %s: exit %d, stdout %q, stderr %q; want exit 1 and one line naming the path to %s", e.Name, r.code, r.stdout, r.stderr, e.Reached)
		}
		if migrated() {
			t.Fatalf("migrate up --app-role %s migrated before refusing", e.Name)
		}
	}
	if r := runCLI(t, "migrate", "up", "--db", ownerDSN, "--app-role", rs.Clean); r.code != 0 || !strings.Contains(r.stdout, "granted "+rs.Clean) {
		t.Fatalf("migrate up --app-role clean: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	// Migrated: the tables exist, and their owner is judged as such.
	for _, e := range rs.Escapes {
		if r := runCLI(t, "migrate", "up", "--db", ownerDSN, "--app-role", e.Role); r.code != 1 || !strings.Contains(r.stderr, `"`+e.Reached+`"`) {
			t.Errorf("migrate up --app-role %s once migrated: exit %d %q", e.Name, r.code, r.stderr)
		}
		var granted bool
		if err := admin.QueryRowContext(context.Background(), `SELECT has_table_privilege($1, 'racefree_claims', 'SELECT')`, e.Role).Scan(&granted); err != nil || granted {
			t.Errorf("%s was granted SELECT on racefree_claims (%v)", e.Name, err)
		}
	}
	for _, e := range rs.Escapes {
		r := runCLI(t, "rls-check", "--db", ownerDSN, "--role", e.Role, "--tenant-column", "tenant", "--format", "json")
		var rep struct {
			Findings []struct{ Kind, Object, Problem, Fix string } `json:"findings"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 {
			t.Fatalf("rls-check --role %s: exit %d, %v\n%s%s", e.Name, r.code, err, r.stdout, r.stderr)
		}
		found := false
		for _, f := range rep.Findings {
			if f.Kind == becomeKind[e.Kind] && strings.Contains(f.Problem, `"`+e.Reached+`"`) && strings.HasPrefix(f.Fix, `REVOKE "`+e.Path[1]+`" FROM "`+e.Role+`"`) {
				found = true
			}
		}
		if !found {
			t.Errorf("rls-check --role %s: %+v, want %s naming %s", e.Name, rep.Findings, becomeKind[e.Kind], e.Reached)
		}
	}
	if r := runCLI(t, "rls-check", "--db", ownerDSN, "--role", rs.Clean, "--tenant-column", "tenant"); r.code != 0 {
		t.Errorf("rls-check --role clean: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestServeWarnsWhenItsRoleEscapes: serve logged in as a role that can
// SET ROLE to a BYPASSRLS role through a chain starts, logs one warning
// line with the path, answers /readyz 200 with the warning's code, and
// racefree_role_findings counts it.
func TestServeWarnsWhenItsRoleEscapes(t *testing.T) {
	t.Parallel()
	ownerDSN := testdb.OwnerDSN(t, testdb.NewDSN(t, racefree.Postgres))
	ownSchema(t, ownerDSN)
	ou, _ := url.Parse(ownerDSN)
	rs := testdb.MakeEscapeRoles(t, ou.User.Username())
	e := rs.Escapes[3] // the chain
	if r := runCLI(t, "migrate", "up", "--db", ownerDSN); r.code != 0 {
		t.Fatalf("migrate up: %d %q", r.code, r.stderr)
	}
	owner, err := sql.Open("pgx", ownerDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Close() })
	testdb.ExecAll(t, owner,
		`GRANT USAGE ON SCHEMA `+ou.Query().Get("search_path")+` TO `+e.Role,
		`GRANT SELECT ON racefree_schema_migrations TO `+e.Role,
	)
	u, _ := url.Parse(ownerDSN)
	u.User = url.User(e.Role)
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := cli(ctx, "serve", "--db", u.String(), "--addr", addr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); <-exited }()
	var body []byte
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			// While serve opens its database, judges its role and runs
			// the doctor's checks, /readyz answers 503 waiting.
			if resp.StatusCode == http.StatusOK {
				break
			}
			if !strings.Contains(string(body), "waiting for the database") {
				t.Fatalf("readyz: %d %s", resp.StatusCode, body)
			}
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("serve exited: %v\n%s", err, stderr.String())
		case <-time.After(50 * time.Millisecond): // poll the state
		}
	}
	if !strings.Contains(string(body), `"warnings":[{"code":"role-bypasses-rls"`) {
		t.Errorf("readyz %s, want the warning role-bypasses-rls", body)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(m), `racefree_role_findings{code="role-bypasses-rls"} 1`) {
		t.Errorf("metrics lack racefree_role_findings{code=\"role-bypasses-rls\"} 1")
	}
	// racefree doctor's checks ran at start too: on /readyz, in
	// racefree_doctor_findings and in the log.
	if !strings.Contains(string(body), `{"code":"role-bypasses-rls","severity":"error"}`) || !strings.Contains(string(body), `"doctor":[`) {
		t.Errorf("readyz %s, want the doctor finding role-bypasses-rls", body)
	}
	if !strings.Contains(string(m), `racefree_doctor_findings{code="role-bypasses-rls"} 1`) {
		t.Errorf("metrics lack racefree_doctor_findings{code=\"role-bypasses-rls\"} 1")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-exited
	exited <- nil
	var warned, doctored int
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, `msg="doctor: `) && strings.Contains(line, "level=WARN") && strings.Contains(line, "code=role-bypasses-rls") && strings.Contains(line, "severity=error") {
			doctored++
			continue
		}
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "code=role-bypasses-rls") &&
			strings.Contains(line, `can SET ROLE to \"`+e.Reached+`\" (through \"`+e.Path[1]+`\")`) {
			warned++
		}
	}
	if warned != 1 || doctored != 1 {
		t.Errorf("%d warning lines with the path and %d doctor lines, want 1 each:\n%s", warned, doctored, stderr.String())
	}
}
