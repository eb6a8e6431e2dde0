package testdb_test

import (
	"testing"

	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestClusterFailOverLosesTheTail proves the harness does what failover
// tests rely on: a commit the primary acknowledged while the standby was
// away is gone after FailOverLosing, the promoted node writes on a higher
// timeline, and pg_walfile_name names that timeline right after the
// promotion (the insertion timeline, on PostgreSQL 15 and later).
func TestClusterFailOverLosesTheTail(t *testing.T) {
	t.Parallel()
	c := testdb.NewCluster(t)
	p := c.Primary.DB(t)
	if _, err := p.Exec(`CREATE TABLE acked (n int PRIMARY KEY); INSERT INTO acked VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	before := c.Primary.Timeline(t)
	c.FailOverLosing(t, func() {
		if _, err := c.Primary.DB(t).Exec(`INSERT INTO acked VALUES (2)`); err != nil {
			t.Fatal(err)
		}
	})
	var n int
	if err := c.Primary.DB(t).QueryRow(`SELECT max(n) FROM acked`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if got, want := n, 1; got != want {
		t.Fatalf("max(n) on the promoted node = %d, want %d (the commit made while the standby was away must be lost)", got, want)
	}
	if got := c.Primary.Timeline(t); got <= before {
		t.Fatalf("timeline after promotion = %d, want above %d", got, before)
	}
	if _, err := c.Primary.DB(t).Exec(`INSERT INTO acked VALUES (3)`); err != nil {
		t.Fatalf("the promoted node refuses writes: %v", err)
	}
}
