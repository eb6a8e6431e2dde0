package testdb

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
)

// CutReply is a TCP proxy on loopback between a test and PostgreSQL that
// loses the reply to a commit: armed, it forwards the commit whole, lets
// the server run it and answer it whole (its ReadyForQuery), and cuts the
// connection without forwarding the rest of that answer. The client sees
// a connection cut after it sent its commit, and the server has
// committed: the unknown outcome of invariant 14, made on purpose. It is
// armed for one cut at a time, in one of two ways:
//
//   - LoseNextCommit(marker): the next transaction that sent marker (in
//     a query or a parameter) loses the reply to its COMMIT, from the
//     COMMIT's CommandComplete on; a pipeline without BEGIN, which its
//     Sync commits, loses every reply from the first after its Sync.
//     Other statements on the pool are left alone.
//   - LoseNextPipeline(): the next pipeline that executes statements
//     (Execute … Sync), on whichever connection sends it first, loses
//     every reply from the first after its Sync.
//
// It reads the wire protocol enough for that and needs a startup without
// TLS (NewCutReply's DSN says sslmode=disable).
type CutReply struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu       sync.Mutex
	conns    map[net.Conn]bool
	closed   bool
	marker   []byte        // armed by LoseNextCommit: transactions that sent these bytes
	pipeline bool          // armed by LoseNextPipeline
	cuts     int           // replies lost so far
	want     int           // the cuts Wait waits for
	cut      chan struct{} // closed, and made anew, at each cut
}

// NewCutReply starts a CutReply in front of the PostgreSQL server of dsn
// and returns it with the DSN that reaches the same database through it
// (sslmode=disable: the proxy reads the protocol). It stops when the test
// ends.
func NewCutReply(t testing.TB, dsn string) (*CutReply, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("testdb: cut reply: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testdb: cut reply: %v", err)
	}
	p := &CutReply{ln: ln, target: u.Host, conns: map[net.Conn]bool{}, cut: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.stop)
	u.Host = ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return p, u.String()
}

// LoseNextCommit arms the proxy to lose the reply to the next commit of a
// transaction that sends marker (not empty), in place of any arming
// before.
func (p *CutReply) LoseNextCommit(marker string) {
	p.arm([]byte(marker), false)
}

// LoseNextPipeline arms the proxy to lose the reply to the next pipeline
// that executes statements, on whichever connection sends it first, in
// place of any arming before.
func (p *CutReply) LoseNextPipeline() {
	p.arm(nil, true)
}

// Disarm takes back an arming that has not cut yet.
func (p *CutReply) Disarm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker, p.pipeline, p.want = nil, false, p.cuts
}

func (p *CutReply) arm(marker []byte, pipeline bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker, p.pipeline, p.want = marker, pipeline, p.cuts+1
}

// Cuts returns how many replies the proxy lost so far. A cut is counted
// before the client's connection closes.
func (p *CutReply) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Wait waits until the proxy made the cut it was last armed for, after
// the server answered it whole, and fails the test after 30 s.
func (p *CutReply) Wait(t testing.TB) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		p.mu.Lock()
		done, cut := p.cuts >= p.want, p.cut
		p.mu.Unlock()
		if done {
			return
		}
		select {
		case <-cut:
		case <-timeout:
			t.Fatal("testdb: cut reply: armed, but no reply was lost within 30 s")
		}
	}
}

// takeCommit reports whether a transaction that sent msgs is to lose its
// commit's reply, and disarms the proxy if so.
func (p *CutReply) takeCommit(msgs [][]byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok := len(p.marker) > 0 && slices.ContainsFunc(msgs, func(m []byte) bool { return bytes.Contains(m, p.marker) })
	if ok {
		p.marker = nil
	}
	return ok
}

// takePipeline reports whether the proxy is armed for the next pipeline,
// and disarms it if so.
func (p *CutReply) takePipeline() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok := p.pipeline
	p.pipeline = false
	return ok
}

// counted counts a cut and wakes Wait.
func (p *CutReply) counted() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts++
	close(p.cut)
	p.cut = make(chan struct{})
}

func (p *CutReply) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		tx := &cutTx{}
		p.wg.Add(2)
		go func() { // client → server
			defer p.wg.Done()
			defer p.close(c, s)
			p.frontend(c, s, tx)
		}()
		go func() { // server → client
			defer p.wg.Done()
			defer p.close(c, s)
			p.backend(s, c, tx)
		}()
	}
}

// track keeps conns to close them when the test ends; false (and conns
// closed) once it ended.
func (p *CutReply) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		if p.closed {
			_ = c.Close()
		} else {
			p.conns[c] = true
		}
	}
	return !p.closed
}

func (p *CutReply) close(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *CutReply) stop() {
	p.mu.Lock()
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// cutTx is what the proxy knows of a connection's transaction.
type cutTx struct {
	mu         sync.Mutex
	sent       [][]byte // the client's messages since the last idle ReadyForQuery
	committing bool     // one of them is a COMMIT
	explicit   bool     // a ReadyForQuery said it is in a block (BEGIN)
	synced     bool     // the client sent Sync: an implicit transaction commits
	executes   bool     // the client sent Execute since its last Sync
	swallow    bool     // the replies are being lost up to the next ReadyForQuery
}

// frontend copies the client's messages, noting those of the current
// transaction, whether one is a COMMIT (a simple Query, or the Parse of
// an extended one) or a Sync, and at the Sync that ends a pipeline with
// an Execute whether the proxy is armed for it (before forwarding the
// Sync, the commit of an implicit transaction).
func (p *CutReply) frontend(c, s net.Conn, tx *cutTx) {
	r, w := bufio.NewReader(c), bufio.NewWriter(s)
	msg, err := cutReadMessage(r, false) // the startup message has no type byte
	if err != nil {
		return
	}
	for {
		if _, err := w.Write(msg); err != nil {
			return
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
		if msg, err = cutReadMessage(r, true); err != nil {
			return
		}
		typ := msg[0]
		tx.mu.Lock()
		tx.sent = append(tx.sent, msg)
		switch typ {
		case 'Q', 'P':
			if cutIsCommit(typ, msg[5:]) {
				tx.committing = true
			}
		case 'E':
			tx.executes = true
		case 'S':
			tx.synced = true
			if tx.executes && p.takePipeline() {
				tx.swallow = true
			}
			tx.executes = false
		}
		tx.mu.Unlock()
	}
}

// backend copies the server's messages, except the answer the proxy is
// to lose: a COMMIT's from its CommandComplete, an implicit transaction's
// (marked, and synced) from its first reply, an armed pipeline's from its
// Sync; it loses them up to the server's ReadyForQuery (the server has
// committed), then counts the cut and cuts the connection. An idle
// ReadyForQuery ends the transaction the proxy noted.
func (p *CutReply) backend(s, c net.Conn, tx *cutTx) {
	r, w := bufio.NewReader(s), bufio.NewWriter(c)
	for {
		msg, err := cutReadMessage(r, true)
		if err != nil {
			return
		}
		typ := msg[0]
		tx.mu.Lock()
		if !tx.swallow {
			commit := typ == 'C' && tx.committing && bytes.HasPrefix(msg[5:], []byte("COMMIT"))
			implicit := !tx.explicit && tx.synced
			tx.swallow = (commit || implicit) && p.takeCommit(tx.sent)
		}
		swallowed := tx.swallow
		if typ == 'Z' && msg[5] != 'I' {
			tx.explicit = true
		}
		if typ == 'Z' && msg[5] == 'I' {
			tx.sent, tx.committing, tx.explicit, tx.synced, tx.executes = nil, false, false, false, false
		}
		tx.mu.Unlock()
		if swallowed {
			if typ == 'Z' {
				// The transaction committed; the client never hears so.
				_ = w.Flush()
				p.counted()
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

// cutReadMessage reads one protocol message whole: a type byte (unless
// typed is false), then a length that counts itself and the body.
func cutReadMessage(r io.Reader, typed bool) ([]byte, error) {
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
		return nil, errors.New("testdb: cut reply: bad message length")
	}
	msg = append(msg, make([]byte, n-4)...)
	if _, err := io.ReadFull(r, msg[head:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// cutIsCommit reports whether a Query's text, or a Parse's (after the
// statement's name), is COMMIT alone.
func cutIsCommit(typ byte, body []byte) bool {
	if typ == 'P' {
		i := bytes.IndexByte(body, 0)
		if i < 0 {
			return false
		}
		body = body[i+1:]
	}
	if i := bytes.IndexByte(body, 0); i >= 0 {
		body = body[:i]
	}
	q := bytes.ToLower(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(body), []byte(";"))))
	return bytes.Equal(q, []byte("commit"))
}

// CutBatch runs calls at once through db, whose DSN reaches PostgreSQL
// through proxy (NewCutReply) and whose Config has Combine on and
// CombineBatches 1, so that their operations meet in one batch of the
// combiner, and loses that batch's answer once the server committed it.
// It holds a batch of its own in flight with a row lock (through direct,
// which reaches the same database without the proxy) while the calls
// queue behind it, arms the proxy (LoseNextPipeline), and lets it go. It
// returns each call's error once every call returned. Each call must
// reach the combiner without running a pipeline of its own first: warm
// the primitive up (its tenant registered) before.
func CutBatch(t testing.TB, db, direct *racefree.DB, proxy *CutReply, calls ...func() error) []error {
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
		ran, err := wire.Of(db).Combine(ctx, &wire.Op{Group: "testdb.hold", Key: "hold",
			Stmts: []*wire.Statement{{Query: `UPDATE testdb_hold SET k = k WHERE k = 1`}}})
		if err == nil && !ran {
			err = errors.New("the held batch did not run: is Config.Combine on?")
		}
		held <- err
	}()
	// The held batch waits on the server for the lock: it went through
	// the proxy before it is armed.
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
	proxy.LoseNextPipeline()
	if err := lock.Commit(); err != nil {
		t.Fatalf("testdb: cut batch: %v", err)
	}
	if err := <-held; err != nil {
		t.Fatalf("testdb: cut batch: the held batch: %v", err)
	}
	proxy.Wait(t)
	wg.Wait()
	return errs
}
