package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/server"
	"go.uber.org/goleak"
)

// workDir is the test binary's scratch directory, removed by TestMain.
var workDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "racefree-reliability-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workDir = dir
	code := m.Run()
	if shared.db != nil {
		shared.db.Close()
	}
	os.RemoveAll(dir)
	httpClient.CloseIdleConnections()
	http.DefaultClient.CloseIdleConnections()
	if err := goleak.Find(); code == 0 && err != nil {
		fmt.Fprintln(os.Stderr, "reliability: goroutines left running:", err)
		code = 1
	}
	os.Exit(code)
}

// built is the racefree binary, built once per test binary by the first
// test that needs it (without -race: the servers are killed and restarted
// many times, and a race in them is the server tests' to find). Tests
// that serve in-process never build it, which keeps their mutants cheap.
var built struct {
	once sync.Once
	path string
	err  error
}

// racefreeBin returns the racefree binary, building it on first use.
func racefreeBin(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		path := filepath.Join(workDir, "racefree")
		// -trimpath: the flags of CI's plain build (go vet -trimpath), so
		// that the packages it compiled serve this build too; without it
		// every dependency compiled again, about two minutes of CPU.
		out, err := exec.Command("go", "build", "-trimpath", "-o", path, "github.com/racefree/racefree/cmd/racefree").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("building racefree: %v\n%s", err, out)
			return
		}
		built.path = path
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// instance is one racefree serve process, started, killed and restarted
// by a test on the same address and database.
type instance struct {
	t    testing.TB
	args []string
	addr string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has exited
	stderr *lockedWriter
}

// startServe starts racefree serve on dsn with extra flags on a free
// loopback port, waits until it serves (start), and kills it when the
// test ends.
func startServe(t testing.TB, dsn string, extra ...string) *instance {
	t.Helper()
	in := &instance{t: t, addr: freeAddr(t)}
	in.args = append([]string{"serve", "--db", dsn, "--addr", in.addr}, extra...)
	in.start()
	t.Cleanup(in.kill)
	return in
}

func (in *instance) url(path string) string { return "http://" + in.addr + path }

// serveInProcess serves racefree's handler on db from this process, on a
// loopback port, as an instance that is never killed: for tests whose
// subject is the library under the server rather than the process.
func serveInProcess(t testing.TB, db *racefree.DB, opts server.Options) *instance {
	t.Helper()
	srv := httptest.NewServer(server.New(db, opts).Handler())
	t.Cleanup(srv.Close)
	return &instance{t: t, addr: strings.TrimPrefix(srv.URL, "http://"), stderr: &lockedWriter{}}
}

// start starts the process and waits until it serves: /readyz answers,
// and not with serve's "waiting for the database" (while serve waits for
// its database at start, /healthz answers 200 and everything else 503).
func (in *instance) start() {
	in.t.Helper()
	cmd := exec.Command(racefreeBin(in.t), in.args...)
	cmd.Env = append(os.Environ(), "RACEFREE_TOKEN=", "RACEFREE_INBOX_SECRETS=", "RACEFREE_DB=", "RACEFREE_ADDR=")
	stderr := &lockedWriter{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		in.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	in.mu.Lock()
	in.cmd, in.done, in.stderr = cmd, done, stderr
	in.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(in.url("/readyz"))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), "waiting for the database") {
				return
			}
		}
		select {
		case <-done:
			in.t.Fatalf("racefree serve exited at start: %v\n%s", cmd.ProcessState, in.log())
		default:
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("racefree serve did not serve in 60s\n%s", in.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill SIGKILLs the process, if it runs, and waits until it has exited.
func (in *instance) kill() {
	in.mu.Lock()
	cmd, done := in.cmd, in.done
	in.cmd = nil
	in.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// log returns what the process wrote to its standard error.
func (in *instance) log() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.stderr.String()
}

// lockedWriter is a buffer that the process's output goroutine writes to
// while the test reads it.
type lockedWriter struct {
	mu sync.Mutex
	w  bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// answer is one HTTP answer: its status (0: no answer, err says why), its
// JSON body and whether it was a replay of an Idempotency-Key.
type answer struct {
	code       int
	body       map[string]any
	replayed   bool
	retryAfter string // the Retry-After header
	err        error
}

// definitive reports whether the answer settles the request: anything
// but no answer, a 5xx, or a key still in progress elsewhere.
func (a answer) definitive() bool {
	return a.code != 0 && a.code < 500 && a.problem() != "idempotency-in-progress"
}

// problem returns the type of a problem answer without its URN prefix.
func (a answer) problem() string {
	s, _ := a.body["type"].(string)
	return strings.TrimPrefix(s, "urn:racefree:problem:")
}

func (a answer) int(field string) int64 {
	f, _ := a.body[field].(float64)
	return int64(f)
}

// unavailable counts the 503 answers of each server address.
var unavailable sync.Map

// unavailable returns how many 503 answers the instance gave so far.
func (in *instance) unavailable() int64 {
	n, _ := unavailable.LoadOrStore(in.addr, new(atomic.Int64))
	return n.(*atomic.Int64).Load()
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// call sends one request; hdr are header name, value pairs.
func call(ctx context.Context, method, url, body string, hdr ...string) answer {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{err: err}
	}
	a := answer{code: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", retryAfter: resp.Header.Get("Retry-After")}
	if a.code == http.StatusServiceUnavailable {
		n, _ := unavailable.LoadOrStore(req.URL.Host, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &a.body); err != nil {
			a.err = fmt.Errorf("%d %q: %w", resp.StatusCode, b, err)
		}
	}
	return a
}

// settle sends a request with an Idempotency-Key until its answer is
// definitive (a restart or an outage in between is retried with the same
// key, which is what makes the retry safe), for up to a minute.
func settle(t testing.TB, method, url, body, key string, hdr ...string) answer {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if key != "" {
		hdr = append(hdr, "Idempotency-Key", strconv.Quote(key))
	}
	for {
		a := call(ctx, method, url, body, hdr...)
		if a.code == http.StatusInternalServerError {
			t.Errorf("%s %s (key %s): 500 %v; a crash or an outage is a 503", method, url, key, a.body)
		}
		if a.definitive() {
			return a
		}
		if ctx.Err() != nil {
			t.Errorf("%s %s (key %s) never settled in a minute: last %d %v %v", method, url, key, a.code, a.body, a.err)
			return a
		}
		time.Sleep(10 * time.Millisecond)
	}
}
