package reliability

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestReplayWaitsForTheSynchronousStandby is the failover test's known gap
// made deterministic, on a primary with a synchronous standby
// (testdb.NewCluster, synchronous_standby_names = '*'): an audit append's
// COMMIT waits for the standby, which is gone, so the request times out
// (503) and its backend keeps waiting, its transaction invisible. Then
// the backend is terminated, as a fast shutdown of an old primary (a
// controlled failover's demotion) terminates every backend: PostgreSQL
// ends the wait ("the transaction has already committed locally, but
// might not have been replicated to the standby") and the transaction
// becomes visible on the primary alone. The retry with the same
// Idempotency-Key then replays the stored answer, read without a commit
// that would wait for the standby, so 200 acknowledges an entry that the
// failover to the standby loses.
//
// What the test wants: whatever the retry acknowledges is on the promoted
// standby. The replay should not answer before the record is on the
// synchronous standby (for instance, its transaction takes an xid, so that
// its COMMIT waits for the standby past the record's commit).
func TestReplayWaitsForTheSynchronousStandby(t *testing.T) {
	t.Skip("known gap, reported with the failover test: an Idempotency-Key replay acknowledges a record not yet on the synchronous standby; remove this skip with the fix")
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
	waitRow(t, p, `SELECT count(pg_terminate_backend(pid)) > 0 FROM pg_stat_activity WHERE wait_event = 'SyncRep'`)
	waitRow(t, p, `SELECT count(*) = 0 FROM pg_stat_activity WHERE wait_event = 'SyncRep'`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	retry := call(ctx, "POST", in.url("/v1/audit"), body, "Idempotency-Key", `"k2"`)
	cancel()

	c.Primary.Kill(t)
	c.Standby.Start(t)
	c.Promote(t)
	after := serveInProcess(t, c.Primary.Open(t, nil), server.Options{AuditKeys: keys})
	a := call(context.Background(), "GET", after.url("/v1/audit?scope=s"), "")
	entries, _ := a.body["entries"].([]any)
	if retry.code == 200 && len(entries) < 2 {
		t.Errorf("the retry acknowledged entry %d (replayed %v) while no standby had it; after the failover the chain holds %d entries", retry.int("seq"), retry.replayed, len(entries))
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
