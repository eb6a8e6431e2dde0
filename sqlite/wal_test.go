package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
)

// walTestLimit is the log's limit in these tests: small, so that a few
// hundred writes pass it.
const walTestLimit = 256 << 10

// openWAL opens a racefree.DB on a fresh file whose log's keeper has
// walTestLimit and looks every 5 ms, and a table t(k, v) to write to.
func openWAL(t *testing.T) (*racefree.DB, *Engine, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "wal.db")
	e, err := newEngineWAL(path, true, walTestLimit, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	db, err := racefree.New(context.Background(), e, &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(context.Background(), "CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)"); err != nil {
		t.Fatal(err)
	}
	return db, e, path + "-wal"
}

func walSize(t *testing.T, wal string) int64 {
	t.Helper()
	fi, err := os.Stat(wal)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// churnReaders keeps a read transaction open on the log at every moment,
// each on one of two connections taking turns, the next begun before the
// last ends, until stop: SQLite then never starts the log over by itself,
// as under a steady load from many connections. It returns once the
// first one holds a snapshot.
func churnReaders(t *testing.T, db *racefree.DB, stop <-chan struct{}, wg *sync.WaitGroup) {
	t.Helper()
	ctx := context.Background()
	begin := func() *sql.Tx {
		tx, err := db.SQL().BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			t.Error(err)
			return nil
		}
		var n int64
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil { // takes the snapshot
			t.Error(err)
		}
		return tx
	}
	held := begin()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				if held != nil {
					_ = held.Rollback()
				}
				return
			case <-time.After(2 * time.Millisecond):
			}
			next := begin()
			if held != nil {
				_ = held.Rollback()
			}
			held = next
		}
	}()
}

// TestTheWALKeeperBoundsTheLog: writers from two connections, with a
// read transaction on the log at every moment (so that SQLite never starts
// the log over by itself), grow the log past its limit; the keeper has it
// start over, the file cut back to the limit, while the writes go on and
// every row written is there; every connection keeps its busy timeout.
// DB.Close stops the keeper.
func TestTheWALKeeperBoundsTheLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, e, wal := openWAL(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	churnReaders(t, db, stop, &wg)
	var (
		written atomic.Int64
		over    atomic.Bool
	)
	blob := []byte(strings.Repeat("x", 2048))
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				// Paced, so that the keeper's checkpoint finds the write
				// lock free within restartWait on a loaded machine too.
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Microsecond):
				}
				if _, err := db.ExecContext(ctx, "INSERT INTO t (k, v) VALUES (?, ?)", w*10_000_000+i, blob); err != nil {
					t.Error(err)
					return
				}
				written.Add(1)
				if fi, err := os.Stat(wal); err == nil && fi.Size() > walTestLimit {
					over.Store(true)
				}
			}
		}()
	}
	deadline := time.Now().Add(60 * time.Second)
	for !(over.Load() && e.wal.restarts.Load() >= 1) && time.Now().Before(deadline) && !t.Failed() {
		time.Sleep(5 * time.Millisecond) // polls a state; the writers set it
	}
	close(stop)
	wg.Wait()
	if !over.Load() {
		t.Fatalf("the log never passed its limit (%d writes): the test did not load it", written.Load())
	}
	if e.wal.restarts.Load() == 0 {
		t.Fatalf("the keeper never had the log start over in 60 s of writes past its limit (%d writes)", written.Load())
	}
	// The next write after a restart starts the log over, and cuts the
	// file back to the limit: write on until it is.
	waitFor(t, "the log's file at most its limit", func() bool {
		if _, err := db.ExecContext(ctx, "INSERT INTO t (k, v) VALUES (?, x'00')", -written.Load()-1); err != nil {
			t.Fatal(err)
		}
		written.Add(1)
		return walSize(t, wal) <= walTestLimit
	})
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != written.Load() {
		t.Fatalf("%d rows, %v; want the %d written", n, err, written.Load())
	}
	// Every connection of the pool, the keeper's among them, went back
	// with the busy timeout every connection has, not restartWait.
	var conns []*sql.Conn
	for range db.SQL().Stats().MaxOpenConnections {
		c, err := db.SQL().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var ms int64
		if err := c.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&ms); err != nil || ms != BusyTimeout.Milliseconds() {
			t.Fatalf("a connection of the pool has busy_timeout %d, %v; want %d", ms, err, BusyTimeout.Milliseconds())
		}
	}
	for _, c := range conns {
		c.Close()
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.wal.done:
	default:
		t.Fatal("DB.Close returned with the keeper still running")
	}
}

// TestTheWALKeeperNeverHoldsWritersLong: a read transaction held open on
// the log keeps the log from starting over; the keeper's RESTART
// checkpoint, which holds the write lock while it waits for that reader,
// gives up after restartWait and backs off, so that writes go on with a
// wait of at most about restartWait, never the busy timeout (10 s). Once
// the reader ends, the keeper has the log start over.
func TestTheWALKeeperNeverHoldsWritersLong(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, e, wal := openWAL(t)
	reader, err := db.SQL().BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback()
	blob := []byte(strings.Repeat("x", 2048))
	write := func(k int) time.Duration {
		t0 := time.Now()
		if _, err := db.ExecContext(ctx, "INSERT INTO t (k, v) VALUES (?, ?)", k, blob); err != nil {
			t.Fatal(err)
		}
		return time.Since(t0)
	}
	k := 0
	for ; walSize(t, wal) <= walTestLimit; k++ {
		write(k)
	}
	var n int64
	if err := reader.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil { // a snapshot on the log
		t.Fatal(err)
	}
	for ; walSize(t, wal) <= 2*walTestLimit; k++ {
		write(k)
	}
	// The keeper now tries, and fails, while the reader holds on; each
	// write waits for the lock at most the keeper's attempt.
	var slowest time.Duration
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); k++ {
		slowest = max(slowest, write(k))
	}
	if slowest > 2*time.Second {
		t.Fatalf("a write waited %s while the keeper waited for a reader; want about %s at most", slowest, restartWait)
	}
	if n := e.wal.restarts.Load(); n != 0 {
		t.Fatalf("the log started over %d times under a reader that held it", n)
	}
	if err := reader.Rollback(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the keeper's restart once the reader ended", func() bool {
		write(k)
		k++
		return e.wal.restarts.Load() > 0 && walSize(t, wal) <= walTestLimit
	})
}

// waitFor polls cond every few milliseconds until it holds, failing the
// test after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTheWALKeeperTriesAgainWithinASecondOnceTheLogIsTwiceItsLimit
// follows the keeper's wait after a try that did not have the log start
// over: it doubles from the keeper's period up to walMaxBackoff while the
// log's file is at most twice its limit, so that a long reader costs the
// writers little, and never exceeds walTightBackoff past that, so that a
// try that failed only for want of CPU is made again before the log grows
// by another walMaxBackoff of writes. The bounds are exact: twice the
// limit is still loose, one byte more is tight.
func TestTheWALKeeperTriesAgainWithinASecondOnceTheLogIsTwiceItsLimit(t *testing.T) {
	const limit = 64 << 20
	for _, c := range []struct {
		backoff time.Duration
		size    int64
		want    time.Duration
	}{
		{250 * time.Millisecond, limit + 1, 500 * time.Millisecond},
		{4 * time.Second, limit + 1, 8 * time.Second},
		{8 * time.Second, 2 * limit, walMaxBackoff},
		{walMaxBackoff, 2 * limit, walMaxBackoff},
		{250 * time.Millisecond, 2*limit + 1, 500 * time.Millisecond},
		{500 * time.Millisecond, 2*limit + 1, walTightBackoff},
		{4 * time.Second, 2*limit + 1, walTightBackoff},
		{walMaxBackoff, 10 * limit, walTightBackoff},
	} {
		if got := walBackoff(c.backoff, c.size, limit); got != c.want {
			t.Errorf("after waiting %v, with the log at %d bytes (limit %d): waits %v; want %v", c.backoff, c.size, limit, got, c.want)
		}
	}
	if walMaxBackoff != 10*time.Second || walTightBackoff != time.Second {
		t.Errorf("walMaxBackoff %v, walTightBackoff %v; the docs say 10 s and 1 s", walMaxBackoff, walTightBackoff)
	}
}

// TestTheWALKeeperUnderAReaderTriesAgainWithinASecondOnceTheLogIsTwiceItsLimit:
// a read transaction holds the log, which one write has taken past twice
// its limit; the keeper, whose period is 800 ms, fails its first try and
// waits walTightBackoff (1 s) before the next, not twice its period.
func TestTheWALKeeperUnderAReaderTriesAgainWithinASecondOnceTheLogIsTwiceItsLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "wal.db")
	e, err := newEngineWAL(path, true, walTestLimit, 800*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	db, err := racefree.New(ctx, e, &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Under the limit, the keeper does nothing whenever it looks.
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)"); err != nil {
		t.Fatal(err)
	}
	reader, err := db.SQL().BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback()
	var n int64
	if err := reader.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil { // a snapshot on the log
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO t (k, v) VALUES (1, zeroblob(?))", 3*walTestLimit); err != nil {
		t.Fatal(err)
	}
	if size := walSize(t, path+"-wal"); size <= 2*walTestLimit {
		t.Fatalf("the log holds %d bytes; the test needs more than %d", size, 2*walTestLimit)
	}
	waitFor(t, "the keeper's first try", func() bool { return e.wal.backoff.Load() != 0 })
	if got := time.Duration(e.wal.backoff.Load()); got != walTightBackoff {
		t.Fatalf("the keeper waits %v after a failed try with the log past twice its limit; want %v", got, walTightBackoff)
	}
	if n := e.wal.restarts.Load(); n != 0 {
		t.Fatalf("the log started over %d times under a reader that held it", n)
	}
}
