package reliability

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"slices"
	"sync"
	"testing"
)

// pgProxy is a TCP proxy on loopback between racefree and PostgreSQL that
// reads the wire protocol enough to see a COMMIT and its reply. It can drop
// the reply to the next COMMITs (the transaction commits, the client never
// hears so, and the connection is cut) and cut every connection and refuse
// new ones, as an outage or a PostgreSQL restart does. It needs a startup
// without TLS (sslmode=disable).
type pgProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]bool
	refuse  bool
	drop    int    // COMMIT replies still to drop
	marker  []byte // of transactions that sent these bytes
	dropped int    // COMMIT replies dropped
	wg      sync.WaitGroup
}

// newPGProxy starts a proxy to the server of dsn and returns it with dsn
// rewritten to go through it. It stops when the test ends.
func newPGProxy(t testing.TB, dsn string) (*pgProxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{ln: ln, target: u.Host, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *pgProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		tx := &txState{}
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

func (p *pgProxy) close(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(p.conns, c)
	}
}

// txState is what the proxy knows of a connection's transaction: the
// messages the client sent in it, and whether it sent COMMIT.
type txState struct {
	mu         sync.Mutex
	sent       [][]byte
	committing bool
	explicit   bool // a ReadyForQuery said it is in a block (BEGIN); otherwise Sync commits it (a pipeline)
	synced     bool // the client sent Sync: an implicit transaction commits
	swallow    bool // the replies of an implicit transaction are being dropped
}

// takeDrop reports whether the reply to the COMMIT of a transaction that
// sent msgs is to be dropped.
func (p *pgProxy) takeDrop(msgs [][]byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.armed(msgs) {
		return false
	}
	p.drop--
	p.dropped++
	return true
}

// armed reports whether a reply to a transaction that sent msgs is to be
// dropped; p.mu is held.
func (p *pgProxy) armed(msgs [][]byte) bool {
	return p.drop > 0 && slices.ContainsFunc(msgs, func(m []byte) bool { return bytes.Contains(m, p.marker) })
}

// dropping reports whether the replies to an implicit transaction that
// sent msgs are to be dropped, without counting a drop yet.
func (p *pgProxy) dropping(msgs [][]byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.armed(msgs)
}

// dropCommitReplies makes the proxy drop the replies to the next n
// COMMITs of transactions that sent marker (in a query or a parameter), so
// that a reaper's or a health check's commit is left alone.
func (p *pgProxy) dropCommitReplies(n int, marker string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop, p.marker = n, []byte(marker)
}

// droppedReplies returns how many COMMIT replies were dropped so far.
func (p *pgProxy) droppedReplies() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// cut closes every connection.
func (p *pgProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// outage cuts every connection and refuses new ones until restore.
func (p *pgProxy) outage() {
	p.mu.Lock()
	p.refuse = true
	p.mu.Unlock()
	p.cut()
}

func (p *pgProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = false
}

// frontend copies the client's messages, noting those of the current
// transaction and whether one is a COMMIT (a simple Query, or the Parse of
// an extended one).
func (p *pgProxy) frontend(c, s net.Conn, tx *txState) {
	// The startup message has no type byte.
	var n uint32
	if err := binary.Read(c, binary.BigEndian, &n); err != nil || n < 4 {
		return
	}
	start := make([]byte, n)
	binary.BigEndian.PutUint32(start, n)
	if _, err := io.ReadFull(c, start[4:]); err != nil {
		return
	}
	if _, err := s.Write(start); err != nil {
		return
	}
	for {
		typ, msg, err := readMessage(c)
		if err != nil {
			return
		}
		tx.mu.Lock()
		tx.sent = append(tx.sent, msg)
		if (typ == 'Q' || typ == 'P') && isStatement(typ, msg[5:], "commit") {
			tx.committing = true
		}
		if typ == 'S' {
			tx.synced = true
		}
		tx.mu.Unlock()
		if _, err := s.Write(msg); err != nil {
			return
		}
	}
}

// backend copies the server's messages, except the CommandComplete of a
// COMMIT whose reply is to be dropped: then it cuts the connection. The
// replies to an implicit transaction (a pipeline without BEGIN, which its
// Sync commits) that is to lose its reply are dropped, from the first to
// its ReadyForQuery, and then the connection is cut. A ReadyForQuery
// outside a transaction ends the one the proxy noted.
func (p *pgProxy) backend(s, c net.Conn, tx *txState) {
	for {
		typ, msg, err := readMessage(s)
		if err != nil {
			return
		}
		tx.mu.Lock()
		drop := typ == 'C' && tx.committing && bytes.HasPrefix(msg[5:], []byte("COMMIT")) && p.takeDrop(tx.sent)
		if !tx.explicit && tx.synced && !tx.swallow && p.dropping(tx.sent) {
			tx.swallow = true
		}
		swallowed := tx.swallow
		if swallowed && typ == 'Z' {
			p.takeDrop(tx.sent) // counts the drop
			drop = true
		}
		if typ == 'Z' && msg[5] != 'I' {
			tx.explicit = true // in a transaction block: BEGIN came first
		}
		if typ == 'Z' && msg[5] == 'I' {
			tx.sent, tx.committing, tx.explicit, tx.synced, tx.swallow = nil, false, false, false, false
		}
		tx.mu.Unlock()
		if swallowed && !drop {
			continue // a reply of an implicit transaction whose commit is to look lost
		}
		if drop {
			return // the transaction committed; the client never hears so
		}
		if _, err := c.Write(msg); err != nil {
			return
		}
	}
}

// readMessage reads one typed message: its type and its whole bytes.
func readMessage(r io.Reader) (byte, []byte, error) {
	head := make([]byte, 5)
	if _, err := io.ReadFull(r, head); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n < 4 || n > 1<<30 {
		return 0, nil, io.ErrUnexpectedEOF
	}
	msg := make([]byte, 1+n)
	copy(msg, head)
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return 0, nil, err
	}
	return head[0], msg, nil
}

// isStatement reports whether a Query's text, or a Parse's (after the
// statement's name), is the statement word (lower case) alone.
func isStatement(typ byte, body []byte, word string) bool {
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
	return bytes.Equal(q, []byte(word))
}
