package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestMain lets the tests run this binary as racefree itself: a child
// started with RACEFREE_TEST_AS_CLI=1 runs main instead of the tests. The
// tests themselves run without the environment variables racefree reads,
// so that a developer's RACEFREE_DB cannot change what runCLI does.
func TestMain(m *testing.M) {
	if os.Getenv("RACEFREE_TEST_AS_CLI") == "1" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	for _, k := range []string{"RACEFREE_DB", "RACEFREE_ADDR", "RACEFREE_TOKEN", "RACEFREE_INBOX_SECRETS",
		"RACEFREE_METRICS_TOKEN", "RACEFREE_REFRESH_SECRET", "RACEFREE_REQUIRE_KEY", "RACEFREE_COMBINE"} {
		os.Unsetenv(k)
	}
	os.Exit(m.Run())
}

// cli returns a command that runs racefree with args in a child process.
func cli(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "RACEFREE_TEST_AS_CLI=1", "RACEFREE_DB=", "RACEFREE_ADDR=", "RACEFREE_TOKEN=", "RACEFREE_INBOX_SECRETS=")
	dieWithTheTest(cmd)
	return cmd
}

type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs racefree with args in this process and returns what a shell
// would see: the exit status and what it wrote. A command runs here as in
// its own process (run builds a new command tree each time and reads no
// global state), without a child's start-up, and, for rls-check, without
// compiling the policy parser again in every child. Tests of what only a
// process shows (serve, signals, a crash) start a child with cli.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	return runCLIWithStdin(t, "", args...)
}

// runCLIWithStdin runs racefree as runCLI does, with stdin as its standard
// input (runCLI's is empty: no command waits on the terminal).
func runCLIWithStdin(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// runRefusedServe runs racefree serve with args, which should make it
// refuse to start, and returns how it exited. It listens on --addr when
// args give one other than 127.0.0.1:0, else on a free address of its own.
// A serve that starts instead is killed as soon as /readyz answers 200
// and the test fails then, within seconds, not when runCLI's deadline
// ends it. (While it waits for its database, serve answers /healthz 200
// and /readyz 503: that is not a start.)
func runRefusedServe(t *testing.T, args ...string) result {
	t.Helper()
	args = append([]string{"serve"}, args...)
	addr := ""
	for i := 1; i+1 < len(args); i++ {
		if args[i] == "--addr" && args[i+1] != "127.0.0.1:0" {
			addr = args[i+1]
		}
	}
	if addr == "" {
		addr = freeAddr(t)
		args = slices.DeleteFunc(args, func(a string) bool { return a == "127.0.0.1:0" })
		args = slices.DeleteFunc(args, func(a string) bool { return a == "--addr" })
		args = append(args, "--addr", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := cli(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	client := &http.Client{Timeout: time.Second}
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case err := <-exited:
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			return result{code, out.String(), errb.String()}
		case <-poll.C:
			resp, err := client.Get("http://" + addr + "/readyz")
			if err != nil {
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// serve listens while it waits for its database (503
			// "waiting for the database"); any other answer means it
			// opened the database and serves: ready, or not ready on a
			// schema it should have refused.
			if resp.StatusCode != http.StatusOK && bytes.Contains(body, []byte("waiting for the database")) {
				continue
			}
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("%v: serve started (/readyz answered %d %s) instead of refusing\n%s", args, resp.StatusCode, body, errb.String())
		}
	}
}

// TestMigrateUpFromConcurrentProcesses starts four migrate up processes at
// once. On PostgreSQL it makes them meet: a transaction of the test creates
// the migrations table and holds it uncommitted until all four wait on a
// lock (one for the table, the others for the migration lock, or, without
// it, all four for the table), then rolls back, so that they race for the
// schema exactly when the migration lock matters.
func TestMigrateUpFromConcurrentProcesses(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		const n = 4
		ctx := context.Background()
		migrateDSN := dsn
		var release func()
		var exited atomic.Int32 // processes that finished: a failure to start stops the wait
		if strings.HasPrefix(dsn, "postgres") {
			app := fmt.Sprintf("rf_migrate_%d", time.Now().UnixNano())
			migrateDSN = dsn + "&application_name=" + app
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, `CREATE TABLE racefree_schema_migrations (version BIGINT PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}
			release = func() {
				for waiting := 0; waiting < n && exited.Load() == 0; time.Sleep(10 * time.Millisecond) { // poll the state
					if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&waiting); err != nil {
						t.Error(err)
						break
					}
				}
				if err := tx.Rollback(); err != nil {
					t.Error(err)
				}
			}
		}
		var wg sync.WaitGroup
		results := make([]result, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = runCLI(t, "migrate", "up", "--db", migrateDSN)
				exited.Add(1)
			}()
		}
		if release != nil {
			release()
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
		st = runCLI(t, "migrate", "status", "--db", dsn, "--format", "json")
		var status struct {
			Migrations []struct {
				Version   int64  `json:"version"`
				Applied   bool   `json:"applied"`
				AppliedAt string `json:"applied_at"`
			} `json:"migrations"`
		}
		if err := json.Unmarshal([]byte(st.stdout), &status); err != nil || st.code != 0 || len(status.Migrations) != len(ms) ||
			!status.Migrations[len(ms)-1].Applied || status.Migrations[len(ms)-1].AppliedAt == "" || status.Migrations[len(ms)-1].Version != ms[len(ms)-1].Version {
			t.Fatalf("status --format json: %+v (%v)", st, err)
		}
		up := runCLI(t, "migrate", "up", "--db", dsn, "--format", "json")
		var v struct {
			Version int64 `json:"version"`
		}
		if err := json.Unmarshal([]byte(up.stdout), &v); err != nil || up.code != 0 || v.Version != ms[len(ms)-1].Version {
			t.Fatalf("up --format json: %+v (%v)", up, err)
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
		{"serve", "--db", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2", "--addr", "127.0.0.1:0", "--wait-for-db", "0"},
		{"migrate", "up", "--db", "nope"},
		{"migrate", "sideways"},
		{"serve", "--no-such-flag"},
		{"serve", "--db", "sqlite:" + file, "--addr", "127.0.0.1:0", "--inbox-secret", "stripe=not-a-secret"},
		{"serve", "--db", "sqlite:" + file, "--addr", "127.0.0.1:0", "--inbox-secret", "stripe=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "--inbox-retention", "-1h"},
	} {
		var r result
		if args[0] == "serve" {
			r = runRefusedServe(t, args[1:]...)
		} else {
			r = runCLI(t, args...)
		}
		if r.code == 0 {
			t.Errorf("%v: exit 0, want non-zero", args)
		}
		if lines := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; lines != 1 || !strings.HasPrefix(r.stderr, "racefree: ") {
			t.Errorf("%v: stderr should be one line starting racefree:, got %q", args, r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("%v: bad input wrote to stdout: %q", args, r.stdout)
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
		r := runRefusedServe(t, "--db", dsn)
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

// TestOpenAPI checks that racefree openapi prints the document serve
// answers at /openapi.json, byte for byte what server.OpenAPIJSON makes
// (the copy clients/typescript generates its types from), and refuses an
// argument with one line.
func TestOpenAPI(t *testing.T) {
	t.Parallel()
	want, err := server.OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "openapi"); r.code != 0 || r.stdout != string(want) || !strings.Contains(r.stdout, `"openapi": "3.1.0"`) {
		t.Fatalf("openapi: exit %d, %d bytes, want %d\n%s", r.code, len(r.stdout), len(want), r.stderr)
	}
	if r := runCLI(t, "openapi", "extra"); r.code == 0 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Fatalf("openapi extra: %+v, want a non-zero exit and one line", r)
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

// waitFor polls url until it answers other than 503 (serve answers 503
// while it waits for its database), for up to 20 seconds, and returns
// the status (503 when that is all it got).
func waitFor(t *testing.T, url string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
				return resp.StatusCode
			}
		}
		if err != nil && time.Now().After(deadline) {
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

func TestMigrateStatusCreatesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := runCLI(t, "migrate", "status", "--db", "sqlite:"+filepath.Join(dir, "typo.db"))
	if r.code == 0 || !strings.Contains(r.stderr, "no database at ") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Fatalf("exit %d, stderr %q; want one line saying the file does not exist", r.code, r.stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("migrate status created %d files, want none", len(entries))
	}
}

func TestServeTimeoutsMetricsTokenAndExposureWarning(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	local := "127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := cli(ctx, "serve", "--db", "sqlite:"+filepath.Join(t.TempDir(), "r.db"), "--addr", "0.0.0.0:"+strconv.Itoa(port),
		"--read-timeout", "1s", "--request-timeout", "2s", "--write-timeout", "3s", "--metrics-token", "scrape")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if code := waitFor(t, "http://"+local+"/readyz"); code != http.StatusOK {
		t.Fatalf("readyz: %d", code)
	}

	for _, c := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer scrape", 200}} {
		req, _ := http.NewRequest("GET", "http://"+local+"/metrics", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("/metrics with %q: %d, want %d", c.auth, resp.StatusCode, c.want)
		}
	}

	// A body sent one byte at a time must not hold the connection past
	// --read-timeout: the server answers or closes the connection.
	conn, err := net.Dial("tcp", local)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /v1/claims/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, conn)
	}()
	drip := time.NewTicker(100 * time.Millisecond)
	defer drip.Stop()
	bound := time.NewTimer(10 * time.Second)
	defer bound.Stop()
dripping:
	for {
		select {
		case <-closed:
			break dripping
		case <-drip.C:
			if _, err := conn.Write([]byte("x")); err != nil {
				<-closed
				break dripping
			}
		case <-bound.C:
			t.Fatal("a slow body held the connection for 10s with --read-timeout 1s")
		}
	}
	if held := time.Since(start); held > 5*time.Second {
		t.Errorf("a slow body held the connection for %v with --read-timeout 1s", held)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, stderr.String())
	}
	if n := strings.Count(stderr.String(), "non-loopback address without --token"); n != 1 {
		t.Errorf("%d warnings about the exposed address, want 1:\n%s", n, stderr.String())
	}
}

func TestServeRefusesBadTimeouts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--read-timeout", "0s"},
		{"--idle-timeout", "-1s"},
		{"--request-timeout", "30s", "--write-timeout", "30s"},
		{"--metrics-timeout", "0s"},
	} {
		r := runRefusedServe(t, append([]string{"--db", "sqlite:" + filepath.Join(dir, "x.db")}, args...)...)
		if r.code == 0 || !strings.HasPrefix(r.stderr, "racefree: invalid ") {
			t.Errorf("%v: exit %d, %q; want a refusal", args, r.code, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused flags wrote %d files", len(entries))
	}
}

func TestServeFinishesInFlightRequestsOnSIGTERM(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	db := testdb.Open(t, d, nil)
	app := fmt.Sprintf("rf_shutdown_%d", time.Now().UnixNano())
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := cli(ctx, "serve", "--db", d+"&application_name="+app, "--addr", addr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if code := waitFor(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Fatalf("readyz: %d", code)
	}
	post := func(path, body string) int {
		resp, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/v1/claims/k", `{"holder":"w","ttl_ms":60000}`); code != 200 {
		t.Fatalf("acquire: %d", code)
	}
	// Hold the claim's row so that a renew is in flight, waiting on it.
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM racefree_claims WHERE key = 'k' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	renewed := make(chan int, 1)
	go func() { renewed <- post("/v1/claims/k/renew", `{"holder":"w","fence":1,"ttl_ms":60000}`) }()
	for waiting := 0; waiting == 0; time.Sleep(10 * time.Millisecond) { // poll the state
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Shutting down: no new connection is accepted ...
	for ; ; time.Sleep(10 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		c.Close()
	}
	// ... and the request in flight finishes once the row is free.
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if code := <-renewed; code != 200 {
		t.Fatalf("in-flight renew: %d, want 200\n%s", code, stderr.String())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v, want exit 0\n%s", err, stderr.String())
	}
}

func TestMigrateSQLConnectsToNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, d := range []string{"postgres://nobody@127.0.0.1:1/x?connect_timeout=1", "sqlite:" + filepath.Join(dir, "x.db")} {
		r := runCLI(t, "migrate", "sql", "--db", d)
		if r.code != 0 || !strings.Contains(r.stdout, "CREATE TABLE racefree_claims") {
			t.Errorf("migrate sql --db %s: exit %d, %q", d, r.code, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("migrate sql created %d files, want none", len(entries))
	}
}

func TestServeWithoutMigrateRefusesAnOutdatedSchema(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		r := runRefusedServe(t, "--db", dsn, "--migrate=false")
		if r.code == 0 || !strings.Contains(r.stderr, "racefree migrate up") {
			t.Fatalf("exit %d, stderr %q; want a refusal naming migrate up", r.code, r.stderr)
		}
	})
}

func TestServeDefaults(t *testing.T) {
	t.Parallel()
	f := serveCmd().Flags()
	for name, want := range map[string]string{
		"addr": "127.0.0.1:8080", "migrate": "true", "shutdown-timeout": "30s",
		"read-header-timeout": "10s", "read-timeout": "15s", "request-timeout": "20s", "write-timeout": "30s", "idle-timeout": "1m0s",
		"metrics-timeout": "5s", "claim-grace": "1h0m0s", "dedup-retention": "24h0m0s", "inbox-max-body": "1048576",
		"relay": "false", "relay-timeout": "30s", "combine": "true", "relay-lease": "1m0s", "relay-concurrency": "16", "relay-poll": "1s", "relay-listen": "true",
	} {
		if got := f.Lookup(name).DefValue; got != want {
			t.Errorf("--%s defaults to %s, want %s", name, got, want)
		}
	}
}

// TestServeCombinesByDefault starts serve with the combiner at its
// default, off with --combine=false and off with RACEFREE_COMBINE=false,
// acquires a claim over HTTP in each and reads on /metrics whether a batch
// of the combiner committed it.
func TestServeCombinesByDefault(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		args    []string
		env     string
		batches bool
	}{
		{"default", nil, "", true},
		{"--combine=false", []string{"--combine=false"}, "", false},
		{"RACEFREE_COMBINE=false", nil, "RACEFREE_COMBINE=false", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			addr := freeAddr(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := cli(ctx, append([]string{"serve", "--db", "sqlite:" + filepath.Join(t.TempDir(), "r.db"), "--addr", addr}, c.args...)...)
			if c.env != "" {
				cmd.Env = append(cmd.Env, c.env)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				_ = cmd.Wait()
			}()
			if code := waitFor(t, "http://"+addr+"/readyz"); code != http.StatusOK {
				t.Fatalf("readyz: %d\n%s", code, stderr.String())
			}
			// Two acquires: a tenant's first write in a process records
			// the tenant and runs alone, whether serve's own start-up
			// work wrote first or not (on a loaded machine this request
			// can come first); the second is the combiner's to take.
			for _, key := range []string{"job-0", "job-1"} {
				resp, err := http.Post("http://"+addr+"/v1/claims/"+key, "application/json", strings.NewReader(`{"holder":"w1","ttl_ms":30000}`))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("acquire %s: %d, want 200\n%s", key, resp.StatusCode, stderr.String())
				}
			}
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			// The combiner took the call when it ran it in a batch, or
			// when its batch failed whole and the call then ran alone.
			var batches, failed string
			for line := range strings.Lines(string(b)) {
				if v, ok := strings.CutPrefix(line, "racefree_combine_batches_total "); ok {
					batches = strings.TrimSpace(v)
				}
				if v, ok := strings.CutPrefix(line, "racefree_combine_failed_batches_total "); ok {
					failed = strings.TrimSpace(v)
				}
			}
			if batches == "" || failed == "" {
				t.Fatalf("/metrics has no racefree_combine_batches_total or racefree_combine_failed_batches_total:\n%s", b)
			}
			if got := batches != "0" || failed != "0"; got != c.batches {
				t.Fatalf("racefree_combine_batches_total %q, racefree_combine_failed_batches_total %q, want batches: %v", batches, failed, c.batches)
			}
			if failed != "0" {
				t.Logf("racefree_combine_failed_batches_total %q: the call's batch failed and it ran alone\n%s", failed, stderr.String())
			}
		})
	}
}

// TestMigrateUpTo stages a rollout: --to 11 applies the expand-only
// migration the previous release still runs against, and a later
// `migrate up` the rest. A bad --to is one line and creates nothing.
func TestMigrateUpTo(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		if r := runCLI(t, "migrate", "up", "--db", dsn, "--to", "11"); r.code != 0 || strings.TrimSpace(r.stdout) != "schema at version 11" {
			t.Fatalf("migrate up --to 11: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if r := runCLI(t, "migrate", "up", "--db", dsn); r.code != 0 || !strings.HasPrefix(r.stdout, "schema at version ") || strings.TrimSpace(r.stdout) == "schema at version 11" {
			t.Fatalf("migrate up: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	dir := t.TempDir()
	r := runCLI(t, "migrate", "up", "--db", "sqlite:"+filepath.Join(dir, "x.db"), "--to", "0")
	if r.code == 0 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "--to") {
		t.Errorf("migrate up --to 0: exit %d, stderr %q; want one line naming --to", r.code, r.stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused migrate up created %d files", len(entries))
	}
}
