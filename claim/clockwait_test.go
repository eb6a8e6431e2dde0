package claim_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestADecisionReadsTheClockAfterItsLockWait is a release that commits
// while an acquire or a renew of the same holder waits for its row lock, on
// PostgreSQL's own clock. The waiting statement decides after the release,
// so it must decide with a clock read after the release's: an acquire
// starts a new tenure (the next fence), and a renew finds nothing to renew.
// A statement that read its clock before the wait sees the released claim
// as still live (its expiry, the release's clock, is later than the stale
// reading) and revives the released tenure: same fence, a new expiry, a
// state no order of the two operations explains. SQLite runs one writer at
// a time, so its statements read the clock holding the write lock. The
// same holds for the statements over arrays that run a batch of the
// combiner (acquire_many, renew_many).
func TestADecisionReadsTheClockAfterItsLockWait(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	plain := testdb.Open(t, d, nil) // the database's clock
	combining := testdb.Open(t, d, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1})
	ctx := context.Background()
	for _, op := range []string{"acquire", "renew", "combined acquire", "combined renew"} {
		t.Run(op, func(t *testing.T) {
			db := plain
			if strings.HasPrefix(op, "combined") {
				db = combining
			}
			claims := claim.New(db)
			key := "clock-" + op
			first, err := claims.Acquire(ctx, db, key, "h", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			tx, err := db.SQL().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := claims.Renew(ctx, tx, key, "h", first.Fence, time.Minute); err != nil { // holds the row's lock
				t.Fatal(err)
			}
			pid := testdb.BackendPID(t, tx)
			done := make(chan struct{})
			var got *claim.Claim
			var opErr error
			call := func() {
				if strings.HasSuffix(op, "acquire") {
					got, opErr = claims.Acquire(ctx, db, key, "h", time.Minute)
				} else {
					got, opErr = claims.Renew(ctx, db, key, "h", first.Fence, time.Minute)
				}
			}
			if db == combining {
				// In a batch of two, which runs over arrays, with a call of
				// the same kind on a key of its own.
				other := key + "-other"
				o, err := claims.Acquire(ctx, db, other, "h", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				var otherErr error
				wait := together(t, db, claims, call, func() {
					if strings.HasSuffix(op, "acquire") {
						_, otherErr = claims.Acquire(ctx, db, other, "h", time.Minute)
					} else {
						_, otherErr = claims.Renew(ctx, db, other, "h", o.Fence, time.Minute)
					}
				})
				go func() {
					defer close(done)
					wait()
					if otherErr != nil {
						t.Errorf("the other call of the batch: %v", otherErr)
					}
				}()
			} else {
				go func() {
					defer close(done)
					call()
				}()
			}
			if !testdb.BlockedBy(t, db, pid, done) {
				t.Fatalf("the %s did not wait for the open renew: %+v, %v", op, got, opErr)
			}
			// Whatever the waiting statement read of the clock, it read it
			// by now; the release reads a later millisecond.
			var blocked, now int64
			clockMs := `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`
			if err := db.QueryRowContext(ctx, clockMs).Scan(&blocked); err != nil {
				t.Fatal(err)
			}
			for now <= blocked {
				if err := db.QueryRowContext(ctx, clockMs).Scan(&now); err != nil {
					t.Fatal(err)
				}
			}
			if err := claims.Release(ctx, tx, key, "h", first.Fence); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			<-done
			switch {
			case strings.HasSuffix(op, "acquire"):
				if opErr != nil || got.Fence != first.Fence+1 {
					t.Fatalf("acquire after the release committed: %+v, %v; want a new tenure with fence %d", got, opErr, first.Fence+1)
				}
			default:
				if !errors.Is(opErr, racefree.ErrNotHeld) {
					t.Fatalf("renew after the release committed: %+v, %v; want ErrNotHeld", got, opErr)
				}
			}
		})
	}
}
