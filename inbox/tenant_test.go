package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// onOwnerAndApp runs body on each engine against a fresh database opened
// as its owner (on PostgreSQL a superuser, whom row-level security does
// not bind: the filter in racefree's SQL is all that keeps tenants apart)
// and, on PostgreSQL, against another fresh database opened as the
// application role, which row-level security binds.
func onOwnerAndApp(t *testing.T, body func(t *testing.T, db *racefree.DB, clock *racefree.ManualClock)) {
	t.Helper()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		t.Run("owner", func(t *testing.T) {
			clock := racefree.NewManualClock(t0)
			body(t, testdb.Open(t, dsn, &racefree.Config{Clock: clock}), clock)
		})
		if !strings.HasPrefix(dsn, "postgres") {
			return
		}
		t.Run("app", func(t *testing.T) {
			dsn := testdb.NewDSN(t, racefree.Postgres)
			clock := racefree.NewManualClock(t0)
			owner := testdb.Open(t, dsn, &racefree.Config{Clock: clock})
			body(t, testdb.App(t, owner, dsn), clock)
		})
	})
}

func tenants(t *testing.T) (a, b context.Context) {
	t.Helper()
	a, err := tenant.With(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	b, err = tenant.With(context.Background(), "globex")
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

func ids(events []inbox.Event) (out []string) {
	for _, e := range events {
		out = append(out, e.ID+"="+string(e.Payload))
	}
	return out
}

func list(t *testing.T, ctx context.Context, in *inbox.Inbox, source string) []string {
	t.Helper()
	events, err := in.List(ctx, source, 0, inbox.MaxListLimit)
	if err != nil {
		t.Fatal(err)
	}
	return ids(events)
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestTenantsAreIndependent proves that two tenants receiving the same
// event IDs from the same source are two inboxes: neither sees the
// other's events, a delivery to one is never a duplicate of the other's,
// arrival numbers count per tenant, and a reap of one tenant's expired
// events leaves the other's, expired or live.
func TestTenantsAreIndependent(t *testing.T) {
	t.Parallel()
	onOwnerAndApp(t, func(t *testing.T, db *racefree.DB, clock *racefree.ManualClock) {
		acme, globex := tenants(t)
		in, err := inbox.New(db, &inbox.Options{Retention: time.Hour, ReapBatch: 1})
		if err != nil {
			t.Fatal(err)
		}
		receive := func(ctx context.Context, id, payload string, fn func(*sql.Tx) error) inbox.Result {
			t.Helper()
			res, err := in.Receive(ctx, "stripe", id, []byte(payload), fn)
			if err != nil {
				t.Fatalf("%s receives %s: %v", tenant.From(ctx), id, err)
			}
			return res
		}
		// The same IDs from the same source: new in each tenant, numbered
		// from 1 in each.
		if res := receive(acme, "evt_1", "a1", nil); res.Duplicate || res.Seq != 1 {
			t.Fatalf("acme evt_1: %+v, want new with seq 1", res)
		}
		if res := receive(globex, "evt_1", "g1", nil); res.Duplicate || res.Seq != 1 {
			t.Fatalf("globex evt_1 after acme's: %+v, want new with seq 1", res)
		}
		if res := receive(acme, "evt_2", "a2", nil); res.Duplicate || res.Seq != 2 {
			t.Fatalf("acme evt_2: %+v, want new with seq 2", res)
		}
		// A permanent failure of one tenant is that tenant's only.
		res := receive(globex, "evt_3", "g3", func(*sql.Tx) error { return inbox.Permanent(errors.New("unknown type")) })
		if !res.Failed || res.Seq != 2 {
			t.Fatalf("globex evt_3: %+v, want failed with seq 2", res)
		}
		called := false
		if res := receive(acme, "evt_3", "a3", func(*sql.Tx) error { called = true; return nil }); res.Duplicate || res.Failed || !called || res.Seq != 3 {
			t.Fatalf("acme evt_3 after globex's failure: %+v, fn called %v; want processed with seq 3", res, called)
		}
		// Redeliveries are duplicates in their own tenant only.
		if res := receive(globex, "evt_1", "g1", nil); !res.Duplicate {
			t.Fatalf("globex redelivers evt_1: %+v, want a duplicate", res)
		}
		if res := receive(globex, "evt_2", "g2", nil); res.Duplicate || res.Seq != 3 {
			t.Fatalf("globex evt_2 after acme's: %+v, want new with seq 3", res)
		}
		if got, want := list(t, acme, in, "stripe"), []string{"evt_1=a1", "evt_2=a2", "evt_3=a3"}; !equal(got, want) {
			t.Fatalf("acme lists %v, want %v", got, want)
		}
		if got, want := list(t, globex, in, "stripe"), []string{"evt_1=g1", "evt_3=g3", "evt_2=g2"}; !equal(got, want) {
			t.Fatalf("globex lists %v, want %v", got, want)
		}
		// Paging from a cursor stays in the tenant too.
		if page, err := in.List(globex, "stripe", 2, 10); err != nil || !equal(ids(page), []string{"evt_2=g2"}) {
			t.Fatalf("globex after 2: %v, %v", ids(page), err)
		}

		// Half an hour later globex receives one more; an hour after the
		// start every other event has expired.
		clock.Advance(30 * time.Minute)
		receive(globex, "evt_4", "g4", nil)
		clock.Advance(30 * time.Minute)

		// A reap in acme's transaction deletes acme's expired events only:
		// globex's expired ones stay until globex's turn.
		err = tenant.InTx(context.Background(), db, "acme", func(ctx context.Context, tx *sql.Tx) error {
			n, err := in.Reap(ctx, tx)
			if err == nil && n != 3 {
				t.Errorf("reap in acme's transaction deleted %d, want acme's 3", n)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := list(t, acme, in, "stripe"); len(got) != 0 {
			t.Fatalf("acme lists %v after its reap, want nothing", got)
		}
		if got, want := list(t, globex, in, "stripe"), []string{"evt_1=g1", "evt_3=g3", "evt_2=g2", "evt_4=g4"}; !equal(got, want) {
			t.Fatalf("globex lists %v after acme's reap, want %v", got, want)
		}
		if res := receive(globex, "evt_1", "g1", nil); !res.Duplicate {
			t.Fatalf("globex redelivers evt_1 after acme's reap: %+v, want a duplicate", res)
		}
		// The reap on the pool visits every tenant: globex's expired
		// events go, its live one stays.
		if n, err := in.Reap(context.Background(), db); err != nil || n != 3 {
			t.Fatalf("reap on the pool: %d, %v; want globex's 3", n, err)
		}
		if got, want := list(t, globex, in, "stripe"), []string{"evt_4=g4"}; !equal(got, want) {
			t.Fatalf("globex lists %v after the reap, want %v", got, want)
		}
		// The numbering of each tenant goes on where it was.
		if res := receive(acme, "evt_5", "a5", nil); res.Seq != 4 {
			t.Fatalf("acme evt_5: %+v, want seq 4", res)
		}
		if res := receive(globex, "evt_5", "g5", nil); res.Seq != 5 {
			t.Fatalf("globex evt_5: %+v, want seq 5", res)
		}
	})
}

// TestBeforeTenantsEveryCallIsSchemaOutdated proves that below migration
// 011 every call fails with ErrSchemaOutdated and writes nothing, and
// that at 011 the default tenant works (other tenants need 012).
func TestBeforeTenantsEveryCallIsSchemaOutdated(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db := testdb.Open(t, dsn, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion-1); err != nil {
			t.Fatal(err)
		}
		in, err := inbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		called := false
		if _, err := in.Receive(ctx, "s", "e1", nil, func(*sql.Tx) error { called = true; return nil }); !errors.Is(err, racefree.ErrSchemaOutdated) || called {
			t.Fatalf("Receive at 010: %v, fn called %v; want ErrSchemaOutdated", err, called)
		}
		if _, err := in.List(ctx, "s", 0, 10); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("List at 010: %v, want ErrSchemaOutdated", err)
		}
		if _, err := in.Reap(ctx, db); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("Reap at 010: %v, want ErrSchemaOutdated", err)
		}
		err = db.InTx(ctx, func(tx *sql.Tx) error { _, err := in.Reap(ctx, tx); return err })
		if !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("Reap in a transaction at 010: %v, want ErrSchemaOutdated", err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_inbox`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d rows at 010 (%v), want none", n, err)
		}
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		if res, err := in.Receive(ctx, "s", "e1", nil, nil); err != nil || res.Seq != 1 {
			t.Fatalf("Receive for the default tenant at 011: %+v, %v", res, err)
		}
		acme, _ := tenants(t)
		if _, err := in.Receive(acme, "s", "e1", nil, nil); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("Receive for another tenant at 011: %v, want ErrSchemaOutdated", err)
		}
	})
}

// previous returns the statement name of the release before tenancy, as
// it shipped (testdata/previous).
func previous(t *testing.T, engine, name string) string {
	return testdb.Previous(t, "testdata", engine, name)
}

// TestPreviousReleaseRunsOnTheExpandedSchema proves the rollout: while
// instances of the previous release still run against migration 011,
// their statements (receive, number, record a failure, list, reap) work
// unchanged and their events are the default tenant's, seen and
// deduplicated by this release, whose events they in turn see; migration
// 012 keeps them all.
func TestPreviousReleaseRunsOnTheExpandedSchema(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		clock := racefree.NewManualClock(t0)
		db := testdb.Open(t, dsn, &racefree.Config{Schema: racefree.SchemaAllowOutdated, Clock: clock})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		engine := db.Engine()
		old := func(name string) string { return previous(t, engine, name) }
		retention := time.Hour.Milliseconds()
		now := clock.Now().UnixMilli()

		// The previous release receives evt_1 and numbers it, and records
		// a permanent failure of evt_2, as it did.
		oldReceive := func(q, id string, extra ...any) (rowID int64, ok bool) {
			t.Helper()
			err := db.InTx(ctx, func(tx *sql.Tx) error {
				args := append([]any{"stripe", id, []byte("old " + id), now, retention}, extra...)
				err := tx.QueryRowContext(ctx, q, args...).Scan(&rowID)
				if errors.Is(err, sql.ErrNoRows) {
					return nil
				}
				if err != nil {
					return err
				}
				ok = true
				var seq int64
				if err := tx.QueryRowContext(ctx, old("next_seq"), "stripe").Scan(&seq); err != nil {
					return err
				}
				_, err = tx.ExecContext(ctx, old("set_seq"), rowID, seq)
				return err
			})
			if err != nil {
				t.Fatalf("previous release, %s: %v", id, err)
			}
			return rowID, ok
		}
		if _, ok := oldReceive(old("receive"), "evt_1"); !ok {
			t.Fatal("previous release: evt_1 is a duplicate on an empty inbox")
		}
		if _, ok := oldReceive(old("record_failure"), "evt_2", "bad payload"); !ok {
			t.Fatal("previous release: the failure of evt_2 is a duplicate on an empty inbox")
		}

		// This release sees them as the default tenant's.
		in, err := inbox.New(db, &inbox.Options{Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		events, err := in.List(ctx, "stripe", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != 2 || events[0].ID != "evt_1" || events[0].Seq != 1 || string(events[0].Payload) != "old evt_1" ||
			events[1].ID != "evt_2" || events[1].Seq != 2 || events[1].Status != inbox.StatusFailed || events[1].Reason != "bad payload" {
			t.Fatalf("this release lists %+v, want the previous release's evt_1 and failed evt_2", events)
		}
		var tenantOf string
		if err := db.QueryRowContext(ctx, `SELECT DISTINCT tenant FROM racefree_inbox`).Scan(&tenantOf); err != nil || tenantOf != tenant.Default {
			t.Fatalf("the previous release's rows belong to %q (%v), want %q", tenantOf, err, tenant.Default)
		}
		if res, err := in.Receive(ctx, "stripe", "evt_1", nil, nil); err != nil || !res.Duplicate {
			t.Fatalf("this release redelivers evt_1: %+v, %v; want a duplicate", res, err)
		}
		// This release numbers on from the previous release's counter, and
		// the previous release deduplicates and lists what it receives.
		if res, err := in.Receive(ctx, "stripe", "evt_3", []byte("new evt_3"), nil); err != nil || res.Duplicate || res.Seq != 3 {
			t.Fatalf("this release receives evt_3: %+v, %v; want new with seq 3", res, err)
		}
		if _, ok := oldReceive(old("receive"), "evt_3"); ok {
			t.Fatal("previous release: evt_3, received by this release, is not a duplicate")
		}
		if _, ok := oldReceive(old("receive"), "evt_4"); !ok {
			t.Fatal("previous release: evt_4 is a duplicate")
		}
		rows, err := db.QueryContext(ctx, old("list"), "stripe", 0, 10, inbox.MaxListBytes)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var (
				seq, at    int64
				id, status string
				reason     sql.NullString
				payload    []byte
			)
			if err := rows.Scan(&seq, &id, &status, &reason, &payload, &at); err != nil {
				t.Fatal(err)
			}
			got = append(got, id)
		}
		rows.Close()
		if want := []string{"evt_1", "evt_2", "evt_3", "evt_4"}; !equal(got, want) {
			t.Fatalf("the previous release lists %v, want %v", got, want)
		}
		// The previous release's reap deletes expired events, whoever
		// received them.
		clock.Advance(time.Hour)
		res, err := db.ExecContext(ctx, old("reap"), clock.Now().UnixMilli(), 2)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 2 {
			t.Fatalf("the previous release's reap deleted %d, want a batch of 2", n)
		}
		// After migration 012 this release keeps every remaining event and
		// its numbering.
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		if events, err := in.List(ctx, "stripe", 0, 10); err != nil || len(events) != 2 {
			t.Fatalf("after 012 this release lists %d events (%v), want the 2 left", len(events), err)
		}
		if res, err := in.Receive(ctx, "stripe", "evt_5", nil, nil); err != nil || res.Seq != 5 {
			t.Fatalf("after 012 evt_5: %+v, %v; want seq 5", res, err)
		}
	})
}
