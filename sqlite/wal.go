package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// WALLimit is the size of the write-ahead log's file past which racefree
// has the log start over (its keeper), and to which SQLite cuts the file
// back whenever the log starts over (journal_size_limit).
//
// SQLite's own checkpoints, after a commit once the log holds 1,000 pages,
// copy the log into the database file but start the log over only when no
// connection is reading it. Under a steady load of writes from several
// connections (racefree's pool, calls that do not combine) one of them
// almost always is, so the log grows without bound: about 100 MiB a
// second for 16 clients drawing sequence numbers on this project's
// machine, and the file keeps that size. A log that large slows every
// read that must look through it, and a crash replays all of it at the
// next open.
const WALLimit = 64 << 20

// walCheckEvery is how often the keeper looks at the log's size: a stat
// of its file, nothing more while it is under WALLimit.
const walCheckEvery = 250 * time.Millisecond

// walMaxBackoff bounds how long the keeper waits before it tries again
// after a checkpoint that a long transaction kept from finishing.
const walMaxBackoff = 10 * time.Second

// walTightBackoff bounds that wait instead once the log's file is past
// twice its limit: writes go on while the keeper waits, and a checkpoint
// that failed only because the machine's cores were too busy for it to
// take the write lock within restartWait would otherwise leave them up to
// walMaxBackoff of writes (about a gigabyte at 16 clients here) before
// the next try. A long reader that keeps every try from finishing costs
// the writers restartWait a try: a twentieth of their time at most.
const walTightBackoff = time.Second

// walKeeper bounds the log of one database file while its DB is open
// (Engine.StartHousekeeping, StopHousekeeping): every walCheckEvery it
// reads the log file's size and, past limit, checkpoints the log so that
// it starts over (restart), on a connection of the pool. Nothing committed
// is lost: a checkpoint only copies pages the log holds into the database
// file, and the log starts over only once every page it holds is there.
type walKeeper struct {
	path  string // the log file: the database file's path + "-wal"
	limit int64
	every time.Duration

	once   sync.Once
	cancel context.CancelFunc
	done   chan struct{}

	restarts atomic.Int64 // RESTART checkpoints that finished: the log started over
	backoff  atomic.Int64 // the wait after the last try that did not, in ns
}

// start runs the keeper on db until stop; only its first call starts it.
func (k *walKeeper) start(db *sql.DB) {
	k.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		k.cancel, k.done = cancel, make(chan struct{})
		go k.run(ctx, db)
	})
}

// stop ends the keeper, interrupting a checkpoint in progress, and
// returns once it has ended. It is safe to call more than once, and
// without start.
func (k *walKeeper) stop() {
	k.once.Do(func() {}) // never starts after a stop
	if k.cancel != nil {
		k.cancel()
		<-k.done
	}
}

func (k *walKeeper) run(ctx context.Context, db *sql.DB) {
	defer close(k.done)
	t := time.NewTicker(k.every)
	defer t.Stop()
	backoff := k.every
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fi, err := os.Stat(k.path)
		if err != nil || fi.Size() <= k.limit {
			continue
		}
		if k.restart(ctx, db) {
			t.Reset(k.every)
			backoff = k.every
			continue
		}
		// A reader or writer held on: look again later, and later still
		// while it does (walBackoff).
		backoff = walBackoff(backoff, fi.Size(), k.limit)
		k.backoff.Store(int64(backoff))
		t.Reset(backoff)
	}
}

// walBackoff returns how long the keeper waits before it tries again
// after a try that did not have the log start over, when it waited
// backoff before that one and the log's file is size bytes: twice as
// long, up to walMaxBackoff, or up to walTightBackoff while the file is
// past twice limit.
func walBackoff(backoff time.Duration, size, limit int64) time.Duration {
	backoff = min(2*backoff, walMaxBackoff)
	if size > 2*limit {
		backoff = min(backoff, walTightBackoff)
	}
	return backoff
}

// restartWait is how long the keeper's RESTART checkpoint waits for the
// write lock and then for the log's last readers, holding the write lock
// through that second wait: writers wait at most about this long for it.
const restartWait = 50 * time.Millisecond

// restart checkpoints the log in two steps, on one connection of the
// pool. A PASSIVE checkpoint first copies the log into the database file
// and syncs both, beside the writers, which go on. Then a RESTART
// checkpoint takes the write lock, copies what was committed meanwhile,
// waits for the readers still reading the log (new ones read the database
// file) and has the next writer start the log over, which
// journal_size_limit cuts back to WALLimit. Run alone, the RESTART
// checkpoint held the write lock through the sync of everything since the
// last one: 150 ms for 128 MiB here; after the PASSIVE one, about 10 ms.
// It waits restartWait at most, not the busy timeout, for a reader that
// holds the log longer (a long read transaction) would otherwise hold
// every writer with it: it reports false, and the keeper looks again
// later, backing off.
func (k *walKeeper) restart(ctx context.Context, db *sql.DB) bool {
	c, err := db.Conn(ctx)
	if err != nil {
		return false
	}
	defer c.Close()
	var busy, frames, moved int64
	if err := c.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &moved); err != nil {
		return false
	}
	if _, err := c.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", restartWait.Milliseconds())); err != nil {
		return false
	}
	err = c.QueryRowContext(ctx, "PRAGMA wal_checkpoint(RESTART)").Scan(&busy, &frames, &moved)
	// The connection goes back to the pool with the busy timeout every
	// connection has, or not at all.
	if _, rerr := c.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", BusyTimeout.Milliseconds())); rerr != nil {
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
	}
	if err != nil || busy != 0 {
		return false
	}
	k.restarts.Add(1)
	return true
}
