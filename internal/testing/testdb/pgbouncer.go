package testdb

import (
	"bytes"
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
)

// PgBouncer starts Debian's pgbouncer in transaction mode on a loopback
// port, with poolSize server connections per database (and ten times as
// many clients), in front of a fresh database of its own, from the pool
// of [NewDatabaseDSN] (a pooler keeps no session settings, so a schema
// picked by search_path would not survive it), and returns the DSN
// through it, with default_query_exec_mode=exec. It stops, and the
// database goes back to the pool, when the test ends. Without the binary
// the test is skipped with a reason, and fails under CI=true, where
// .ci/run installs it.
func PgBouncer(t testing.TB, poolSize int) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("pgbouncer is not installed; .ci/run installs Debian's pgbouncer")
		}
		t.Skip("pgbouncer is not installed (apt-get install pgbouncer); the pooler test did not run")
	}
	base, err := url.Parse(PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pooled, err := url.Parse(poolDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(pooled.Path, "/")

	// pgbouncer refuses to run as root; as another user it must read
	// its files, so they live in a directory of their own, readable.
	dir, err := os.MkdirTemp("", "racefree-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	host, port, _ := net.SplitHostPort(addr)
	pgHost, pgPort, _ := net.SplitHostPort(base.Host)
	files := map[string]string{
		"users.txt": fmt.Sprintf("%q \"\"\n", base.User.Username()),
		"pgbouncer.ini": fmt.Sprintf(`[databases]
* = host=%s port=%s
[pgbouncer]
listen_addr = %s
listen_port = %s
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = %d
default_pool_size = %d
ignore_startup_parameters = extra_float_digits
`, pgHost, pgPort, host, port, filepath.Join(dir, "users.txt"), 10*poolSize, poolSize),
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
	var out lockedBuffer
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
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) { // poll the state
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return through
		}
		select {
		case <-done:
			t.Fatalf("pgbouncer exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer did not answer in 20s: %v\n%s", err, strings.TrimSpace(out.String()))
		}
	}
}

// lockedBuffer is a bytes.Buffer that a process's output and a test may
// use at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
