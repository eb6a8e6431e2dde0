package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testdb"
)

// TestMain lets the tests run this binary as racefree itself: a child
// started with RACEFREE_TEST_AS_CLI=1 runs main instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("RACEFREE_TEST_AS_CLI") == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// cli returns a command that runs racefree with args in a child process.
func cli(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "RACEFREE_TEST_AS_CLI=1", "RACEFREE_DB=", "RACEFREE_ADDR=", "RACEFREE_TOKEN=", "RACEFREE_INBOX_SECRETS=")
	return cmd
}

type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs racefree with args in a child process. A child that parses
// SQL compiles the parser first, which takes a minute or more under -race on
// a busy machine.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := cli(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}

func TestMigrateUpFromConcurrentProcesses(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		const n = 4
		var wg sync.WaitGroup
		results := make([]result, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = runCLI(t, "migrate", "up", "--db", dsn)
			}()
		}
		wg.Wait()
		for i, r := range results {
			if r.code != 0 {
				t.Fatalf("process %d: exit %d: %s", i, r.code, r.stderr)
			}
		}
		db := testdb.Open(t, dsn, &racefree.Config{Schema: racefree.SchemaRequireCurrent})
		ms, _ := db.Migrations()
		var rows, distinct int
		if err := db.QueryRowContext(context.Background(), `SELECT count(*), count(DISTINCT version) FROM racefree_schema_migrations`).Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		if rows != len(ms) || distinct != len(ms) {
			t.Fatalf("%d rows, %d versions; want %d of each", rows, distinct, len(ms))
		}
		st := runCLI(t, "migrate", "status", "--db", dsn)
		if st.code != 0 || strings.Contains(st.stdout, "pending") {
			t.Fatalf("status: exit %d\n%s%s", st.code, st.stdout, st.stderr)
		}
	})
}

func TestBadInputIsOneLineAndWritesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "x.db")

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	for _, args := range [][]string{
		{"serve", "--db", "mysql://localhost/x"},
		{"serve", "--db", "sqlite:" + filepath.Join(dir, "missing", "x.db"), "--addr", "127.0.0.1:0"},
		{"serve", "--db", "sqlite:" + file, "--addr", busy.Addr().String()},
		{"serve", "--db", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2", "--addr", "127.0.0.1:0"},
		{"migrate", "up", "--db", "nope"},
		{"migrate", "sideways"},
		{"serve", "--no-such-flag"},
		{"serve", "--db", "sqlite:" + file, "--addr", "127.0.0.1:0", "--inbox-secret", "stripe=not-a-secret"},
		{"serve", "--db", "sqlite:" + file, "--addr", "127.0.0.1:0", "--inbox-secret", "stripe=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "--inbox-retention", "-1h"},
	} {
		r := runCLI(t, args...)
		if r.code == 0 {
			t.Errorf("%v: exit 0, want non-zero", args)
		}
		if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; lines != 1 || !strings.HasPrefix(r.stderr, "racefree: ") {
			t.Errorf("%v: stderr should be one line starting racefree:, got %q", args, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("bad input wrote %d files, want none", len(entries))
	}
}

func TestServeRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		db := testdb.Open(t, dsn, nil)
		if _, err := db.ExecContext(context.Background(), `INSERT INTO racefree_schema_migrations (version, name, applied_at) VALUES (999, 'future', 0)`); err != nil {
			t.Fatal(err)
		}
		r := runCLI(t, "serve", "--db", dsn, "--addr", "127.0.0.1:0")
		if r.code == 0 || !strings.Contains(r.stderr, "newer than this racefree") {
			t.Fatalf("exit %d, stderr %q; want a refusal", r.code, r.stderr)
		}
	})
}

func TestServeAnswersAndStopsGracefully(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := cli(ctx, "serve", "--db", "sqlite:"+filepath.Join(t.TempDir(), "r.db"), "--addr", addr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/readyz", "/healthz"} {
		if code := waitFor(t, "http://"+addr+path); code != http.StatusOK {
			t.Fatalf("%s: %d, want 200\n%s", path, code, stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v, want exit 0\n%s", err, stderr.String())
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	if r := runCLI(t, "version"); r.code != 0 || !strings.HasPrefix(r.stdout, "racefree ") {
		t.Fatalf("version: %+v", r)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitFor polls url until it answers, for up to 20 seconds.
func waitFor(t *testing.T, url string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return resp.StatusCode
		}
		if time.Now().After(deadline) {
			t.Fatal(fmt.Errorf("%s never answered: %w", url, err))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestServeInboxFromEnvironment(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := cli(ctx, "serve", "--db", "sqlite:"+filepath.Join(t.TempDir(), "r.db"), "--addr", addr, "--token", "tok")
	cmd.Env = append(cmd.Env, "RACEFREE_INBOX_SECRETS=stripe="+secret+",github="+secret)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	if code := waitFor(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Fatalf("readyz: %d\n%s", code, stderr.String())
	}
	body := `{"type":"ping"}`
	at := time.Now()
	sig, err := inbox.Sign(secret, "evt_1", at, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, source := range []string{"stripe", "github"} {
		for range 2 {
			req, _ := http.NewRequest("POST", "http://"+addr+"/v1/inbox/"+source, strings.NewReader(body))
			req.Header.Set("webhook-id", "evt_1")
			req.Header.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
			req.Header.Set("webhook-signature", sig)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				t.Fatalf("POST %s: %d, want 204\n%s", source, resp.StatusCode, stderr.String())
			}
		}
	}
}
