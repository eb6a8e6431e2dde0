package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestServeWaitsForTheDatabase: serve pointed at a PostgreSQL database
// that does not exist yet keeps retrying, logging each attempt with its
// reason, while /healthz answers 200 and /readyz 503; once the database
// appears it migrates it and /readyz answers 200. The database appears
// by renaming an empty one of testdb's pool to the awaited name (and back
// when the test ends), which PostgreSQL sees as a new database without
// the checkpoint a CREATE/DROP DATABASE pair costs every other test.
func TestServeWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	pooled, err := url.Parse(testdb.NewDatabaseDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	from := strings.TrimPrefix(pooled.Path, "/")
	admin, err := sql.Open("pgx", testdb.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() }) // after the rename back below: cleanups run last first
	name := "rf_test_wait_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	u := *pooled
	u.Path = "/" + name
	// rename moves the pooled database from one name to another once no
	// session is on it (the pool's next holder makes it again if this
	// never runs).
	rename := func(from, to string) error {
		if _, err := admin.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, from); err != nil {
			return err
		}
		_, err := admin.Exec(`ALTER DATABASE ` + from + ` RENAME TO ` + to)
		return err
	}
	renamed := false
	t.Cleanup(func() {
		if renamed {
			if err := rename(name, from); err != nil {
				t.Logf("rename %s back to %s: %v", name, from, err)
			}
		}
	})

	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := cli(ctx, "serve", "--db", u.String(), "--addr", addr, "--wait-for-db", "90s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for the waiting state: /readyz 503 not-ready, /healthz 200.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			var p map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&p)
			resp.Body.Close()
			if resp.StatusCode == 503 && p["detail"] == "waiting for the database" && resp.Header.Get("Retry-After") != "" {
				break
			}
			t.Fatalf("readyz while the database does not exist: %d %v", resp.StatusCode, p)
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve never answered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := waitFor(t, "http://"+addr+"/healthz"); code != 200 {
		t.Fatalf("healthz while waiting: %d", code)
	}
	if err := rename(from, name); err != nil {
		t.Fatal(err)
	}
	renamed = true
	if code := waitFor(t, "http://"+addr+"/readyz"); code != 200 {
		t.Fatalf("readyz once the database exists: %d\n%s", code, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, stderr.String())
	}
	if logs := stderr.String(); !strings.Contains(logs, "waiting for the database") || !strings.Contains(logs, "attempt=1") ||
		!strings.Contains(logs, "does not exist") || !strings.Contains(logs, "the database is usable") {
		t.Fatalf("the wait is not logged attempt by attempt with its reason:\n%s", logs)
	}
}

// TestServeGivesUpAfterWaitForDB: a database that never becomes usable
// ends serve after --wait-for-db with one line saying so; 0 means one
// attempt.
func TestServeGivesUpAfterWaitForDB(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse(testdb.PostgresURL(t))
	u.Path = "/rf_test_never_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	r := runRefusedServe(t, "--db", u.String(), "--wait-for-db", "2s")
	if r.code == 0 || !strings.Contains(r.stderr, "no usable database after waiting") || !strings.Contains(r.stderr, "waiting for the database") {
		t.Fatalf("exit %d, stderr %q; want a refusal after the wait", r.code, r.stderr)
	}
	r = runRefusedServe(t, "--db", u.String(), "--wait-for-db", "0")
	if r.code == 0 || strings.Contains(r.stderr, "waiting for the database") {
		t.Fatalf("--wait-for-db 0: exit %d, stderr %q; want one attempt", r.code, r.stderr)
	}
	r = runRefusedServe(t, "--db", u.String(), "--wait-for-db", "-1s")
	if r.code == 0 || !strings.Contains(r.stderr, "wait-for-db") {
		t.Fatalf("--wait-for-db -1s: exit %d, stderr %q", r.code, r.stderr)
	}
}

// waitingForTheDatabase reports whether resp is serve's answer while it
// waits for its database (503, "waiting for the database"), and closes
// its body when it is.
func waitingForTheDatabase(resp *http.Response) bool {
	if resp.StatusCode != http.StatusServiceUnavailable {
		return false
	}
	var p map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	d, _ := p["detail"].(string)
	return strings.HasPrefix(d, "waiting for the database")
}
