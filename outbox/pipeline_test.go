package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
)

// TestARelaysClaimIsOneRoundTripWithItsCompletions: as the application
// role on the pool of PostgreSQL, a relay's claim, with the completions
// it carries, is one round trip once its statements are prepared: the
// tenant travels in the batch (row-level security lets the claim see the
// tenant's messages only), the completion of the current tenure lands,
// a stale tenure (its lease lapsed and was taken over) completes nothing,
// the takeover records the lapse, and the connection carries no tenant
// afterwards.
func TestARelaysClaimIsOneRoundTripWithItsCompletions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock, cfg := manual()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, dsn, cfg)
	app, writes := testdb.Counted(t, testdb.AppDSN(t, owner, dsn), 1, cfg)
	o := newOutbox(t, app, nil)
	acme, _ := tenant.With(ctx, "acme")
	globex, _ := tenant.With(ctx, "globex")
	other := enqueue(t, globex, o, app, outbox.Message{Topic: "t"})
	var msgs []int64
	for range 3 {
		msgs = append(msgs, enqueue(t, acme, o, app, outbox.Message{Topic: "t"}))
	}
	const lease = time.Minute
	// claimOne claims at most one message (nil: none was due).
	claimOne := func(worker string, done ...*outbox.Delivery) (*outbox.Delivery, []int64, int64) {
		t.Helper()
		before := writes.Load()
		ds, completed, err := outbox.ClaimCompleting(acme, o, worker, 1, lease, done)
		trips := writes.Load() - before
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) > 1 || len(ds) == 1 && ds[0].Tenant != "acme" {
			t.Fatalf("claimed %+v, want at most one message of acme", ds)
		}
		if s := setting(t, app); s != "" {
			t.Fatalf("after the claim the pooled connection carries tenant %q, want none", s)
		}
		if len(ds) == 0 {
			return nil, completed, trips
		}
		return ds[0], completed, trips
	}
	// The first claim prepares the claim, the second the completion.
	d1, _, _ := claimOne("w")
	d2, completed, _ := claimOne("w", d1)
	if fmt.Sprint(completed) != fmt.Sprint([]int64{d1.ID}) {
		t.Fatalf("completed %v, want [%d]", completed, d1.ID)
	}
	d3, completed, trips := claimOne("w", d2)
	if trips != 1 || fmt.Sprint(completed) != fmt.Sprint([]int64{d2.ID}) {
		t.Fatalf("a warm claim with a completion: %d round trips, completed %v; want 1, [%d]", trips, completed, d2.ID)
	}
	if fmt.Sprint(d1.ID, d2.ID, d3.ID) != fmt.Sprint(msgs[0], msgs[1], msgs[2]) {
		t.Fatalf("claimed %d, %d, %d; want the oldest first: %v", d1.ID, d2.ID, d3.ID, msgs)
	}
	// d3's lease lapses and another worker takes it over, in a claim of
	// its own that records the lapse; then w's claim carries d3's stale
	// completion.
	clock.Advance(lease)
	taken, _, trips := claimOne("w2")
	if trips != 1 || taken.ID != d3.ID || taken.Fence != d3.Fence+1 {
		t.Fatalf("the takeover: %d round trips, %+v; want 1, message %d at fence %d", trips, taken, d3.ID, d3.Fence+1)
	}
	d4, completed, trips := claimOne("w", d3)
	if trips != 1 || len(completed) != 0 || d4 != nil {
		t.Fatalf("a claim carrying a stale tenure: %d round trips, completed %v, claimed %+v; want 1, none, none", trips, completed, d4)
	}
	r := get(t, acme, o, d3.ID)
	if r.State != outbox.Leased || r.Fence != taken.Fence || len(r.History) != 1 ||
		r.History[0].Outcome != "lapsed" || r.History[0].Fence != d3.Fence || r.History[0].Worker != "w" {
		t.Fatalf("after the stale completion: %+v, want leased at fence %d to w2, the lapse of w's fence %d recorded", r, taken.Fence, d3.Fence)
	}
	for _, id := range []int64{d1.ID, d2.ID} {
		if s := get(t, acme, o, id).State; s != outbox.Delivered {
			t.Fatalf("message %d is %s, want delivered", id, s)
		}
	}
	if s := get(t, globex, o, other).State; s != outbox.Ready {
		t.Fatalf("globex's message is %s after acme's claims, want ready", s)
	}
}

// TestLapsesAreRecordedAndBounded: every lease that lapsed and was taken
// over by a claim is in the message's history, with the worker and fence
// of the lapsed tenure, and only the latest Options.History entries stay.
func TestLapsesAreRecordedAndBounded(t *testing.T) {
	clock, cfg := manual()
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		o := newOutbox(t, db, &outbox.Options{History: 2})
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		for i := 1; i <= 4; i++ {
			d := claim(t, ctx, o, fmt.Sprint("w", i), 1, time.Second)
			if len(d) != 1 || d[0].Fence != int64(i) {
				t.Fatalf("claim %d: %+v", i, d)
			}
			clock.Advance(time.Second)
		}
		claim(t, ctx, o, "w5", 1, time.Second)
		r := get(t, ctx, o, id)
		if len(r.History) != 2 {
			t.Fatalf("%d entries kept, want 2: %+v", len(r.History), r.History)
		}
		for i, a := range r.History {
			if want := int64(i + 3); a.Fence != want || a.Attempt != int(want) || a.Worker != fmt.Sprint("w", want) || a.Outcome != "lapsed" {
				t.Errorf("entry %d: %+v, want the lapse of w%d's fence %d", i, a, want, want)
			}
		}
	})
}

// setting is the tenant a connection of db's pool carries outside any
// transaction.
func setting(t *testing.T, db *racefree.DB) string {
	t.Helper()
	var s sql.NullString
	if err := db.QueryRowContext(context.Background(), `SELECT current_setting('racefree.tenant_id', true)`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s.String
}
