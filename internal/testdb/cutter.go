package testdb

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
)

// Cutter is a TCP proxy on loopback in front of the PostgreSQL server of a
// DSN that can lose one answer: armed, it forwards the next pipeline that
// executes statements (Execute … Sync) whole, lets the server run and
// commit it, and closes the connection once the server's answer is
// complete (its ReadyForQuery), without forwarding any of it. The client
// sees a connection cut after it sent its commit, and the server has
// committed: the unknown outcome of invariant 14, made on purpose.
type Cutter struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
	cut    chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// NewCutter starts a Cutter in front of the server of the PostgreSQL DSN
// dsnStr and returns it with the DSN that reaches the same database
// through it (sslmode=disable: the proxy reads the protocol). It stops
// when the test ends.
func NewCutter(t testing.TB, dsnStr string) (*Cutter, string) {
	t.Helper()
	u, err := url.Parse(dsnStr)
	if err != nil {
		t.Fatalf("testdb: cutter: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testdb: cutter: %v", err)
	}
	c := &Cutter{ln: ln, target: u.Host, cut: make(chan struct{})}
	c.wg.Add(1)
	go c.accept()
	t.Cleanup(c.close)
	u.Host = ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return c, u.String()
}

// Arm makes the Cutter cut the next pipeline that executes statements,
// on whichever connection sends it first.
func (c *Cutter) Arm() { c.armed.Store(true) }

// Wait waits until the Cutter has cut the pipeline it was armed for, after
// the server answered it, and fails the test after 30 s.
func (c *Cutter) Wait(t testing.TB) {
	t.Helper()
	select {
	case <-c.cut:
	case <-time.After(30 * time.Second):
		t.Fatal("testdb: cutter: armed, but no pipeline was cut within 30 s")
	}
}

func (c *Cutter) accept() {
	defer c.wg.Done()
	for {
		client, err := c.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", c.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !c.track(client, server) {
			return
		}
		var cutting atomic.Bool
		c.wg.Add(2)
		go func() {
			defer c.wg.Done()
			c.up(client, server, &cutting)
		}()
		go func() {
			defer c.wg.Done()
			c.down(server, client, &cutting)
		}()
	}
}

// track keeps conns to close them at the end; false once closed.
func (c *Cutter) track(conns ...net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		for _, x := range conns {
			_ = x.Close()
		}
		return false
	}
	c.conns = append(c.conns, conns...)
	return true
}

func (c *Cutter) close() {
	c.mu.Lock()
	c.closed = true
	_ = c.ln.Close()
	for _, x := range c.conns {
		_ = x.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// up forwards the client's messages to the server, one by one. Armed, at
// the Sync that ends a pipeline with an Execute, it marks the connection
// cutting before forwarding the Sync (the commit of the implicit
// transaction).
func (c *Cutter) up(client, server net.Conn, cutting *atomic.Bool) {
	defer server.Close()
	r := bufio.NewReader(client)
	w := bufio.NewWriter(server)
	// The startup message has no type byte (its length's first byte, 0,
	// is no type the switch knows).
	msg, err := readMessage(r, false)
	executes := false
	for err == nil {
		switch msg[0] {
		case 'E':
			executes = true
		case 'S':
			if executes && c.armed.CompareAndSwap(true, false) {
				cutting.Store(true)
			}
			executes = false
		}
		if _, err = w.Write(msg); err != nil {
			return
		}
		if r.Buffered() == 0 {
			if err = w.Flush(); err != nil {
				return
			}
		}
		msg, err = readMessage(r, true)
	}
}

// down forwards the server's messages to the client, until the
// connection is cutting and the server's ReadyForQuery comes: then it
// closes both ends, forwarding nothing of that answer.
func (c *Cutter) down(server, client net.Conn, cutting *atomic.Bool) {
	defer client.Close()
	r := bufio.NewReader(server)
	w := bufio.NewWriter(client)
	for {
		msg, err := readMessage(r, true)
		if err != nil {
			return
		}
		if cutting.Load() {
			if msg[0] == 'Z' {
				_ = client.Close()
				_ = server.Close()
				c.once.Do(func() { close(c.cut) })
				return
			}
			continue
		}
		if _, err := w.Write(msg); err != nil {
			return
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// readMessage reads one protocol message whole: a type byte (unless
// typed is false), then a length that counts itself and the body.
func readMessage(r *bufio.Reader, typed bool) ([]byte, error) {
	head := 4
	if typed {
		head = 5
	}
	msg := make([]byte, head)
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(msg[head-4:]))
	if n < 4 || n > 1<<30 {
		return nil, errors.New("testdb: cutter: bad message length")
	}
	msg = append(msg, make([]byte, n-4)...)
	if _, err := io.ReadFull(r, msg[head:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// CutBatch runs calls at once through db, whose DSN reaches PostgreSQL
// through cutter (NewCutter) and whose Config has Combine on and
// CombineBatches 1, so that their operations meet in one batch of the
// combiner, and cuts that batch's answer once the server committed it.
// It holds a batch of its own in flight with a row lock (through direct,
// which reaches the same database without the cutter) while the calls
// queue behind it, arms the cutter, and lets it go. It returns each
// call's error once every call returned. Each call must reach the
// combiner without running a pipeline of its own first: warm the
// primitive up (its tenant registered) before.
func CutBatch(t testing.TB, db, direct *racefree.DB, cutter *Cutter, calls ...func() error) []error {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS testdb_hold (k INT PRIMARY KEY)`,
		`INSERT INTO testdb_hold (k) VALUES (1) ON CONFLICT DO NOTHING`,
	} {
		if _, err := direct.ExecContext(ctx, q); err != nil {
			t.Fatalf("testdb: cut batch: %v", err)
		}
	}
	lock, err := direct.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("testdb: cut batch: %v", err)
	}
	defer func() { _ = lock.Rollback() }()
	var pid int
	if err := lock.QueryRowContext(ctx, `UPDATE testdb_hold SET k = k WHERE k = 1 RETURNING pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatalf("testdb: cut batch: %v", err)
	}
	held := make(chan error, 1)
	go func() {
		ran, err := db.Combine(ctx, &racefree.Op{Group: "testdb.hold", Key: "hold",
			Stmts: []*racefree.Statement{{Query: `UPDATE testdb_hold SET k = k WHERE k = 1`}}})
		if err == nil && !ran {
			err = errors.New("the held batch did not run: is Config.Combine on?")
		}
		held <- err
	}()
	// The held batch waits on the server for the lock: it went through
	// the cutter before it is armed.
	BlockedBy(t, direct, pid, nil)
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = call()
		}()
	}
	WaitCombiner(t, db, "the calls queued behind the held batch", func(s racefree.CombineStats) bool { return s.Queued == len(calls) })
	cutter.Arm()
	if err := lock.Commit(); err != nil {
		t.Fatalf("testdb: cut batch: %v", err)
	}
	if err := <-held; err != nil {
		t.Fatalf("testdb: cut batch: the held batch: %v", err)
	}
	cutter.Wait(t)
	wg.Wait()
	return errs
}
