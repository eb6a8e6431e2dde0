package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/testing/testdb"
)

var keyLine = regexp.MustCompile(`^rfk_acme_([0-9a-f]{16})_[0-9a-f]{64}\n$`)

// TestKeysCreateListRevoke: keys create prints the key once, on one line
// of stdout, and its id on stderr; list shows it without secret in a table
// or as JSON lines, for one tenant or every tenant; revoke refuses it from
// then on, and revoking twice is harmless.
func TestKeysCreateListRevoke(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, nil)
		r := runCLI(t, "keys", "create", "--db", d, "--tenant", "acme", "--scope", "read,admin", "--name", "ci")
		m := keyLine.FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil {
			t.Fatalf("create: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		key, id := strings.TrimSpace(r.stdout), m[1]
		if !strings.Contains(r.stderr, id) || strings.Contains(r.stderr, key) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Fatalf("create: stderr %q; want one line with the id, without the key", r.stderr)
		}
		if r := runCLI(t, "keys", "create", "--db", d, "--tenant", "globex"); r.code != 0 {
			t.Fatalf("create with the default scopes: %d %q", r.code, r.stderr)
		}
		store, err := apikey.New(db, &apikey.Options{CacheTTL: -1})
		if err != nil {
			t.Fatal(err)
		}
		k, err := store.Verify(ctx, key)
		if err != nil || k.Tenant != "acme" || k.Scopes != apikey.Read|apikey.Admin || k.Name != "ci" {
			t.Fatalf("the printed key: %+v, %v", k, err)
		}

		r = runCLI(t, "keys", "list", "--db", d)
		secret := key[len(key)-64:]
		if r.code != 0 || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "read,admin") || !strings.Contains(r.stdout, "globex") ||
			!strings.Contains(r.stdout, "read,write") || strings.Contains(r.stdout, secret) {
			t.Fatalf("list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		r = runCLI(t, "keys", "list", "--db", d, "--tenant", "acme", "--format", "json")
		var got map[string]any
		if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || json.Unmarshal([]byte(r.stdout), &got) != nil ||
			got["tenant"] != "acme" || got["id"] != id || got["scopes"] != "read,admin" || got["name"] != "ci" || got["revoked_at"] != nil {
			t.Fatalf("list --tenant acme --format json: exit %d %q %q", r.code, r.stdout, r.stderr)
		}

		r = runCLI(t, "keys", "revoke", "--db", d, "--tenant", "acme", id)
		if r.code != 0 || !strings.Contains(r.stdout, "revoked") {
			t.Fatalf("revoke: exit %d %q %q", r.code, r.stdout, r.stderr)
		}
		if _, err := store.Verify(ctx, key); !errors.Is(err, apikey.ErrRefused) {
			t.Fatalf("after revoke: %v, want ErrRefused", err)
		}
		again := runCLI(t, "keys", "revoke", "--db", d, "--tenant", "acme", id)
		if again.code != 0 || again.stdout != r.stdout {
			t.Fatalf("revoke again: exit %d %q, want %q", again.code, again.stdout, r.stdout)
		}
		r = runCLI(t, "keys", "list", "--db", d, "--tenant", "acme", "--format", "json")
		if json.Unmarshal([]byte(r.stdout), &got) != nil || got["revoked_at"] == nil {
			t.Fatalf("list after revoke: %q", r.stdout)
		}

		// --format json: one object each, the fields of keys list (and the
		// token, once, from create).
		r = runCLI(t, "keys", "create", "--db", d, "--tenant", "acme", "--scope", "read", "--name", "json", "--format", "json")
		var created map[string]any
		if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || json.Unmarshal([]byte(r.stdout), &created) != nil || r.stderr != "" ||
			created["tenant"] != "acme" || created["scopes"] != "read" || created["name"] != "json" || created["id"] == nil || created["created_at"] == nil {
			t.Fatalf("create --format json: %+v", r)
		}
		if k, err := store.Verify(ctx, created["token"].(string)); err != nil || k.ID != created["id"] {
			t.Fatalf("the token of create --format json: %+v, %v", k, err)
		}
		r = runCLI(t, "keys", "revoke", "--db", d, "--tenant", "acme", "--format", "json", created["id"].(string))
		var revoked map[string]any
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &revoked) != nil || revoked["id"] != created["id"] || revoked["revoked_at"] == nil || revoked["token"] != nil {
			t.Fatalf("revoke --format json: %+v", r)
		}
	})
}

// TestKeysBadInputIsOneLineAndChangesNothing: every refused keys command
// prints one line on stderr, exits non-zero, and changes no key, no tenant
// and no file.
func TestKeysBadInputIsOneLineAndChangesNothing(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		f := newRefusalFixture(t, d)
		for _, args := range [][]string{
			{"keys", "create"},
			{"keys", "create", "--tenant", ""},
			{"keys", "create", "--tenant", "a b"},
			{"keys", "create", "--tenant", "-acme"},
			{"keys", "create", "--tenant", "acme", "--scope", "root"},
			{"keys", "create", "--tenant", "acme", "--scope", ""},
			{"keys", "create", "--tenant", "acme", "--name", "a\x01" + strings.Repeat("n", 300)},
			{"keys", "create", "--tenant", "acme", "extra"},
			{"keys", "list", "--format", "xml"},
			{"keys", "list", "--tenant", "a/b"},
			{"keys", "revoke", "--tenant", "acme"},
			{"keys", "revoke", "--tenant", "acme", "nope"},
			{"keys", "revoke", "--tenant", "acme", strings.ToUpper(f.key.ID)},
			{"keys", "revoke", "--tenant", "acme", "0123456789abcdef"},
			{"keys", "revoke", "--tenant", "globex", f.key.ID},
			{"keys", "revoke", f.key.ID},
			{"keys", "sideways"},
			{"keys"},
		} {
			r := runCLI(t, append(args, "--db", d)...)
			if r.code == 0 || !strings.HasPrefix(r.stderr, "racefree: ") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("%q: exit %d, stderr %q; want non-zero and one line", args, r.code, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("%q: stdout %q, want nothing", args, r.stdout)
			}
		}
		f.unchanged(t)
	})
	dir := t.TempDir()
	for _, args := range [][]string{
		{"keys", "create", "--tenant", "acme"},
		{"keys", "list"},
		{"keys", "revoke", "--tenant", "acme", "0123456789abcdef"},
	} {
		r := runCLI(t, append(args, "--db", "sqlite:"+filepath.Join(dir, "typo.db"))...)
		if r.code == 0 || !strings.Contains(r.stderr, "no database at ") {
			t.Errorf("%q on a missing file: exit %d, %q", args, r.code, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("keys on a missing file created %d files", len(entries))
	}
}

// refusalFixture is a database with one key, a read key of acme, on
// which the keys tests run refused commands and then prove that they
// changed nothing.
type refusalFixture struct {
	db     *racefree.DB
	store  *apikey.Store
	key    apikey.Created
	before string
}

// newRefusalFixture opens dsn (migrated), creates the key with apikey and
// notes the counts of keys, tenants and revoked keys.
func newRefusalFixture(t *testing.T, dsn string) *refusalFixture {
	t.Helper()
	f := &refusalFixture{db: testdb.Open(t, dsn, nil)}
	var err error
	if f.store, err = apikey.New(f.db, nil); err != nil {
		t.Fatal(err)
	}
	if f.key, err = f.store.Create(context.Background(), "acme", apikey.Read, ""); err != nil {
		t.Fatal(err)
	}
	f.before = f.state(t)
	return f
}

// state is the counts of keys, tenants and revoked keys, as one line.
func (f *refusalFixture) state(t *testing.T) string {
	t.Helper()
	var keys, tenants, revoked int
	if err := f.db.QueryRowContext(context.Background(), `SELECT (SELECT count(*) FROM racefree_keys), (SELECT count(*) FROM racefree_tenants),
		(SELECT count(*) FROM racefree_keys WHERE revoked_at IS NOT NULL)`).Scan(&keys, &tenants, &revoked); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d keys, %d tenants, %d revoked", keys, tenants, revoked)
}

// unchanged fails the test unless the counts are those newRefusalFixture
// noted and the key still verifies.
func (f *refusalFixture) unchanged(t *testing.T) {
	t.Helper()
	if after := f.state(t); after != f.before {
		t.Fatalf("refused commands changed keys, tenants or revocations: %s, was %s", after, f.before)
	}
	if _, err := f.store.Verify(context.Background(), f.key.Token); err != nil {
		t.Fatalf("the key after refused commands: %v", err)
	}
}

// TestMigrateUpAppRoleRefusals: --app-role is for PostgreSQL and a role
// that row-level security binds; SQLite is refused before anything is
// opened, a superuser is refused by the grant.
func TestMigrateUpAppRoleRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := runCLI(t, "migrate", "up", "--db", "sqlite:"+filepath.Join(dir, "x.db"), "--app-role", "app")
	if r.code == 0 || !strings.Contains(r.stderr, "PostgreSQL only") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("--app-role on SQLite: exit %d, %q", r.code, r.stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused migrate up created %d files", len(entries))
	}
	d := testdb.NewDSN(t, racefree.Postgres)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--app-role", "postgres"}, "superuser"},
		{[]string{"--app-role", "no_such_role_here"}, "does not exist"},
		{[]string{"--app-role", "bad\x01role"}, "control character"},
		{[]string{"--app-role", "app", "--to", "11"}, "012"},
	} {
		r := runCLI(t, append([]string{"migrate", "up", "--db", d}, c.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%q: exit %d, stderr %q; want one line with %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

// TestServeAsTheApplicationRole: the owner (a role that owns racefree's
// tables, neither superuser nor BYPASSRLS) runs migrate up --app-role app
// and creates keys; serve logs in as app, which owns nothing and which
// row-level security binds, and serves two tenants' keys.
func TestServeAsTheApplicationRole(t *testing.T) {
	t.Parallel()
	ownerDSN := testdb.OwnerDSN(t, testdb.NewDSN(t, racefree.Postgres))
	ownSchema(t, ownerDSN)
	appDSN := newAppRole(t, ownerDSN)
	role := userOf(t, appDSN)
	r := runCLI(t, "migrate", "up", "--db", ownerDSN, "--app-role", role)
	if r.code != 0 || !strings.Contains(r.stdout, "granted "+role) {
		t.Fatalf("migrate up --app-role: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	var keys []string
	for _, tenantID := range []string{"acme", "globex"} {
		r := runCLI(t, "keys", "create", "--db", ownerDSN, "--tenant", tenantID)
		if r.code != 0 {
			t.Fatalf("keys create: %d %q", r.code, r.stderr)
		}
		keys = append(keys, strings.TrimSpace(r.stdout))
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := cli(ctx, "serve", "--db", appDSN, "--addr", addr, "--require-key")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); <-exited }()
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil && !waitingForTheDatabase(resp) {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("readyz as the application role: %d\n%s", resp.StatusCode, stderr.String())
			}
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("serve as the application role exited: %v\n%s", err, stderr.String())
		case <-time.After(50 * time.Millisecond): // poll the state
		}
	}
	call := keyCaller(t, addr)
	for _, key := range keys {
		if code := call("POST", "/v1/claims/job", `{"holder":"w","ttl_ms":60000}`, key); code != 200 {
			t.Fatalf("acquire as the application role: %d\n%s", code, stderr.String())
		}
		if code := call("POST", "/v1/sequences/s/n/next", `{}`, key); code != 200 {
			t.Fatalf("next: %d\n%s", code, stderr.String())
		}
		if code := call("GET", "/v1/claims/job", "", key); code != 200 {
			t.Fatalf("get: %d\n%s", code, stderr.String())
		}
	}
	if code := call("GET", "/v1/claims/job", "", ""); code != 401 {
		t.Fatalf("without a key: %d, want 401", code)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, stderr.String())
	}
	exited <- nil
	if strings.Contains(stderr.String(), "level=WARN") || strings.Contains(stderr.String(), "level=ERROR") {
		t.Fatalf("serve as the application role logged failures (the reapers run at start):\n%s", stderr.String())
	}
}

// keyCaller returns a func that sends a request to the serve at addr,
// with key as its bearer token (none if key is empty), and returns the
// response's status code; a request that gets no response fails the test.
func keyCaller(t *testing.T, addr string) func(method, path, body, key string) int {
	return func(method, path, body, key string) int {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
}

// ownSchema makes dsn's user the owner of dsn's schema, as in a set-up
// where the owner role owns the application's schema (it may then grant
// USAGE on it), until the test ends.
func ownSchema(t *testing.T, dsn string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	admin, err := sql.Open("pgx", testdb.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, `ALTER SCHEMA `+schema+` OWNER TO `+u.User.Username()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(ctx, `ALTER SCHEMA `+schema+` OWNER TO CURRENT_USER`) })
}

// newAppRole creates a login role that is neither superuser nor BYPASSRLS
// and owns nothing, dropped when the test ends, and returns dsn logged in
// as it. Unlike testdb.AppDSN it grants nothing: migrate up --app-role
// does.
func newAppRole(t *testing.T, dsn string) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role := "rf_app_" + hex.EncodeToString(b)
	admin, err := sql.Open("pgx", testdb.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, `CREATE ROLE `+role+` LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(ctx, `DROP OWNED BY `+role)
		if _, err := admin.ExecContext(ctx, `DROP ROLE `+role); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

func userOf(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.User.Username()
}

// TestServeDuringTheRollout follows the README's rollout: migrate up --to
// 11 (expand only) while the previous release runs, deploy this release
// with --migrate=false (ready, serving the default tenant at 011), then
// migrate up applies 012 under it, and tenants' keys work.
func TestServeDuringTheRollout(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		if r := runCLI(t, "migrate", "up", "--db", d, "--to", "11"); r.code != 0 {
			t.Fatalf("migrate up --to 11: %d %q", r.code, r.stderr)
		}
		addr := freeAddr(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := cli(ctx, "serve", "--db", d, "--addr", addr, "--migrate=false")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
		if code := waitFor(t, "http://"+addr+"/readyz"); code != http.StatusOK {
			t.Fatalf("readyz at 011 with --migrate=false: %d\n%s", code, stderr.String())
		}
		call := keyCaller(t, addr)
		if code := call("POST", "/v1/claims/job", `{"holder":"w","ttl_ms":60000}`, ""); code != 200 {
			t.Fatalf("acquire at 011: %d\n%s", code, stderr.String())
		}
		if r := runCLI(t, "migrate", "up", "--db", d); r.code != 0 || !strings.HasPrefix(r.stdout, "schema at version ") || strings.Contains(r.stdout, "version 11") {
			t.Fatalf("migrate up: %d %q %q", r.code, r.stdout, r.stderr)
		}
		if code := call("POST", "/v1/claims/job/renew", `{"holder":"w","fence":1,"ttl_ms":60000}`, ""); code != 200 {
			t.Fatalf("renew at 012: %d\n%s", code, stderr.String())
		}
		r := runCLI(t, "keys", "create", "--db", d, "--tenant", "acme")
		if r.code != 0 {
			t.Fatalf("keys create: %d %q", r.code, r.stderr)
		}
		key := strings.TrimSpace(r.stdout)
		if code := call("GET", "/v1/claims/job", "", key); code != 404 {
			t.Fatalf("acme sees the default tenant's claim: %d", code)
		}
		if code := call("POST", "/v1/claims/job", `{"holder":"a","ttl_ms":60000}`, key); code != 200 {
			t.Fatalf("acme's acquire: %d\n%s", code, stderr.String())
		}
		if code := waitFor(t, "http://"+addr+"/readyz"); code != http.StatusOK {
			t.Fatalf("readyz at 012: %d", code)
		}
	})
}
