package reliability

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/testing/testdb"
)

// startPgBouncer starts Debian's pgbouncer in transaction mode on a
// loopback port, in front of a fresh database of its own (a pooler keeps
// no session settings, so a schema picked by search_path would not
// survive it), and returns the DSN through it. Without the binary the test
// is skipped with a reason, and fails under CI=true, where .ci/run
// installs it.
func startPgBouncer(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("pgbouncer is not installed; .ci/run installs Debian's pgbouncer")
		}
		t.Skip("pgbouncer is not installed (apt-get install pgbouncer); the pooler test did not run")
	}
	base, err := url.Parse(testdb.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("pgx", base.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	name := fmt.Sprintf("rf_pooler_%d", time.Now().UnixNano())
	if _, err := admin.Exec(`CREATE DATABASE ` + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(`DROP DATABASE ` + name + ` WITH (FORCE)`); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})

	// pgbouncer refuses to run as root; as another user it must read
	// its files, so they live in a directory of their own, readable.
	dir, err := os.MkdirTemp("", "racefree-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	user := base.User.Username()
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	pgHost, pgPort, _ := net.SplitHostPort(base.Host)
	files := map[string]string{
		"users.txt": fmt.Sprintf("%q \"\"\n", user),
		"pgbouncer.ini": fmt.Sprintf(`[databases]
* = host=%s port=%s
[pgbouncer]
listen_addr = %s
listen_port = %s
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 200
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
`, pgHost, pgPort, host, port, filepath.Join(dir, "users.txt")),
	}
	for f, text := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		args = append([]string{"-u", "postgres"}, args...)
	}
	cmd := exec.Command(bin, args...)
	var out lockedWriter
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })

	u := *base
	u.Host, u.Path = addr, "/"+name
	q := u.Query()
	q.Del("search_path")
	q.Set("default_query_exec_mode", "exec")
	u.RawQuery = q.Encode()
	through := u.String()
	db, err := sql.Open("pgx", through)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-done:
			t.Fatalf("pgbouncer exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer did not answer in 20s: %v\n%s", err, strings.TrimSpace(out.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return through
}

// TestThroughATransactionPooler serves a database through PgBouncer in
// transaction mode, as the README says it works: the load of every
// primitive, from two racefree instances sharing the pooler, keeps every
// acknowledged write and every invariant, and one Idempotency-Key sent to
// both runs once. Nothing depends on session state.
func TestThroughATransactionPooler(t *testing.T) {
	t.Parallel()
	dsn := startPgBouncer(t)
	keys := auditKeyring(t) // the instances share their keyring, as they must
	first := startServe(t, dsn, "--inbox-secret", "billing="+webhookSecret, keys, "--relay-listen=false")
	second := startServe(t, dsn, "--inbox-secret", "billing="+webhookSecret, keys, "--relay-listen=false")
	l := newLedger()
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := first
			if c%2 == 1 {
				in = second
			}
			for i := range testdb.Scale(28, 700) {
				load(t, in, l, c, i)
			}
		}()
	}
	wg.Wait()
	answers := make([]answer, 4)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := first
			if i%2 == 1 {
				in = second
			}
			answers[i] = settle(t, "POST", in.url("/v1/sequences/other/n/next"), `{"n":1}`, "pooled-once")
		}()
	}
	wg.Wait()
	for i, a := range answers {
		if a.code != 200 || a.int("first") != 1 {
			t.Errorf("answer %d: %d %v; want number 1 from the one run", i, a.code, a.body)
		}
	}
	t.Logf("%d operations through PgBouncer in transaction mode", l.ops)
	checkLedger(t, first, dsn, l)
}
