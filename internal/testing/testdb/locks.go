package testdb

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/racefree/racefree"
)

// BackendPID returns the pid of the PostgreSQL backend that runs q's
// statements (a transaction or a connection that holds locks), for
// BlockedBy and Unblocked.
func BackendPID(t testing.TB, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) int {
	t.Helper()
	var pid int
	if err := q.QueryRowContext(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// Within runs call on a goroutine of its own and returns what it returns,
// or fails the test when it has not returned after d: a call that must
// give up by itself (at its deadline, on a lock it cannot get) fails the
// test rather than hanging it. A call that outlives the test keeps running
// until it returns.
func Within[T any](t testing.TB, d time.Duration, what string, call func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- call() }()
	select {
	case v := <-done:
		return v
	case <-time.After(d):
		t.Fatalf("%s: no answer after %s", what, d)
		panic("unreachable")
	}
}

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
