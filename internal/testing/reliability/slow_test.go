package reliability

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestSlowClientsAreCutOff sends a request's headers one byte at a time
// and leaves a keep-alive connection idle against serve's
// --read-header-timeout and --idle-timeout (set short here): the server
// closes each connection once its timeout passes, so slow clients cannot
// hold connections open.
func TestSlowClientsAreCutOff(t *testing.T) {
	t.Parallel()
	in := startServe(t, testdb.NewDSN(t, racefree.SQLite), "--read-header-timeout", "1s", "--idle-timeout", "1s",
		"--read-timeout", "2s", "--request-timeout", "2s", "--write-timeout", "3s")

	// closedWithin reports how long conn stayed open while send (if any)
	// dripped bytes into it, failing past bound.
	closedWithin := func(what string, conn net.Conn, drip []byte, bound time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			_, _ = io.Copy(io.Discard, conn)
		}()
		tick := time.NewTicker(time.Second) // one byte a second
		defer tick.Stop()
		limit := time.NewTimer(bound)
		defer limit.Stop()
		for {
			select {
			case <-closed:
				return time.Since(start)
			case <-tick.C:
				if len(drip) > 0 {
					if _, err := conn.Write(drip[:1]); err == nil {
						drip = drip[1:]
					}
				}
			case <-limit.C:
				t.Fatalf("%s: the connection was still open after %v", what, bound)
			}
		}
	}

	conn, err := net.Dial("tcp", in.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	held := closedWithin("headers at one byte a second", conn, []byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "+string(make([]byte, 100))), 5*time.Second)
	t.Logf("slow headers cut off after %v (--read-header-timeout 1s)", held.Round(10*time.Millisecond))

	idle, err := net.Dial("tcp", in.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := idle.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	held = closedWithin("an idle keep-alive connection", idle, nil, 5*time.Second)
	t.Logf("idle keep-alive connection closed after %v (--idle-timeout 1s)", held.Round(10*time.Millisecond))
}
