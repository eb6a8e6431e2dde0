package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestServeRelaysTheOutbox: serve --relay delivers what POST /v1/outbox
// enqueues, each topic to its --relay-url (the others to the URL for
// every topic), with Idempotency-Key set to the message id,
// Racefree-Outbox-Tenant to its tenant and Racefree-Outbox-Fence to the
// lease's fence, counts the deliveries on /metrics, and stops with serve
// on SIGTERM.
func TestServeRelaysTheOutbox(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		type receipt struct{ path, key, body, tenant, fence string }
		got := make(chan receipt, 10)
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got <- receipt{r.URL.Path, r.Header.Get("Idempotency-Key"), string(b), r.Header.Get("Racefree-Outbox-Tenant"), r.Header.Get("Racefree-Outbox-Fence")}
		}))
		defer recv.Close()
		addr := freeAddr(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := cli(ctx, "serve", "--db", dsn, "--addr", addr, "--relay", "--relay-url", "mail="+recv.URL+"/mail",
			"--relay-url", recv.URL+"/any", "--relay-poll", "50ms", "--relay-timeout", "5s")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if code := waitFor(t, "http://"+addr+"/readyz"); code != http.StatusOK {
			t.Fatalf("readyz: %d\n%s", code, stderr.String())
		}
		for _, c := range []struct{ topic, path string }{{"mail", "/mail"}, {"sms", "/any"}} {
			resp, err := http.Post("http://"+addr+"/v1/outbox", "application/json", strings.NewReader(`{"topic":"`+c.topic+`","payload":{"to":"u1"}}`))
			if err != nil {
				t.Fatal(err)
			}
			var out struct{ ID int64 }
			err = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			if resp.StatusCode != 200 || err != nil {
				t.Fatalf("enqueue: %d %v", resp.StatusCode, err)
			}
			select {
			case r := <-got:
				if r.path != c.path || r.key != fmt.Sprint(out.ID) || r.body != `{"to":"u1"}` || r.tenant != "default" || r.fence != "1" {
					t.Fatalf("%s delivered as %+v; want %s with Idempotency-Key %d, tenant default, fence 1", c.topic, r, c.path, out.ID)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: not delivered within 30s\n%s", c.topic, stderr.String())
			}
		}
		// /metrics counts the relay's deliveries once it completed them.
		for deadline := time.Now().Add(30 * time.Second); ; {
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), `racefree_outbox_deliveries_total{outcome="delivered"} 2`+"\n") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/metrics does not count the relay's 2 deliveries within 30s:\n%s", b)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("after SIGTERM: %v, want exit 0\n%s", err, stderr.String())
		}
	})
}

// TestServeRefusesBadRelayFlags: bad --relay flags are one line and exit
// 1 before anything is opened.
func TestServeRefusesBadRelayFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "x.db")
	for _, args := range [][]string{
		{"--relay"},
		{"--relay-url", "http://127.0.0.1:1/x"},
		{"--relay", "--relay-url", "ftp://example.com/x"},
		{"--relay", "--relay-url", "mail=not a url"},
		{"--relay", "--relay-url", "http://a.example/", "--relay-url", "http://b.example/"},
		{"--relay", "--relay-url", "http://a.example/", "--relay-timeout", "2m"},
		{"--relay", "--relay-url", "http://a.example/", "--relay-concurrency", "0"},
	} {
		r := runRefusedServe(t, append([]string{"--db", db, "--addr", "127.0.0.1:0"}, args...)...)
		if r.code == 0 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.HasPrefix(r.stderr, "racefree: ") {
			t.Errorf("%v: exit %d, %q; want one line and a non-zero exit", args, r.code, r.stderr)
		}
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, "*")); len(entries) != 0 {
		t.Errorf("bad flags wrote %v", entries)
	}
}
