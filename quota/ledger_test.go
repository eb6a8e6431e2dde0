package quota_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/quota"
)

var (
	perHour = quota.Policy{Kind: quota.FixedWindow, Rate: 1, Per: time.Hour, Wait: time.Minute}
	perDay  = quota.Policy{Kind: quota.FixedWindow, Rate: 100, Per: 24 * time.Hour, Wait: time.Minute}
)

// hourAndDay is one request of a user: a per-day and a per-hour charge,
// both carrying the request's id.
func hourAndDay(user, id string) []quota.Request {
	return []quota.Request{
		{Key: user + ":day", N: 1, Policy: perDay, ConsumptionKey: id},
		{Key: user + ":hour", N: 1, Policy: perHour, ConsumptionKey: id},
	}
}

// TestAConsumptionKeyChargesEachOfItsRequestsOnce: one ConsumeAll whose
// per-day and per-hour requests carry the caller's request id charges
// each once: of 5 distinct requests, a per-hour limit of 1 admits 1, and
// the replay of that one charges neither counter again.
func TestAConsumptionKeyChargesEachOfItsRequestsOnce(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		ctx := context.Background()
		allowed := 0
		for i := range 5 {
			d, err := l.ConsumeAll(ctx, db, hourAndDay("u", fmt.Sprintf("req-%d", i)))
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if d.Replayed {
				t.Fatalf("request %d, a new consumption key: %+v, replayed", i, d)
			}
			if d.Allowed {
				allowed++
			}
		}
		if allowed != 1 {
			t.Fatalf("%d of 5 distinct requests admitted under a per-hour limit of 1, want 1", allowed)
		}
		if _, used := row(t, db, "u:hour", quota.FixedWindow); used != 1 {
			t.Fatalf("per-hour counter %d, want 1", used)
		}
		if _, used := row(t, db, "u:day", quota.FixedWindow); used != 1 {
			t.Fatalf("per-day counter %d, want 1 (the refused requests charge nothing)", used)
		}
		d, err := l.ConsumeAll(ctx, db, hourAndDay("u", "req-0"))
		if err != nil || !d.Allowed || !d.Replayed || d.Remaining != 0 || !d.ResetAt.Equal(t0.Add(24*time.Hour)) {
			t.Fatalf("replay of the admitted request: %+v, %v; want replayed with its figures (0 remaining, reset in a day)", d, err)
		}
		if _, used := row(t, db, "u:day", quota.FixedWindow); used != 1 {
			t.Fatalf("per-day counter %d after the replay, want 1", used)
		}
		// The requests of a call in another order are the same request.
		reversed := hourAndDay("u", "req-0")
		reversed[0], reversed[1] = reversed[1], reversed[0]
		if d, err := l.ConsumeAll(ctx, db, reversed); err != nil || !d.Replayed {
			t.Fatalf("replay with the requests in another order: %+v, %v; want replayed", d, err)
		}
	})
}

// TestAConsumptionKeyIsBoundToItsRequest: a consumption key first charged
// for one request is refused, never replayed, with another quota key,
// policy, n or set of requests; the refused call charges nothing, on the
// pool and under the caller's savepoint; of 20 concurrent calls each for
// another user under one key, one is charged and 19 refused.
func TestAConsumptionKeyIsBoundToItsRequest(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		ctx := context.Background()
		first := []quota.Request{{Key: "alice", N: 2, Policy: gcra, ConsumptionKey: "order-9"}}
		if d, err := l.ConsumeAll(ctx, db, first); err != nil || !d.Allowed || d.Replayed {
			t.Fatalf("first charge: %+v, %v", d, err)
		}
		other := func(mod func(*quota.Request)) []quota.Request {
			r := first[0]
			mod(&r)
			return []quota.Request{r}
		}
		for name, reqs := range map[string][]quota.Request{
			"another user's key": other(func(r *quota.Request) { r.Key = "bob" }),
			"another n":          other(func(r *quota.Request) { r.N = 1 }),
			"another policy":     other(func(r *quota.Request) { r.Policy = window }),
			"another rate":       other(func(r *quota.Request) { r.Policy.Rate = 20 }),
			"another burst":      other(func(r *quota.Request) { r.Policy.Burst = 4 }),
			"another per":        other(func(r *quota.Request) { r.Policy.Per = 2 * time.Second }),
			"one more request":   append(other(func(*quota.Request) {}), quota.Request{Key: "bob", N: 1, Policy: gcra, ConsumptionKey: "order-9"}),
		} {
			d, err := l.ConsumeAll(ctx, db, reqs)
			var reused *quota.ConsumptionKeyReusedError
			if !errors.As(err, &reused) || reused.ConsumptionKey != "order-9" || !errors.Is(err, quota.ErrConsumptionKeyReused) ||
				!errors.Is(err, racefree.ErrMismatch) || d.Allowed || d.Replayed {
				t.Errorf("%s under a charged consumption key: %+v, %v; want a *ConsumptionKeyReusedError (ErrMismatch)", name, d, err)
			}
		}
		if tat, _ := row(t, db, "bob", quota.GCRA); tat != -1 {
			t.Fatalf("bob's counter written by a refused call (tat %d), want none", tat)
		}
		if d := consume(t, l, db, "alice", 1, gcra); d.Remaining != 2 {
			t.Fatalf("alice after the refusals: %+v; want 2 remaining (charged once, 2 units)", d)
		}
		if d, err := l.ConsumeAll(ctx, db, first); err != nil || !d.Replayed || d.Remaining != 3 {
			t.Fatalf("the first request again: %+v, %v; want replayed with its figures", d, err)
		}
		// Under the caller's transaction: the savepoint is rolled back, the
		// caller's transaction carries on.
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := l.ConsumeAll(ctx, tx, append(other(func(r *quota.Request) { r.Key = "bob" }), quota.Request{Key: "carol", N: 1, Policy: gcra}))
			if !errors.Is(err, quota.ErrConsumptionKeyReused) {
				return fmt.Errorf("in the caller's transaction: %v, want ErrConsumptionKeyReused", err)
			}
			_, err = l.ConsumeAll(ctx, tx, []quota.Request{{Key: "dave", N: 1, Policy: gcra}})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if tat, _ := row(t, db, "carol", quota.GCRA); tat != -1 {
			t.Fatal("carol charged by a refused call in the caller's transaction")
		}
		if tat, _ := row(t, db, "dave", quota.GCRA); tat == -1 {
			t.Fatal("the caller's transaction did not carry on after the refusal")
		}

		var (
			wg               sync.WaitGroup
			mu               sync.Mutex
			charged, refused int
		)
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: fmt.Sprintf("user-%d", i), N: 1, Policy: gcra, ConsumptionKey: "order-10"}})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && d.Allowed && !d.Replayed:
					charged++
				case errors.Is(err, quota.ErrConsumptionKeyReused):
					refused++
				default:
					t.Errorf("concurrent call: %+v, %v", d, err)
				}
			}()
		}
		wg.Wait()
		if charged != 1 || refused != 19 {
			t.Fatalf("20 concurrent users under one consumption key: %d charged, %d refused; want 1 and 19", charged, refused)
		}
	})
}

// TestConsumptionKeysAcrossTheFingerprintMigration: before migration 017
// (compatible mode) one call's requests under one key are each charged
// once and a key reused for another request is replayed, as the previous
// release did; after it, the rows written before (no fingerprint) are
// still replayed, new keys are bound, and the previous release's
// statements (ledger_*_unbound) keep working on the new column: a key
// they wrote is replayed here, and one this release wrote is a replay
// there.
func TestConsumptionKeysAcrossTheFingerprintMigration(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		clock := racefree.NewManualClock(t0)
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated, Clock: clock})
		if _, err := db.MigrateUpTo(ctx, quota.LedgerFingerprintMigration-1); err != nil {
			t.Fatal(err)
		}
		l := setup(t, db)
		allowed := 0
		for i := range 3 {
			d, err := l.ConsumeAll(ctx, db, hourAndDay("u", fmt.Sprintf("req-%d", i)))
			if err != nil {
				t.Fatalf("before migration 017, request %d: %v", i, err)
			}
			if d.Allowed {
				allowed++
			}
		}
		if allowed != 1 {
			t.Fatalf("before migration 017: %d of 3 requests admitted under a per-hour limit of 1, want 1", allowed)
		}
		first := []quota.Request{{Key: "alice", N: 1, Policy: gcra, ConsumptionKey: "order-1"}}
		if d, err := l.ConsumeAll(ctx, db, first); err != nil || d.Replayed {
			t.Fatalf("before migration 017, a first charge: %+v, %v", d, err)
		}
		bob := []quota.Request{{Key: "bob", N: 1, Policy: gcra, ConsumptionKey: "order-1"}}
		if d, err := l.ConsumeAll(ctx, db, bob); err != nil || !d.Replayed {
			t.Fatalf("before migration 017, the key reused: %+v, %v; want replayed (compatible mode)", d, err)
		}

		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		if d, err := l.ConsumeAll(ctx, db, bob); err != nil || !d.Replayed || d.Remaining != 4 {
			t.Fatalf("a key written before migration 017, reused: %+v, %v; want replayed with its figures", d, err)
		}
		second := []quota.Request{{Key: "alice", N: 1, Policy: gcra, ConsumptionKey: "order-2"}}
		if d, err := l.ConsumeAll(ctx, db, second); err != nil || d.Replayed {
			t.Fatalf("after migration 017, a first charge: %+v, %v", d, err)
		}
		if _, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "bob", N: 1, Policy: gcra, ConsumptionKey: "order-2"}}); !errors.Is(err, quota.ErrConsumptionKeyReused) {
			t.Fatalf("after migration 017, the key reused: %v; want ErrConsumptionKeyReused", err)
		}

		prev, err := query.Load(os.DirFS("."), "sql", db.Engine())
		if err != nil {
			t.Fatal(err)
		}
		clk := wire.Of(db).ClockArg()
		var one int
		if err := db.QueryRowContext(ctx, prev.Get("ledger_insert_unbound"), "default", "", "order-2", 3_600_000, clk).Scan(&one); !errors.Is(err, sql.ErrNoRows) {
			t.Fatalf("previous ledger_insert of a key this release charged: %v; want no row (a replay)", err)
		}
		var remaining, resetAt int64
		if err := db.QueryRowContext(ctx, prev.Get("ledger_get_unbound"), "default", "", "order-2").Scan(&remaining, &resetAt); err != nil || remaining != 3 {
			t.Fatalf("previous ledger_get: %d, %v; want 3 remaining", remaining, err)
		}
		if err := db.QueryRowContext(ctx, prev.Get("ledger_insert_unbound"), "default", "", "order-3", 3_600_000, clk).Scan(&one); err != nil {
			t.Fatalf("previous ledger_insert on the new column: %v", err)
		}
		if _, err := db.ExecContext(ctx, prev.Get("ledger_set"), "default", "", "order-3", 7, racefree.Millis(t0)+900); err != nil {
			t.Fatalf("previous ledger_set: %v", err)
		}
		if d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "carol", N: 1, Policy: window, ConsumptionKey: "order-3"}}); err != nil ||
			!d.Replayed || d.Remaining != 7 || !d.ResetAt.Equal(t0.Add(900*time.Millisecond)) {
			t.Fatalf("this release replaying the previous one's key: %+v, %v", d, err)
		}
	})
}
