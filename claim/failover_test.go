package claim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// tlFloor is the lowest fence a new tenure gets on timeline tl:
// (tl - 1) * 2^40 + 1.
func tlFloor(tl int64) int64 { return (tl-1)<<40 + 1 }

// TestFencesJumpPastAFailoverThatLostCommits runs a real primary and an
// asynchronous streaming standby, acquires claims on the primary while the
// standby does not receive them, kills the primary and promotes the
// standby, which never got those commits: the tenures they acknowledged
// are lost, and the promoted node's rows hold older fences. Every fence the
// new primary then hands out, alone (acquire) and in a batch (acquire_many,
// the combiner), on a key whose row it has and on one it never saw, is
// above every fence acknowledged before the failover, and fences still
// grow by one after that. It runs as an application role (neither
// superuser nor BYPASSRLS): the timeline is readable to any role.
func TestFencesJumpPastAFailoverThatLostCommits(t *testing.T) {
	t.Parallel()
	c := testdb.NewCluster(t)
	ctx := context.Background()
	owner := c.Primary.Open(t, nil)
	role := c.AppRole(t, owner)
	open := func(cfg *racefree.Config) *racefree.DB {
		t.Helper()
		db, err := dsn.Open(ctx, c.Primary.URLAs(role), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	db := open(nil)
	claims := claim.New(db)
	// highest: the highest fence acknowledged for each key, before the failover.
	highest := map[string]int64{}
	tenure := func(key, holder string, release bool) {
		t.Helper()
		got, err := claims.Acquire(ctx, db, key, holder, time.Minute)
		if err != nil {
			t.Fatalf("acquire %s by %s: %v", key, holder, err)
		}
		if got.Fence <= highest[key] {
			t.Fatalf("acquire %s by %s: fence %d, not above %d", key, holder, got.Fence, highest[key])
		}
		highest[key] = got.Fence
		if release {
			if err := claims.Release(ctx, db, key, holder, got.Fence); err != nil {
				t.Fatalf("release %s by %s: %v", key, holder, err)
			}
		}
	}
	keys := []string{"k", "b0", "b1", "b2"}
	for i := range 3 { // fences 1..3 on every key, released, and replicated
		for _, k := range keys {
			tenure(k, fmt.Sprint("old-", i), true)
		}
	}
	if got, want := highest["k"], int64(3); got != want {
		t.Fatalf("fence on timeline 1 = %d, want %d (unchanged by the timeline's floor)", got, want)
	}
	// On the standby (read-only) the statement fails as any write does, not
	// on the WAL functions it reads the timeline with.
	c.WaitStreaming(t)
	sdb, err := dsn.Open(ctx, c.Standby.URLAs(role), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = claim.New(sdb).Acquire(ctx, sdb, "k", "on-the-standby", time.Minute)
	_ = sdb.Close()
	var pgErr *pgconn.PgError
	if err == nil || !(errors.As(err, &pgErr) && pgErr.Code == "25006" || strings.Contains(err.Error(), "read-only")) {
		t.Fatalf("acquire on the standby: %v, want the read-only transaction error (SQLSTATE 25006)", err)
	}
	before := c.Primary.Timeline(t)
	c.FailOverLosing(t, func() {
		for i := 3; i < 5; i++ { // fences 4 and 5, acknowledged and lost
			for _, k := range keys {
				tenure(k, fmt.Sprint("lost-", i), i < 4)
			}
		}
		tenure("never-replicated", "lost", false)
	})
	after := c.Primary.Timeline(t)
	if after <= before {
		t.Fatalf("timeline %d after the promotion, want above %d", after, before)
	}

	db = open(nil)
	claims = claim.New(db)
	var row int64
	if err := c.Primary.DB(t).QueryRowContext(ctx, `SELECT fence FROM racefree_claims WHERE key = 'k'`).Scan(&row); err != nil || row != 3 {
		t.Fatalf("the promoted node's row of k has fence %d (%v), want 3: the failover must have lost fences 4 and 5", row, err)
	}
	check := func(how, key string, got *claim.Claim, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s %s on the new primary: %v", how, key, err)
		}
		if got.Fence <= highest[key] || got.Fence < tlFloor(after) {
			t.Errorf("%s %s on the new primary: fence %d, want above %d (acknowledged before the failover) and at least %d (timeline %d's floor)",
				how, key, got.Fence, highest[key], tlFloor(after), after)
		}
	}
	for _, k := range []string{"k", "never-replicated"} {
		got, err := claims.Acquire(ctx, db, k, "new", time.Minute)
		check("acquire", k, got, err)
		if err := claims.Release(ctx, db, k, "new", got.Fence); err != nil {
			t.Fatal(err)
		}
		again, err := claims.Acquire(ctx, db, k, "newer", time.Minute)
		if err != nil || again.Fence != got.Fence+1 {
			t.Errorf("the next tenure of %s on the new timeline: %+v, %v; want fence %d", k, again, err, got.Fence+1)
		}
	}

	// The batch path (acquire_many), on the keys the lost tenures left live on
	// the old primary and free on the new one.
	cdb := open(&racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1})
	cclaims := claim.New(cdb)
	if _, err := cclaims.Acquire(ctx, cdb, "warm", "w", time.Minute); err != nil { // registers the tenant in this process, alone
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]*claim.Claim{}
	errs := map[string]error{}
	gated(t, cdb, cclaims, 3, func(i int) {
		k := fmt.Sprint("b", i)
		c, err := cclaims.Acquire(ctx, cdb, k, "batch", time.Minute)
		mu.Lock()
		defer mu.Unlock()
		got[k], errs[k] = c, err
	})
	for i := range 3 {
		k := fmt.Sprint("b", i)
		check("batched acquire", k, got[k], errs[k])
	}
}

// TestFencesOnTimelineOneAreUnchanged pins the shape of a fence at the
// timeline's floor: on timeline 1 (every database that never failed over,
// as the test server) the floor is 1, so a key's first fence is 1 and each
// new tenure adds one, alone and in a batch, as on SQLite.
func TestFencesOnTimelineOneAreUnchanged(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	var tl int64
	if err := db.SQL().QueryRow(`SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint`).Scan(&tl); err != nil {
		t.Fatal(err)
	}
	if tl != 1 {
		t.Skipf("the test server is on timeline %d: this test needs one that never failed over", tl)
	}
	claims := claim.New(db)
	ctx := context.Background()
	for want := int64(1); want <= 3; want++ {
		c, err := claims.Acquire(ctx, db, "k", fmt.Sprint("h", want), time.Minute)
		if err != nil || c.Fence != want {
			t.Fatalf("tenure %d: %+v, %v; want fence %d", want, c, err, want)
		}
		if err := claims.Release(ctx, db, "k", c.Holder, c.Fence); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTheTimelineFloorsShape pins the arithmetic of the floor the
// PostgreSQL statements compute, on the server itself: timeline t's floor
// is (t-1)·2^40 + 1, so timeline 1 keeps fences from 1 and every floor is
// above every fence a lower timeline issued while it issued fewer than
// 2^40 in a namespace. A key past 2^40 tenures on one timeline keeps
// growing by one (fences never go backwards), into the next timeline's
// range: only a failover that then lost its last tenures could repeat one.
func TestTheTimelineFloorsShape(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	floor := func(hex string) int64 {
		t.Helper()
		var f int64
		// The expression of acquire.sql, on a WAL file name given here.
		if err := db.SQL().QueryRow(`SELECT ((('x' || substr($1::text, 1, 8))::bit(32)::bigint - 1) << 40) + 1`, hex+"000000000000000D").Scan(&f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, c := range []struct {
		hex  string
		want int64
	}{
		{"00000001", 1},
		{"00000002", 1<<40 + 1},
		{"00000003", 2<<40 + 1},
		{"0000000A", 9<<40 + 1},
		{"00800000", (1<<23-1)<<40 + 1}, // the last timeline whose floor fits an int64
	} {
		if got := floor(c.hex); got != c.want {
			t.Errorf("floor of timeline %s = %d, want %d", c.hex, got, c.want)
		}
		if got := tlFloor(int64(parseHex(t, c.hex))); got != c.want {
			t.Errorf("tlFloor(%s) = %d, want %d", c.hex, got, c.want)
		}
	}
	// Past 2^40 tenures on timeline 1, a key's fence keeps growing by one:
	// a row at fence 2^40 (timeline 2's floor - 1) gets 2^40 + 1, and the
	// next one 2^40 + 2, above timeline 2's floor.
	ctx := context.Background()
	claims := claim.New(db)
	if _, err := claims.Acquire(ctx, db, "busy", "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL().Exec(`UPDATE racefree_claims SET fence = $1, expires_at = 0 WHERE key = 'busy'`, int64(1)<<40); err != nil {
		t.Fatal(err)
	}
	for want := int64(1)<<40 + 1; want <= 1<<40+2; want++ {
		c, err := claims.Acquire(ctx, db, "busy", fmt.Sprint("h", want), time.Minute)
		if err != nil || c.Fence != want {
			t.Fatalf("acquire past 2^40: %+v, %v; want fence %d", c, err, want)
		}
		if err := claims.Release(ctx, db, "busy", c.Holder, c.Fence); err != nil {
			t.Fatal(err)
		}
	}
}

func parseHex(t *testing.T, s string) uint32 {
	t.Helper()
	var v uint32
	if _, err := fmt.Sscanf(s, "%x", &v); err != nil {
		t.Fatal(errors.Join(err, fmt.Errorf("parse %q", s)))
	}
	return v
}
