package testdb

import (
	"context"
	"testing"
	"time"

	"github.com/racefree/racefree"
)

// BlockedBy polls until a session of PostgreSQL waits for a lock that the
// backend pid holds (true), or done is closed first (false; a nil done
// never closes), and fails the test after 30 s. It observes the wait
// itself, so a test neither sleeps nor guesses.
func BlockedBy(t testing.TB, db *racefree.DB, pid int, done <-chan struct{}) bool {
	t.Helper()
	blocked := false
	poll(t, db, pid, done, 30*time.Second, "neither blocked nor done", func(n int) bool { blocked = n > 0; return blocked })
	return blocked
}

// Unblocked polls until no session of PostgreSQL waits for a lock of the
// backend pid, and fails the test when some still do after within.
func Unblocked(t testing.TB, db *racefree.DB, pid int, within time.Duration) {
	t.Helper()
	poll(t, db, pid, nil, within, "sessions still wait for the backend's locks", func(n int) bool { return n == 0 })
}

// poll reads, every 2 ms, how many sessions wait for a lock of pid, until
// stop says so or done is closed; it fails the test with what after within.
func poll(t testing.TB, db *racefree.DB, pid int, done <-chan struct{}, within time.Duration, what string, stop func(waiting int) bool) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(within)
	for {
		var n int
		if err := db.QueryRowContext(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if stop(n) {
			return
		}
		select {
		case <-done:
			return
		case <-deadline:
			t.Fatalf("%s after %s", what, within)
		case <-tick.C:
		}
	}
}
