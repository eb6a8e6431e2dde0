package reliability

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/getorcreate"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestExistsWaitsForTheSynchronousStandby: getorcreate.Do answers
// "exists" (created false) only about a row that is on the synchronous
// standby (invariant 15), on a primary with a synchronous standby
// (testdb.NewCluster, synchronous_standby_names = '*'), given the
// *racefree.DB, a *sql.DB, or the caller's *sql.Tx. The first Do of each
// key creates the row; its COMMIT waits for the standby, which is gone,
// and the wait ends without it (the backend terminated, as a fast
// shutdown of an old primary terminates every backend): the row is
// committed on the primary alone.
//
// The next Do of the key must not hand that row out then: a caller that
// got it acts on a row a failover loses. Do locks the row it read
// (getorcreate/sql/postgres/durable.sql), so the COMMIT (the statement's
// own, or the caller's transaction's) waits for the standby past the
// row's: it is seen waiting (SyncRep) instead of answering. Once the
// standby is back it answers created false, and after a failover to that
// standby every row is there. Without the lock (mutants 976, 977) the
// second Do answers at once.
func TestExistsWaitsForTheSynchronousStandby(t *testing.T) {
	c, p := syncCluster(t)
	db := c.Primary.Open(t, nil)
	if _, err := p.Exec(`CREATE TABLE users (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email TEXT NOT NULL UNIQUE)`); err != nil {
		t.Fatal(err)
	}
	get := func(ctx context.Context, exec racefree.Executor, email string) (bool, error) {
		var id int64
		return getorcreate.Do(ctx, exec, getorcreate.Query{
			Insert: `INSERT INTO users (email) VALUES ($1) ON CONFLICT (email) DO NOTHING RETURNING id`, InsertArgs: []any{email},
			Select: `SELECT id FROM users WHERE email = $1`, SelectArgs: []any{email},
		}, func(row *sql.Row) error { return row.Scan(&id) })
	}
	paths := []struct {
		name string
		do   func(ctx context.Context, email string) (bool, error)
	}{
		{"racefree.DB", func(ctx context.Context, email string) (bool, error) { return get(ctx, db, email) }},
		{"sql.DB", func(ctx context.Context, email string) (bool, error) { return get(ctx, p, email) }},
		{"caller's tx", func(ctx context.Context, email string) (created bool, err error) {
			err = db.InTx(ctx, func(tx *sql.Tx) error {
				created, err = get(ctx, tx, email)
				return err
			})
			return created, err
		}},
	}
	c.WaitStreaming(t)
	c.Standby.Stop(t)

	type result struct {
		created bool
		err     error
	}
	run := func(path int) <-chan result {
		out := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			created, err := paths[path].do(ctx, paths[path].name)
			out <- result{created, err}
		}()
		return out
	}
	var firsts []<-chan result
	for i := range paths {
		firsts = append(firsts, run(i))
	}
	// End the first calls' waits for the standby until their rows are
	// committed on the primary alone.
	waitRow(t, p, `SELECT count(pg_terminate_backend(pid)) >= 0
		AND (SELECT count(*) FROM users) = 3
		FROM pg_stat_activity WHERE wait_event = 'SyncRep'`)
	for _, first := range firsts {
		<-first // an error, or created: the commit's wait was ended
	}

	var seconds []<-chan result
	for i := range paths {
		second := run(i)
		seconds = append(seconds, second)
		waitsForTheStandby(t, p, paths[i].name, second, i+1)
	}

	c.Standby.Start(t)
	for i, second := range seconds {
		if r := <-second; r.err != nil || r.created {
			t.Errorf("%s: the second call once the standby is back: created %v, %v, want the row that exists", paths[i].name, r.created, r.err)
		}
	}
	// With the synchronous standby, a select PostgreSQL cannot lock is
	// the engine's error naming the lock, never the row unlocked.
	var id int64
	created, err := getorcreate.Do(context.Background(), db, getorcreate.Query{
		Insert: `INSERT INTO users (email) VALUES ($1) ON CONFLICT (email) DO NOTHING RETURNING id`, InsertArgs: []any{paths[0].name},
		Select: `SELECT DISTINCT id FROM users WHERE email = $1`, SelectArgs: []any{paths[0].name},
	}, func(row *sql.Row) error { return row.Scan(&id) })
	if err == nil || created || !strings.Contains(err.Error(), "FOR KEY SHARE") {
		t.Errorf("a DISTINCT select with a synchronous standby: created %v, %v; want the error of a select FOR KEY SHARE cannot lock", created, err)
	}
	c.Primary.Kill(t)
	c.Promote(t)
	var n int
	if err := c.Primary.DB(t).QueryRow(`SELECT count(*) FROM users`).Scan(&n); err != nil || n != len(paths) {
		t.Errorf("after the failover: %d rows, %v, want the %d handed out", n, err, len(paths))
	}
}

// syncCluster starts a primary with a synchronous standby
// (synchronous_standby_names = '*') and returns it with the primary's
// pool, once the standby streams as sync.
func syncCluster(t *testing.T) (*testdb.Cluster, *sql.DB) {
	t.Helper()
	c := testdb.NewCluster(t)
	p := c.Primary.DB(t)
	testdb.ExecAll(t, p, `ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`)
	waitRow(t, p, `SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'`)
	return c, p
}

// waitsForTheStandby fails the test if answer delivers before the
// primary p counts n backends waiting for the synchronous standby
// (SyncRep): the call that answer belongs to must wait, not answer, while
// no standby has what it read (a minute at most).
func waitsForTheStandby[T any](t *testing.T, p *sql.DB, what string, answer <-chan T, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		select {
		case r := <-answer:
			t.Fatalf("%s: answered %+v while no standby has what it read: a failover now loses what it acknowledges", what, r)
		default:
		}
		var waiting bool
		if err := p.QueryRow(`SELECT count(*) = $1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'`, n).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: waited a minute for it to answer or wait for the standby", what)
		}
	}
}
