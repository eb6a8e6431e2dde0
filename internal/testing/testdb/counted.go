package testdb

import (
	"context"
	"database/sql"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	pg "github.com/racefree/racefree/postgres"
)

// Counted opens the PostgreSQL database dsnStr with cfg (nil: the
// defaults) on a pool of conns connections, and returns it with the number
// of times its connections have written to the server: a round trip is one
// write followed by a wait for the answer, so a call that writes once made
// one round trip. The pool never pings an idle connection, which would
// write too. The database is closed when the test ends; it is not
// migrated.
func Counted(t testing.TB, dsnStr string, conns int, cfg *racefree.Config) (*racefree.DB, *atomic.Int64) {
	t.Helper()
	eng, err := pg.NewEngine(dsnStr)
	if err != nil {
		t.Fatal(err)
	}
	_ = eng.SQL().Close() // unused: wired brings its own pool
	cc, err := pgx.ParseConfig(dsnStr)
	if err != nil {
		t.Fatal(err)
	}
	writes := new(atomic.Int64)
	dial := cc.DialFunc
	cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, writes: writes}, nil
	}
	pool := stdlib.OpenDB(*cc, stdlib.OptionShouldPing(func(context.Context, stdlib.ShouldPingParams) bool { return false }))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := racefree.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.MaxOpenConns = conns
	db, err := racefree.New(ctx, &wired{Engine: eng, db: pool}, &c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, writes
}

// wired is the PostgreSQL engine on a pool of its own.
type wired struct {
	*pg.Engine
	db *sql.DB
}

func (e *wired) SQL() *sql.DB { return e.db }

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}
