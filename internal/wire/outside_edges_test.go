package wire_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"

	"github.com/racefree/racefree/internal/wire"
	_ "modernc.org/sqlite"
)

// TestEdgesAReplyCutShortIsALostConnection: a connection that ends in
// the middle of a reply, as a driver reading a message with io.ReadFull
// sees it (io.ErrUnexpectedEOF: part of a message came, then the end),
// is a lost connection and unavailable on PostgreSQL, bare or wrapped as
// a driver wraps it; so is one that ends between messages (io.EOF).
func TestEdgesAReplyCutShortIsALostConnection(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte{'D', 0, 0}) // three bytes of a five-byte header
		c.Close()
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	header := make([]byte, 5)
	_, cut := io.ReadFull(c, header)
	_, ended := io.ReadFull(c, header)
	if !errors.Is(cut, io.ErrUnexpectedEOF) || !errors.Is(ended, io.EOF) {
		t.Fatalf("reads: %v, then %v; the test needs io.ErrUnexpectedEOF, then io.EOF", cut, ended)
	}
	for _, err := range []error{cut, fmt.Errorf("receive message failed: %w", cut), ended, fmt.Errorf("unexpected EOF: %w", ended)} {
		if !wire.ConnectionLost(err) {
			t.Errorf("ConnectionLost(%v) = false; want true", err)
		}
		if !wire.PostgresUnavailable(err) {
			t.Errorf("PostgresUnavailable(%v) = false; want true", err)
		}
	}
}

// TestEdgesAConnectionDatabaseSQLGaveUpOnIsLost: a statement on a
// connection database/sql has already returned (sql.ErrConnDone, as after
// a lost connection's *sql.Conn or *sql.Tx is done) is a lost connection
// and unavailable on PostgreSQL, bare or wrapped; a statement's own
// failure on a live connection, and a context's end, are neither.
func TestEdgesAConnectionDatabaseSQLGaveUpOnIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "wire.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	_, done := conn.ExecContext(ctx, `SELECT 1`)
	if !errors.Is(done, sql.ErrConnDone) {
		t.Fatalf("a statement on a closed *sql.Conn: %v; the test needs sql.ErrConnDone", done)
	}
	for _, err := range []error{done, fmt.Errorf("racefree: %w", done)} {
		if !wire.ConnectionLost(err) || !wire.PostgresUnavailable(err) {
			t.Errorf("ConnectionLost(%v) = %v, PostgresUnavailable = %v; want both true", err, wire.ConnectionLost(err), wire.PostgresUnavailable(err))
		}
	}
	_, failed := db.ExecContext(ctx, `SELECT * FROM no_such_table`)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for _, err := range []error{failed, context.Canceled, cctx.Err()} {
		if err == nil || wire.ConnectionLost(err) {
			t.Errorf("ConnectionLost(%v) = true; want false: the connection is there", err)
		}
	}
}
