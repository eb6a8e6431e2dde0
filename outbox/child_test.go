package outbox_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
)

const childEnv = "RACEFREE_OUTBOX_CHILD"

// child runs a relay that POSTs every message to RF_URL, until the
// process is killed.
func child() error {
	ctx := context.Background()
	db, err := dsn.Open(ctx, os.Getenv("RF_DSN"), nil)
	if err != nil {
		return err
	}
	defer db.Close()
	o, err := outbox.New(db, &outbox.Options{Backoff: func(int) time.Duration { return 10 * time.Millisecond }, MaxAttempts: outbox.MaxAttemptsLimit})
	if err != nil {
		return err
	}
	h, err := outbox.HTTPHandler(outbox.HTTPOptions{URL: os.Getenv("RF_URL"), Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	r, err := o.NewRelay(h, &outbox.RelayOptions{
		Worker: os.Getenv("RF_WORKER"), Concurrency: 4, Lease: 300 * time.Millisecond, PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	fmt.Println("running")
	return r.Run(ctx) // until killed
}

// receiver is an idempotent HTTP receiver: it applies each
// Idempotency-Key once, however often the key arrives, and takes a while
// to answer, so that relays are killed mid-request.
type receiver struct {
	mu      sync.Mutex
	hits    map[string]int
	applied map[string]bool
	hold    chan struct{} // when set, the next request waits for it to close (or for its client to go)
	holding chan struct{} // closed once that request is waiting: its relay holds the message's lease
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	rc.mu.Lock()
	rc.hits[key]++
	rc.applied[key] = true // a no-op when it was applied before
	hold, holding := rc.hold, rc.holding
	rc.hold, rc.holding = nil, nil
	rc.mu.Unlock()
	if hold != nil {
		close(holding)
		select {
		case <-hold:
		case <-r.Context().Done(): // the relay was killed
		}
	}
	time.Sleep(time.Duration(5+rand.IntN(25)) * time.Millisecond) // the receiver's work, after the effect
	w.WriteHeader(http.StatusOK)
}

// startRelayProcess starts a child relay and waits until it runs.
func startRelayProcess(t *testing.T, dsnStr, url, worker string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "RF_DSN="+dsnStr, "RF_URL="+url, "RF_WORKER="+worker)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	dieWithTheTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A test that fails half-way (a round that times out) still ends its
	// children; kill is harmless on one already killed.
	t.Cleanup(func() { kill(cmd) })
	buf := make([]byte, len("running\n"))
	if _, err := io.ReadFull(out, buf); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("relay process %s did not start: %v", worker, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return cmd
}

func kill(cmd *exec.Cmd) {
	_ = cmd.Process.Kill() // SIGKILL: no shutdown, no deferred call
	_ = cmd.Wait()
}

// TestKilledRelaysLoseNothing kills relay processes with SIGKILL, again
// and again, while messages keep coming and handlers are in the middle of
// their HTTP requests. Every message is delivered at least once, applied
// exactly once by the idempotent receiver, none is lost or dead, and the
// killed relays' leases lapse and are taken over.
func TestKilledRelaysLoseNothing(t *testing.T) {
	testdb.EachDSN(t, func(t *testing.T, dsnStr string) {
		ctx := context.Background()
		db := testdb.Open(t, dsnStr, nil)
		o := newOutbox(t, db, nil)
		rc := &receiver{hits: map[string]int{}, applied: map[string]bool{}}
		srv := httptest.NewServer(rc)
		defer srv.Close()

		var enqueued []int64
		enqueueBatch := func(n int) {
			for range n {
				enqueued = append(enqueued, enqueue(t, ctx, o, db, outbox.Message{Topic: "t", Payload: []byte("x")}))
			}
		}
		rounds, perRound := testdb.Scale(4, 10), 25
		worker := 0
		for round := range rounds {
			var procs []*exec.Cmd
			for range 2 {
				worker++
				procs = append(procs, startRelayProcess(t, dsnStr, srv.URL, fmt.Sprint("relay-", worker)))
			}
			// The receiver holds the round's first request until the
			// relays are killed: each round kills a relay in the middle of
			// a delivery, with the message's lease held.
			hold, holding := make(chan struct{}), make(chan struct{})
			rc.mu.Lock()
			rc.hold, rc.holding = hold, holding
			rc.mu.Unlock()
			enqueueBatch(perRound)
			select {
			case <-holding:
			case <-time.After(time.Minute):
				t.Fatalf("round %d: no delivery reached the receiver within a minute", round)
			}
			// Let the other relay get into its own requests, then kill both.
			time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
			for _, p := range procs {
				kill(p)
			}
			close(hold)
		}
		last := startRelayProcess(t, dsnStr, srv.URL, "relay-last")
		defer kill(last)
		waitFor(t, "every message delivered", func() bool {
			s, err := o.Stats(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			return s.Ready+s.Leased+s.Dead == 0 && s.Delivered == int64(len(enqueued))
		})
		kill(last)

		rc.mu.Lock()
		defer rc.mu.Unlock()
		duplicates := 0
		for _, id := range enqueued {
			key := strconv.FormatInt(id, 10)
			if !rc.applied[key] {
				t.Errorf("message %d was never delivered", id)
			}
			duplicates += rc.hits[key] - 1
		}
		if len(rc.applied) != len(enqueued) {
			t.Errorf("the receiver applied %d keys, %d messages were enqueued", len(rc.applied), len(enqueued))
		}
		lapsed := 0
		for _, id := range enqueued {
			for _, a := range get(t, ctx, o, id).History {
				if a.Outcome == "lapsed" {
					lapsed++
				}
			}
		}
		t.Logf("%s: %d messages, %d relay processes killed, %d deliveries repeated, %d leases lapsed", db.Engine(), len(enqueued), 2*rounds, duplicates, lapsed)
		if lapsed == 0 {
			t.Errorf("no lease lapsed: no relay was killed while it held a message, the test proved nothing")
		}
	})
}
