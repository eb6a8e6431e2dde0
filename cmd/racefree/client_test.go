package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/racefree/racefree/audit"
)

// TestClientCommandsAgainstAServe starts one serve (JSON logs, a token, an
// audit keyring) and drives it with the client commands, checking the exit
// status a script branches on, then the request id in a problem body, its
// header and the access log.
func TestClientCommandsAgainstAServe(t *testing.T) {
	t.Parallel()
	var ring bytes.Buffer
	if err := audit.Keygen(&ring, "m1", "s1"); err != nil {
		t.Fatal(err)
	}
	keys := "RACEFREE_AUDIT_KEYS=" + strings.ReplaceAll(strings.TrimSpace(ring.String()), "\n", ";")
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := cli(ctx, "serve", "--db", "sqlite:"+filepath.Join(t.TempDir(), "r.db"), "--addr", addr, "--token", "secret", "--log-format", "json")
	srv.Env = append(srv.Env, keys)
	var logs bytes.Buffer
	srv.Stderr = &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	if code := waitFor(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d\n%s", code, logs.String())
	}
	url := "http://" + addr
	as := func(key string, args ...string) result {
		t.Helper()
		var out, errb bytes.Buffer
		cmd := cli(ctx, append(args, "--server", url)...)
		cmd.Env = append(cmd.Env, "RACEFREE_KEY="+key)
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
	for _, c := range []struct {
		args   []string
		key    string
		code   int
		stdout string
	}{
		{[]string{"claim", "acquire", "job-1", "--holder", "a", "--ttl", "1m"}, "secret", 0, "job-1: held by a, fence 1, until "},
		{[]string{"claim", "acquire", "job-1", "--holder", "b", "--ttl", "1m", "--format", "json"}, "secret", exitHeld, `"holder":"a"`},
		{[]string{"claim", "acquire", "job-1", "--holder", "b", "--ttl", "1m"}, "secret", exitHeld, "job-1: held by a, fence 1, until "},
		{[]string{"claim", "renew", "job-1", "--holder", "a", "--fence", "1", "--ttl", "1m", "--format", "json"}, "secret", 0, `"fence":1`},
		{[]string{"claim", "renew", "job-1", "--holder", "a", "--fence", "2", "--ttl", "1m"}, "secret", exitNotHeld, ""},
		{[]string{"claim", "get", "job-1", "--format", "json"}, "secret", 0, `"live":true`},
		{[]string{"claim", "get", "job-1"}, "secret", 0, "job-1: held by a, fence 1"},
		{[]string{"claim", "get", "job-1", "--format", "yaml"}, "secret", exitUsage, ""},
		{[]string{"claim", "get", "job-2"}, "secret", exitNotFound, ""},
		{[]string{"claim", "release", "job-1", "--holder", "a", "--fence", "1"}, "secret", 0, "job-1: released by a, fence 1"},
		{[]string{"claim", "acquire", "job-1", "--holder", "b", "--format", "json"}, "secret", 0, `"fence":2`},
		{[]string{"claim", "release", "job-1", "--holder", "a", "--fence", "1"}, "secret", exitStale, ""},
		{[]string{"claim", "acquire", "job-1", "--holder", ""}, "secret", exitUsage, ""},
		{[]string{"claim", "acquire", "job-1", "--holder", "a", "--bogus"}, "secret", exitUsage, ""},
		{[]string{"claim", "acquire"}, "secret", exitUsage, ""},
		{[]string{"claim", "get", "job-1"}, "wrong", exitUnreached, ""},
		{[]string{"quota", "consume", "u", "--rate", "1", "--per", "1h", "--burst", "1"}, "secret", 0, "allowed: 0 remaining, full again at "},
		{[]string{"quota", "consume", "u", "--rate", "1", "--per", "1h", "--burst", "1", "--format", "json"}, "secret", exitHeld, `"retry_after_ms"`},
		{[]string{"quota", "consume", "u", "--rate", "1", "--per", "1h", "--burst", "1"}, "secret", exitHeld, "refused: retry after "},
		{[]string{"quota", "consume", "u", "--rate", "1", "--burst", "1", "--tenant", "acme"}, "secret", exitUsage, ""},
		{[]string{"audit", "verify", "--scope", "orders"}, "secret", 0, "orders: intact"},
		{[]string{"audit", "verify"}, "secret", exitAuditFailed, ""},
	} {
		r := as(c.key, c.args...)
		if r.code != c.code || !strings.Contains(r.stdout, c.stdout) || (r.code != 0 && strings.Count(r.stderr, "\n") != 1) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, one line on stderr when refused",
				c.args, r.code, r.stdout, r.stderr, c.code, c.stdout)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// A refusal through the server says when the key is full again: an
	// hour after the charge above, never the zero time.
	r := as("secret", "quota", "consume", "u", "--rate", "1", "--per", "1h", "--burst", "1", "--format", "json")
	var refusal struct {
		Remaining *int64    `json:"remaining"`
		ResetAt   time.Time `json:"reset_at"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &refusal); err != nil || r.code != exitHeld || refusal.Remaining == nil || *refusal.Remaining != 0 ||
		refusal.ResetAt.Before(time.Now()) || refusal.ResetAt.After(time.Now().Add(time.Hour)) {
		t.Fatalf("a refusal through --server: exit %d, stdout %q (%v); want exit %d, 0 remaining, reset_at within the hour", r.code, r.stdout, err, exitHeld)
	}

	// The request id: kept when the client sends one, in the header and
	// the problem body, and in the access log.
	req, _ := http.NewRequest("GET", url+"/v1/claims/job-9", nil)
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("X-Request-Id", "trace-42")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Type      string `json:"type"`
		RequestID string `json:"request_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.Header.Get("X-Request-Id") != "trace-42" || body.RequestID != "trace-42" || body.Type != "urn:racefree:problem:not-found" {
		t.Fatalf("request id: header %q, body %+v; want trace-42 in both", resp.Header.Get("X-Request-Id"), body)
	}
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, logs.String())
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("--log-format json wrote a line that is not JSON: %q", line)
		}
		if rec["msg"] == "request" && rec["request_id"] == "trace-42" && rec["status"] == float64(404) && rec["route"] == "GET /v1/claims/{key}" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no access-log line for request trace-42:\n%s", logs.String())
	}
}

// TestServeRefusesBadLogFlags checks --log-format and --log-level refuse
// anything else with one line.
func TestServeRefusesBadLogFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{{"--log-format", "xml"}, {"--log-level", "loud"}} {
		r := runRefusedServe(t, append([]string{"--db", "sqlite:" + filepath.Join(dir, "x.db")}, args...)...)
		if r.code == 0 || !strings.HasPrefix(r.stderr, "racefree: invalid log-") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, %q; want a one-line refusal", args, r.code, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused flags wrote %d files", len(entries))
	}
}
