package reliability

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestReplayWaitsForTheSynchronousStandby: an Idempotency-Key replay
// acknowledges a record only once it is on the synchronous standby
// (invariant 15), on a primary with a synchronous standby
// (testdb.NewCluster, synchronous_standby_names = '*'). An audit append's
// COMMIT waits for the standby, which is gone, so the request times out
// (503) and its backend keeps waiting, its transaction invisible. Then the
// wait ends without the standby: the backend is terminated, as a fast
// shutdown of an old primary (a controlled failover's demotion)
// terminates every backend, or pgx's cancel request on the timed-out
// connection has ended it already. PostgreSQL says "the transaction has
// already committed locally, but might not have been replicated to the
// standby", and the entry is visible on the primary alone.
//
// The retry with the same Idempotency-Key must not answer 200 then: its
// replay read locks the record (idempotency/sql/postgres/get.sql), so its
// COMMIT waits for the standby past the record's commit, and the request
// times out, 503. Once the standby is back, the retry replays seq 2, and
// after a failover to that standby the entry it acknowledged is there.
// Without the wait (mutant 890) the first retry answers 200 for an entry
// that a failover at that moment loses.
func TestReplayWaitsForTheSynchronousStandby(t *testing.T) {
	c := testdb.NewCluster(t)
	p := c.Primary.DB(t)
	if _, err := p.Exec(`ALTER SYSTEM SET synchronous_standby_names = '*'`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(`SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	waitRow(t, p, `SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state = 'sync'`)
	keys := testKeyring(t)
	in := serveInProcess(t, c.Primary.Open(t, nil), server.Options{AuditKeys: keys, RequestTimeout: time.Second})
	if a := settle(t, "POST", in.url("/v1/audit"), `{"scope":"s","actor":"a","action":"x","subject":"k1"}`, "k1"); a.code != 200 {
		t.Fatalf("first append: %d %v", a.code, a.body)
	}
	c.WaitStreaming(t)
	c.Standby.Stop(t)

	body := `{"scope":"s","actor":"a","action":"x","subject":"k2"}`
	if a := call(context.Background(), "POST", in.url("/v1/audit"), body, "Idempotency-Key", `"k2"`); a.code != 503 {
		t.Fatalf("append while the synchronous standby is away: %d %v, want 503 after the request timeout", a.code, a.body)
	}
	// End the backend's wait for the standby (unless pgx's cancel request
	// did) until k2's record is committed on the primary alone.
	waitRow(t, p, `SELECT count(pg_terminate_backend(pid)) >= 0
		AND EXISTS (SELECT 1 FROM racefree_idempotency WHERE key = 'k2' AND status = 'completed')
		FROM pg_stat_activity WHERE wait_event = 'SyncRep'`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	retry := call(ctx, "POST", in.url("/v1/audit"), body, "Idempotency-Key", `"k2"`)
	cancel()
	if retry.code != 503 {
		t.Errorf("retry while no standby has the entry: %d (entry %d, replayed %v), want 503: a failover now loses what it acknowledges", retry.code, retry.int("seq"), retry.replayed)
	}

	c.Standby.Start(t)
	waitRow(t, p, `SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'`)
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	var again answer
	for again = call(ctx, "POST", in.url("/v1/audit"), body, "Idempotency-Key", `"k2"`); again.code == 503 && ctx.Err() == nil; {
		again = call(ctx, "POST", in.url("/v1/audit"), body, "Idempotency-Key", `"k2"`)
	}
	cancel()
	if again.code != 200 || !again.replayed || again.int("seq") != 2 {
		t.Fatalf("retry once the standby is back: %d replayed %v seq %d %v, want 200 replayed seq 2", again.code, again.replayed, again.int("seq"), again.body)
	}

	c.Primary.Kill(t)
	c.Promote(t)
	after := serveInProcess(t, c.Primary.Open(t, nil), server.Options{AuditKeys: keys})
	a := call(context.Background(), "GET", after.url("/v1/audit?scope=s"), "")
	if entries, _ := a.body["entries"].([]any); len(entries) != 2 {
		t.Errorf("after the failover the chain holds %d entries, want the 2 acknowledged", len(entries))
	}
}

// waitRow polls a query returning one boolean until it is true (a minute
// at most).
func waitRow(t testing.TB, db interface {
	QueryRow(string, ...any) *sql.Row
}, query string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var ok bool
		if err := db.QueryRow(query).Scan(&ok); err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", query)
		}
	}
}
