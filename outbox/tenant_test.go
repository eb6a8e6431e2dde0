package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/tenant"
)

// TestTenantsAreIsolated: two tenants enqueueing the same topics and keys
// are independent in every operation: claims, ordering, dead letters,
// redrive, discard, stats, reap and relays. It runs on the owner's
// connection (on PostgreSQL a superuser, whom row-level security does not
// bind: the SQL's own tenant filter must hold) and, on PostgreSQL, as the
// application role, which row-level security binds.
func TestTenantsAreIsolated(t *testing.T) {
	clock, cfg := manual()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		owner := testdb.Open(t, dsn, cfg)
		t.Run("owner", func(t *testing.T) { clock.Set(t0); isolation(t, clock, owner) })
		if owner.Engine() == racefree.Postgres {
			app := testdb.App(t, owner, dsn)
			t.Run("app-role", func(t *testing.T) { clock.Set(t0.Add(24 * time.Hour)); isolation(t, clock, app) })
		}
	})
}

func isolation(t *testing.T, clock *racefree.ManualClock, db *racefree.DB) {
	ctx := context.Background()
	a, _ := tenant.With(ctx, fmt.Sprint("a-", clock.Now().Unix()))
	b, _ := tenant.With(ctx, fmt.Sprint("b-", clock.Now().Unix()))
	o := newOutbox(t, db, &outbox.Options{Retention: time.Hour, Backoff: fixedBackoff})
	stats := func(ctx context.Context) outbox.Stats {
		t.Helper()
		s, err := o.Stats(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		return *s
	}
	msg := outbox.Message{Topic: "orders", Key: "k", Ordered: true, Payload: []byte("p")}
	a1 := enqueue(t, a, o, db, msg)
	b1 := enqueue(t, b, o, db, msg)
	a2 := enqueue(t, a, o, db, msg)
	b2 := enqueue(t, b, o, db, msg)

	// a's claim sees a's messages only, and a's head of key k does not
	// block b's.
	da := claim(t, a, o, "w", 10, time.Hour)
	if fmt.Sprint(ids(da)) != fmt.Sprint([]int64{a1}) || da[0].Tenant != tenant.From(a) {
		t.Fatalf("a claimed %v", ids(da))
	}
	if s := stats(b); s.Ready != 2 || s.Leased != 0 {
		t.Fatalf("a's claim changed b: %+v", s)
	}
	if _, err := o.Fail(a, da[0], outbox.Permanent(errors.New("no"))); err != nil {
		t.Fatal(err)
	}
	db1 := claim(t, b, o, "w", 10, time.Hour)
	if fmt.Sprint(ids(db1)) != fmt.Sprint([]int64{b1}) {
		t.Fatalf("b claimed %v while a's key k is blocked by a's dead message", ids(db1))
	}
	if err := o.Complete(b, db, db1[0]); err != nil {
		t.Fatal(err)
	}
	if s := stats(a); s.Dead != 1 || s.Ready != 1 || s.Delivered != 0 {
		t.Fatalf("b's completion changed a: %+v", s)
	}
	// A tenure presented under the wrong tenant finds nothing.
	forged := *db1[0]
	forged.Tenant = tenant.From(a)
	if err := o.Complete(a, db, &forged); !errors.Is(err, racefree.ErrNotHeld) {
		t.Fatalf("completing b's tenure as a: %v, want ErrNotHeld", err)
	}
	if _, err := o.Heartbeat(a, db1, time.Minute); !errors.Is(err, racefree.ErrInvalidInput) {
		t.Fatalf("a heartbeat of b's tenure under a: %v", err)
	}
	if _, err := o.Get(b, db, a1); !errors.Is(err, racefree.ErrNotFound) {
		t.Fatalf("b reads a's message: %v", err)
	}

	// Dead letters are per tenant.
	dbs := claim(t, b, o, "w", 10, time.Hour)
	if _, err := o.Fail(b, dbs[0], outbox.Permanent(errors.New("no"))); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ctx  context.Context
		want int64
	}{{a, a1}, {b, b2}} {
		rs, err := o.Dead(c.ctx, db, outbox.Filter{}, 0, 10)
		if err != nil || len(rs) != 1 || rs[0].ID != c.want {
			t.Fatalf("dead of %s: %v, %v", tenant.From(c.ctx), rs, err)
		}
	}
	if got, err := o.Redrive(a, db, outbox.Filter{All: true}); err != nil || fmt.Sprint(got) != fmt.Sprint([]int64{a1}) {
		t.Fatalf("a's redrive: %v, %v", got, err)
	}
	if got, err := o.Redrive(a, db, outbox.Filter{IDs: []int64{b2}}); err != nil || len(got) != 0 {
		t.Fatalf("a redrives b's message: %v, %v", got, err)
	}
	if got, err := o.Discard(a, db, outbox.Filter{IDs: []int64{b2}, Topic: "orders"}); err != nil || len(got) != 0 {
		t.Fatalf("a discards b's message: %v, %v", got, err)
	}
	if s := stats(b); s.Dead != 1 || s.Delivered != 1 {
		t.Fatalf("a's redrive and discard changed b: %+v", s)
	}
	if got, err := o.Discard(b, db, outbox.Filter{All: true}); err != nil || fmt.Sprint(got) != fmt.Sprint([]int64{b2}) {
		t.Fatalf("b's discard: %v, %v", got, err)
	}
	if s := stats(a); s.Ready != 2 {
		t.Fatalf("b's discard changed a: %+v", s)
	}

	// A relay serving every tenant delivers each tenant's messages under
	// its own tenant.
	var mu sync.Mutex
	got := map[int64]string{}
	r, err := o.NewRelay(func(ctx context.Context, d *outbox.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		got[d.ID] = d.Tenant
		return nil
	}, &outbox.RelayOptions{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRelay(t, r)
	waitFor(t, "a's messages", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2
	})
	stop()
	if got[a1] != tenant.From(a) || got[a2] != tenant.From(a) {
		t.Fatalf("relay delivered %v", got)
	}

	// Reaping a reaps a's delivered messages, never b's.
	clock.Advance(time.Hour)
	if n, err := o.ReapTenant(a); err != nil || n != 2 {
		t.Fatalf("a's reap: %d, %v", n, err)
	}
	if s := stats(b); s.Delivered != 1 {
		t.Fatalf("a's reap changed b: %+v", s)
	}
}

// TestTheOutboxNeedsItsMigration: before migration 013 every operation is
// ErrSchemaOutdated and writes nothing; once it lands the same Outbox
// works.
func TestTheOutboxNeedsItsMigration(t *testing.T) {
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db := testdb.Open(t, dsn, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(ctx, outbox.SchemaVersion-1); err != nil {
			t.Fatal(err)
		}
		o := newOutbox(t, db, nil)
		if _, err := o.Enqueue(ctx, db, outbox.Message{Topic: "t"}); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("enqueue at 12: %v", err)
		}
		if _, err := o.Claim(ctx, "w", 1, time.Second); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("claim at 12: %v", err)
		}
		if _, err := o.Stats(ctx, db); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("stats at 12: %v", err)
		}
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		id := enqueue(t, ctx, o, db, outbox.Message{Topic: "t"})
		if ds := claim(t, ctx, o, "w", 1, time.Second); len(ds) != 1 || ds[0].ID != id {
			t.Fatalf("after the migration: %v", ids(ds))
		}
	})
}

// TestEdgesCompleteAndFailActForTheDeliverysTenant: Complete and Fail act
// for the tenant the delivery belongs to, whatever tenant ctx names (none,
// or another): acme's deliveries complete and fail in acme and globex's
// message is left as it was, as the owner and, on PostgreSQL, as the
// application role, whose transactions row-level security binds to the
// tenant they set.
func TestEdgesCompleteAndFailActForTheDeliverysTenant(t *testing.T) {
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		owner := testdb.Open(t, dsn, nil)
		t.Run("owner", func(t *testing.T) { deliverysTenant(t, owner, "o") })
		if owner.Engine() == racefree.Postgres {
			app := testdb.App(t, owner, dsn)
			t.Run("app-role", func(t *testing.T) { deliverysTenant(t, app, "a") })
		}
	})
}

func deliverysTenant(t *testing.T, db *racefree.DB, run string) {
	o := newOutbox(t, db, &outbox.Options{Backoff: fixedBackoff})
	acme, _ := tenant.With(context.Background(), "acme-"+run)
	globex, _ := tenant.With(context.Background(), "globex-"+run)
	a1 := enqueue(t, acme, o, db, outbox.Message{Topic: "t"})
	a2 := enqueue(t, acme, o, db, outbox.Message{Topic: "t"})
	g := enqueue(t, globex, o, db, outbox.Message{Topic: "t"})
	ds := claim(t, acme, o, "w", 2, time.Minute)
	gd := claim(t, globex, o, "w", 1, time.Minute)
	if len(ds) != 2 || len(gd) != 1 {
		t.Fatalf("claimed %v and %v", ids(ds), ids(gd))
	}
	if err := o.Complete(context.Background(), db, ds[0]); err != nil {
		t.Fatalf("Complete on a context that names no tenant: %v", err)
	}
	if out, err := o.Fail(globex, ds[1], errors.New("no")); err != nil || out.Dead {
		t.Fatalf("Fail on globex's context: %+v, %v", out, err)
	}
	if r := get(t, acme, o, a1); r.State != outbox.Delivered {
		t.Errorf("acme's completed message: %s", r.State)
	}
	if r := get(t, acme, o, a2); r.State != outbox.Ready || r.LastError != "no" {
		t.Errorf("acme's failed message: %s %q", r.State, r.LastError)
	}
	if r := get(t, globex, o, g); r.State != outbox.Leased || r.LastError != "" || len(r.History) != 0 {
		t.Errorf("globex's message: %+v; want it as its claim left it", r)
	}
}
