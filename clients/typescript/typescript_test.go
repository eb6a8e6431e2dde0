package typescript

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestOpenAPICopyIsCurrent fails when openapi.json, from which the
// client's types are generated, is not the document the server serves:
// the client must not drift from the server.
func TestOpenAPICopyIsCurrent(t *testing.T) {
	t.Parallel()
	got, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	want, err := server.OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("clients/typescript/openapi.json is not the server's OpenAPI document: run `npm run generate` in clients/typescript " +
			"(it runs `racefree openapi` and regenerates src/schema.ts), and commit both")
	}
}

// liveServer is one racefree serve process the Node tests talk to, as
// they receive it in RACEFREE_TEST_SERVERS.
type liveServer struct {
	Engine      string `json:"engine"`
	URL         string `json:"url"`
	Token       string `json:"token"`        // serve --token: every scope
	ReadKey     string `json:"read_key"`     // an API key with the read scope only
	InboxSource string `json:"inbox_source"` // the source of InboxSecret
	InboxSecret string `json:"inbox_secret"` // whsec_…
	DeadTopic   string `json:"dead_topic"`   // the relay delivers it to a sink that refuses every message: it dies
}

// TestTypeScriptClient runs the TypeScript client's tests (npm test, with
// Node's built-in runner) against racefree serve on each engine. Without
// node or npm, or when npm ci cannot install the pinned packages, it
// skips, and fails under CI=true.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	ci := os.Getenv("CI") == "true"
	unavailable := func(format string, args ...any) {
		t.Helper()
		if ci {
			t.Fatalf(format, args...)
		}
		t.Skipf(format+" (CI=true fails instead)", args...)
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable("%s is not installed, so the TypeScript client's tests did not run", tool)
		}
	}
	if out, err := npmCI(); err != nil {
		unavailable("npm ci failed, so the TypeScript client's tests did not run: %v\n%s", err, out)
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "racefree")
	// -trimpath: the flags of CI's plain build (go vet -trimpath), so
	// that the packages it compiled serve this build too; without it
	// every dependency compiled again, about two minutes of CPU.
	if out, err := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/racefree/racefree/cmd/racefree").CombinedOutput(); err != nil {
		t.Fatalf("building racefree: %v\n%s", err, out)
	}
	keys := filepath.Join(dir, "audit-keys.json")
	out, err := exec.Command(bin, "audit", "keygen").Output()
	if err != nil {
		t.Fatalf("racefree audit keygen: %v", err)
	}
	if err := os.WriteFile(keys, out, 0o600); err != nil {
		t.Fatal(err)
	}

	// The sink of the relays: it refuses every message for good (422), so
	// that a message of the dead topic dies at its first delivery.
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "refused by the test's sink", http.StatusUnprocessableEntity)
	}))
	t.Cleanup(sink.Close)

	var servers []liveServer
	for _, engine := range testdb.Engines {
		if engine == racefree.Postgres && os.Getenv("TEST_DATABASE_URL") == "" {
			testdb.PostgresURL(t) // fails under RACEFREE_REQUIRE_POSTGRES=1
		}
		if engine == racefree.Postgres && os.Getenv("TEST_DATABASE_URL") == "" {
			continue
		}
		dsn := testdb.NewDSN(t, engine)
		s := liveServer{Engine: engine, Token: "rf-ts-token-" + engine, InboxSource: "shop",
			InboxSecret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", DeadTopic: "ts-dead"}
		s.URL = startServe(t, bin, "--db", dsn, "--token", s.Token, "--audit-keys", keys,
			"--inbox-secret", s.InboxSource+"="+s.InboxSecret,
			"--relay", "--relay-url", s.DeadTopic+"="+sink.URL, "--relay-poll", "100ms")
		key, err := exec.Command(bin, "keys", "create", "--db", dsn, "--tenant", "default", "--scope", "read", "--name", "ts-read").Output()
		if err != nil {
			t.Fatalf("racefree keys create: %v", err)
		}
		s.ReadKey = strings.TrimSpace(string(key))
		servers = append(servers, s)
	}
	env, err := json.Marshal(servers)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "test")
	cmd.Env = append(os.Environ(), "RACEFREE_TEST_SERVERS="+string(env))
	cmd.WaitDelay = 5 * time.Second // node's test runner, if npm is killed, must not hold the output open
	started := time.Now()
	out, err = cmd.CombinedOutput()
	t.Logf("npm test took %v", time.Since(started).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("npm test: %v\n%s", err, out)
	}
	if testing.Verbose() {
		t.Logf("%s", out)
	}
}

// npmCI installs the pinned packages (package-lock.json) into
// node_modules, unless what it installed last is current. npm's cache is
// the user's cache directory's racefree/npm (like Go's build cache), so
// that every copy of the checkout (the mutation runner makes one per
// mutant) installs from it instead of from the registry.
func npmCI() ([]byte, error) {
	lock, err := os.Stat("package-lock.json")
	if err != nil {
		return nil, err
	}
	if installed, err := os.Stat(filepath.Join("node_modules", ".package-lock.json")); err == nil && !installed.ModTime().Before(lock.ModTime()) {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"ci", "--no-audit", "--no-fund", "--prefer-offline"}
	if dir, err := os.UserCacheDir(); err == nil {
		args = append(args, "--cache", filepath.Join(dir, "racefree", "npm"))
	}
	return exec.CommandContext(ctx, "npm", args...).CombinedOutput()
}

// startServe starts racefree serve with args on a free loopback port,
// waits until it is ready, stops it when the test ends, and returns its
// base URL.
func startServe(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "info"}, args...)...)
	cmd.Env = append(os.Environ(), "RACEFREE_TOKEN=", "RACEFREE_INBOX_SECRETS=", "RACEFREE_DB=", "RACEFREE_ADDR=", "RACEFREE_REQUIRE_KEY=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	addr := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Bytes()
			log.Write(append(line, '\n'))
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "racefree serving" {
				addr <- rec.Addr
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { <-copied; done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("racefree serve %s:\n%s", strings.Join(args, " "), log.String())
		}
	})
	select {
	case a := <-addr:
		base := "http://" + a
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			resp, err := http.Get(base + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return base
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("racefree serve on %s is not ready after 60s", base)
	case <-copied:
		t.Fatalf("racefree serve exited before serving:\n%s", log.String())
	case <-time.After(60 * time.Second):
		t.Fatal("racefree serve did not log that it serves within 60s")
	}
	return ""
}
