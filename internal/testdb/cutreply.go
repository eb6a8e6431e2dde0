package testdb

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

// CutReply is a TCP proxy on loopback between a test and PostgreSQL that
// loses the reply to a COMMIT: it forwards the COMMIT (the transaction
// commits) and cuts the connection before the reply reaches the client,
// which cannot know whether it committed. A pipeline without BEGIN, which
// its Sync commits, loses every reply from the first to its
// ReadyForQuery. Only transactions that sent an armed marker (in a query
// or a parameter) lose theirs, so that other statements on the pool are
// left alone. It reads the wire protocol enough for that and needs a
// startup without TLS (sslmode=disable).
type CutReply struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  map[net.Conn]bool
	drop   int    // COMMIT replies still to lose
	marker []byte // of transactions that sent these bytes
	cuts   int    // COMMIT replies lost
	wg     sync.WaitGroup
}

// NewCutReply starts a CutReply to the PostgreSQL server of dsn and returns
// it with dsn rewritten to go through it. It stops when the test ends.
func NewCutReply(t testing.TB, dsn string) (*CutReply, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutReply{ln: ln, target: u.Host, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	u.Host = ln.Addr().String()
	return p, u.String()
}

// LoseNext makes the proxy lose the reply to the next COMMIT of a
// transaction that sends marker; LoseNext("") disarms it.
func (p *CutReply) LoseNext(marker string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop, p.marker = 0, []byte(marker)
	if marker != "" {
		p.drop = 1
	}
}

// Cuts returns how many COMMIT replies the proxy lost so far.
func (p *CutReply) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
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
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
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

func (p *CutReply) close(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(p.conns, c)
	}
}

// cutTx is what the proxy knows of a connection's transaction.
type cutTx struct {
	mu         sync.Mutex
	sent       [][]byte // the client's messages since the last idle ReadyForQuery
	committing bool     // one of them is a COMMIT
	explicit   bool     // a ReadyForQuery said it is in a block (BEGIN)
	synced     bool     // the client sent Sync: an implicit transaction commits
	swallow    bool     // the replies of an implicit transaction are being lost
}

// armed reports whether a transaction that sent msgs is to lose its
// COMMIT reply, and counts the cut when take; p.mu must not be held.
func (p *CutReply) armed(msgs [][]byte, take bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ok := p.drop > 0 && slices.ContainsFunc(msgs, func(m []byte) bool { return bytes.Contains(m, p.marker) })
	if ok && take {
		p.drop--
		p.cuts++
	}
	return ok
}

// frontend copies the client's messages, noting those of the current
// transaction and whether one is a COMMIT (a simple Query, or the Parse of
// an extended one) or a Sync.
func (p *CutReply) frontend(c, s net.Conn, tx *cutTx) {
	var n uint32 // the startup message has no type byte
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
		typ, msg, err := cutReadMessage(c)
		if err != nil {
			return
		}
		tx.mu.Lock()
		tx.sent = append(tx.sent, msg)
		if (typ == 'Q' || typ == 'P') && cutIsCommit(typ, msg[5:]) {
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

// backend copies the server's messages, except a COMMIT's CommandComplete
// that is to be lost (then it cuts the connection), and the replies of an
// implicit transaction that is to lose its commit (from the first to its
// ReadyForQuery, then it cuts the connection). An idle ReadyForQuery ends
// the transaction the proxy noted.
func (p *CutReply) backend(s, c net.Conn, tx *cutTx) {
	for {
		typ, msg, err := cutReadMessage(s)
		if err != nil {
			return
		}
		tx.mu.Lock()
		cut := typ == 'C' && tx.committing && bytes.HasPrefix(msg[5:], []byte("COMMIT")) && p.armed(tx.sent, true)
		if !tx.explicit && tx.synced && !tx.swallow && p.armed(tx.sent, false) {
			tx.swallow = true
		}
		swallowed := tx.swallow
		if swallowed && typ == 'Z' {
			p.armed(tx.sent, true)
			cut = true
		}
		if typ == 'Z' && msg[5] != 'I' {
			tx.explicit = true
		}
		if typ == 'Z' && msg[5] == 'I' {
			tx.sent, tx.committing, tx.explicit, tx.synced, tx.swallow = nil, false, false, false, false
		}
		tx.mu.Unlock()
		if cut {
			return // the transaction committed; the client never hears so
		}
		if swallowed {
			continue
		}
		if _, err := c.Write(msg); err != nil {
			return
		}
	}
}

// cutReadMessage reads one typed message: its type and its whole bytes.
func cutReadMessage(r io.Reader) (byte, []byte, error) {
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
