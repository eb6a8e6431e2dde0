package quota_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
)

// TestDenialAfterALockWaitReadsTheNewCounter has a charge wait for the
// row lock of a concurrent charge that then commits: the refusal must say
// how long to wait from the counter it refused on, the committed one, not
// from the older version of its snapshot (PostgreSQL; SQLite has one
// writer and no snapshot older than the write lock).
func TestDenialAfterALockWaitReadsTheNewCounter(t *testing.T) {
	t.Parallel()
	_, cfg := manual(t0)
	app := fmt.Sprintf("quota-lockwait-%d", time.Now().UnixNano())
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres)+"&application_name="+app, cfg)
	ctx := context.Background()
	l := setup(t, db)
	p := quota.Policy{Kind: quota.GCRA, Rate: 1, Per: time.Second, Burst: 2, Wait: time.Minute}
	consume(t, l, db, "k", 1, p) // tat = t0 + 1s
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if d := consume(t, l, tx, "k", 1, p); !d.Allowed { // tat = t0 + 2s, not committed
		t.Fatal(d)
	}
	done := make(chan quota.Decision, 1)
	go func() {
		d, err := l.Consume(ctx, db, "k", 2, p)
		if err != nil {
			t.Error(err)
		}
		done <- d
	}()
	for waiting := 0; waiting == 0; {
		select {
		case d := <-done:
			t.Fatalf("the charge did not wait for the lock: %+v", d)
		default:
		}
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 0 {
			time.Sleep(5 * time.Millisecond) // poll the state
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	d := <-done
	// From the committed counter (full at t0 + 2s), 2 units are back at
	// t0 + 2s; from the snapshot's (full at t0 + 1s) it would say 1s.
	if got, want := d, (quota.Decision{RetryAfter: 2 * time.Second, ResetAt: t0.Add(2 * time.Second), ResetAfter: 2 * time.Second}); got != want {
		t.Fatalf("denial after the lock wait: %+v, want %+v", got, want)
	}
}
