package reliability

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestLostCommitReplies drops PostgreSQL's reply to a COMMIT on the wire
// (or, for a pipeline without BEGIN, which its Sync commits, every reply
// to it) and cuts the connection: the transaction committed and racefree
// cannot know it. racefree must answer 503 unavailable (the outcome is unknown;
// never a 500, never a rerun of the transaction that would do the work
// twice), a retry with the same Idempotency-Key must replay what
// committed, and without a key a re-read must find it.
func TestLostCommitReplies(t *testing.T) {
	t.Parallel()
	proxy, dsn := newPGProxy(t, testdb.NewDSN(t, racefree.Postgres))
	in := serveInProcess(t, testdb.Open(t, dsn, nil), server.Options{AuditKeys: testKeyring(t)})
	ctx := context.Background()

	// lost sends a request whose COMMIT reply is dropped: the transaction
	// that sent marker (its Idempotency-Key, or a holder).
	lost := func(what, method, path, body, key, marker string) answer {
		t.Helper()
		before := proxy.droppedReplies()
		proxy.dropCommitReplies(1, marker)
		hdr := []string{}
		if key != "" {
			hdr = append(hdr, "Idempotency-Key", `"`+key+`"`)
		}
		a := call(ctx, method, in.url(path), body, hdr...)
		proxy.dropCommitReplies(0, "")
		if proxy.droppedReplies() != before+1 {
			t.Fatalf("%s: no COMMIT reply was dropped (answer %d %v)", what, a.code, a.body)
		}
		if a.code != 503 || a.problem() != "unavailable" {
			t.Errorf("%s with its COMMIT reply lost: %d %v, want 503 unavailable", what, a.code, a.body)
		}
		return a
	}

	// With a key, the retry replays the committed outcome.
	lost("claim acquire", "POST", "/v1/claims/report", `{"holder":"w1","ttl_ms":60000}`, "lost-acq", "lost-acq")
	if a := settle(t, "POST", in.url("/v1/claims/report"), `{"holder":"w1","ttl_ms":60000}`, "lost-acq"); a.code != 200 || !a.replayed || a.int("fence") != 1 {
		t.Errorf("retried acquire: %d %v replayed=%v; want the committed fence 1, replayed", a.code, a.body, a.replayed)
	}
	lost("sequence next", "POST", "/v1/sequences/acme/invoice/next", `{"n":1}`, "lost-seq", "lost-seq")
	if a := settle(t, "POST", in.url("/v1/sequences/acme/invoice/next"), `{"n":1}`, "lost-seq"); a.code != 200 || !a.replayed || a.int("first") != 1 {
		t.Errorf("retried next: %d %v replayed=%v; want the committed number 1, replayed", a.code, a.body, a.replayed)
	}
	if a := settle(t, "POST", in.url("/v1/sequences/acme/invoice/next"), `{"n":1}`, "seq2"); a.int("first") != 2 {
		t.Errorf("next after the replay: %d %v; want 2 (no number consumed twice)", a.code, a.body)
	}
	lost("quota consume", "POST", "/v1/quotas/plan/consume", `{"n":3,"policy":{"kind":"window","rate":5,"per_ms":31622400000}}`, "lost-q", "lost-q")
	if a := settle(t, "POST", in.url("/v1/quotas/plan/consume"), `{"n":3,"policy":{"kind":"window","rate":5,"per_ms":31622400000}}`, "lost-q"); a.code != 200 || a.int("remaining") != 2 {
		t.Errorf("retried consume: %d %v; want the one charge of 3, 2 remaining", a.code, a.body)
	}
	lost("audit append", "POST", "/v1/audit", `{"scope":"s","actor":"a","action":"x","subject":"y"}`, "lost-aud", "lost-aud")
	if a := settle(t, "POST", in.url("/v1/audit"), `{"scope":"s","actor":"a","action":"x","subject":"y"}`, "lost-aud"); a.code != 200 || a.int("seq") != 1 {
		t.Errorf("retried append: %d %v; want entry 1", a.code, a.body)
	}

	// Without a key, a re-read settles the outcome: the claim is held by
	// the caller, and acquiring it again keeps its tenure.
	lost("claim acquire without a key", "POST", "/v1/claims/nokey", `{"holder":"holder-nokey","ttl_ms":60000}`, "", "holder-nokey")
	if a := call(ctx, "GET", in.url("/v1/claims/nokey"), ""); a.code != 200 || a.body["holder"] != "holder-nokey" || a.int("fence") != 1 {
		t.Errorf("re-read after the lost reply: %d %v; want held by holder-nokey at fence 1", a.code, a.body)
	}
	if a := call(ctx, "POST", in.url("/v1/claims/nokey"), `{"holder":"holder-nokey","ttl_ms":60000}`); a.code != 200 || a.int("fence") != 1 {
		t.Errorf("acquire again after the lost reply: %d %v; want fence 1", a.code, a.body)
	}
}

// TestDatabaseOutageUnderLoad cuts every connection between racefree and
// PostgreSQL and refuses new ones for a while, under load, then lets them
// through: /readyz goes down and comes back without a restart of racefree,
// every request in between is a 503 (never a 500), and the load's ledger
// holds, as after a crash.
func TestDatabaseOutageUnderLoad(t *testing.T) {
	t.Parallel()
	proxy, dsn := newPGProxy(t, testdb.NewDSN(t, racefree.Postgres))
	outagesUnderLoad(t, dsn, testdb.Scale(2, 20), proxy.outage, proxy.restore)
}

// TestPostgresRestartUnderLoad stops and starts the real PostgreSQL
// cluster under load, as TestDatabaseOutageUnderLoad simulates with its
// proxy. Every other test on the cluster fails meanwhile, so it runs only
// in the long mode (RACEFREE_LONG=1), and starts the cluster again when it
// ends, even on failure.
func TestPostgresRestartUnderLoad(t *testing.T) {
	if !testdb.Long() {
		t.Skip("restarts the shared PostgreSQL cluster: runs only with RACEFREE_LONG=1")
	}
	versions, _ := filepath.Glob("/etc/postgresql/*/main")
	if len(versions) == 0 {
		t.Skip("no Debian PostgreSQL cluster (/etc/postgresql/*/main) to restart")
	}
	version := filepath.Base(filepath.Dir(versions[len(versions)-1]))
	cluster := func(action string) error {
		out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action).CombinedOutput()
		if err != nil {
			return fmt.Errorf("pg_ctlcluster %s: %v: %s", action, err, out)
		}
		return nil
	}
	dsn := testdb.NewDSN(t, racefree.Postgres)
	// After NewDSN's, so that it runs before the schema is dropped.
	t.Cleanup(func() { _ = cluster("start") }) // running already: an error, and nothing to do
	outagesUnderLoad(t, dsn, 3,
		func() {
			if err := cluster("stop"); err != nil {
				t.Error(err)
			}
		},
		func() {
			if err := cluster("start"); err != nil {
				t.Error(err)
			}
		})
}

// outagesUnderLoad serves dsn under load and runs n outages (down, then,
// once /readyz and a request have met it, up), then checks the ledger.
func outagesUnderLoad(t *testing.T, dsn string, n int, down, up func()) {
	in := startServe(t, dsn, "--inbox-secret", "billing="+webhookSecret, auditKeyring(t), "--request-timeout", "2s", "--write-timeout", "3s")
	l := newLedger()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					if i >= 14 {
						return
					}
				default:
				}
				load(t, in, l, c, i)
			}
		}()
	}
	start := time.Now()
	for range n {
		waitReady(t, in, 200)
		down()
		waitReady(t, in, 503)
		// Hold the outage until a request has met it.
		for met, deadline := in.unavailable(), time.Now().Add(10*time.Second); in.unavailable() == met; {
			if time.Now().After(deadline) {
				up()
				t.Fatal("no request met the outage in 10s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		up()
		waitReady(t, in, 200)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d operations acknowledged across %d outages in %v, racefree never restarted", l.ops, n, time.Since(start).Round(time.Millisecond))
	checkLedger(t, in, dsn, l)
}

// waitReady polls /readyz until it answers code, for up to 20 seconds.
func waitReady(t testing.TB, in *instance, code int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		a := call(context.Background(), "GET", in.url("/readyz"), "")
		if a.code == code {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never answered %d in 20s: last %d %v %v", code, a.code, a.body, a.err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
