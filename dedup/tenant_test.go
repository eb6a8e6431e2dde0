package dedup_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

func with(t *testing.T, id string) context.Context {
	t.Helper()
	ctx, err := tenant.With(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

// TestTenantsAreIsolated: two tenants observing the same event (same
// source, message and fingerprint) are counted, elected and recorded
// apart; nothing of one is visible to the other, no call of one changes
// the other's event or claim, and forgetting one tenant's lapsed
// fingerprint leaves the other's live one.
func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	testdb.EachRole(t, t0, func(t *testing.T, db, _ *racefree.DB, clock *racefree.ManualClock) {
		acme, globex := with(t, "acme"), with(t, "globex")
		log := dedup.New(db)
		claims := claim.NewNamespace(db, dedup.Namespace)
		ev := dedup.Event{Source: "billing", Level: "error", Message: "charge 7 failed", Fingerprint: "fp"}
		type state struct {
			rec   dedup.Record
			claim claim.Claim
		}
		read := func(ctx context.Context, fp string) (state, error) {
			r, err := log.Get(ctx, db, fp)
			if err != nil {
				return state{}, err
			}
			c, err := claims.Get(ctx, db, fp)
			if err != nil {
				return state{}, err
			}
			return state{*r, *c}, nil
		}
		unchanged := func(op string, before state) {
			t.Helper()
			if after, err := read(globex, "fp"); err != nil || after != before {
				t.Errorf("acme's %s changed globex's fingerprint: %+v, %v; want %+v", op, after, err, before)
			}
		}

		for _, ctx := range []context.Context{acme, globex} {
			o, err := log.Observe(ctx, db, ev, time.Minute)
			if err != nil || !o.Process || o.Fence != 1 || o.Count != 1 {
				t.Fatalf("%s observes: %+v, %v; want its own first window", tenant.From(ctx), o, err)
			}
		}
		if o, err := log.Observe(globex, db, ev, time.Minute); err != nil || o.Process || o.Count != 2 {
			t.Fatalf("globex observes again: %+v, %v; want count 2, not elected", o, err)
		}
		before, err := read(globex, "fp")
		if err != nil {
			t.Fatal(err)
		}
		if o, err := log.Observe(acme, db, ev, time.Minute); err != nil || o.Process || o.Count != 2 {
			t.Fatalf("acme observes again: %+v, %v; want its own count 2", o, err)
		}
		unchanged("observe", before)
		if err := log.Record(acme, db, "fp", 1, dedup.Result{Classification: "acme's", ExternalID: "A-1"}); err != nil {
			t.Fatal(err)
		}
		unchanged("record", before)
		if r, err := log.Get(acme, db, "fp"); err != nil || r.Classification != "acme's" || r.ResultFence != 1 {
			t.Fatalf("acme's event: %+v, %v", r, err)
		}
		if _, err := log.Get(acme, db, "fp"); err != nil {
			t.Fatal(err)
		}
		unchanged("get", before)

		// A fingerprint only acme saw is nowhere for globex.
		if _, err := log.Observe(acme, db, dedup.Event{Source: "s", Level: "l", Message: "m", Fingerprint: "only-acme"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := log.Get(globex, db, "only-acme"); !errors.Is(err, racefree.ErrNotFound) {
			t.Errorf("globex reads acme's event: %v, want ErrNotFound", err)
		}
		if err := log.Record(globex, db, "only-acme", 1, dedup.Result{Classification: "globex's"}); !errors.Is(err, racefree.ErrNotFound) {
			t.Errorf("globex records on acme's event: %v, want ErrNotFound", err)
		}
		if r, err := log.Get(acme, db, "only-acme"); err != nil || r.Classification != "" {
			t.Errorf("acme's event after globex's record: %+v, %v; want no result", r, err)
		}

		// acme's window lapses long before globex's: a reap forgets acme's
		// fingerprints and leaves globex's.
		clock.Advance(time.Hour)
		if o, err := log.Observe(globex, db, ev, time.Hour); err != nil || !o.Process || o.Fence != 2 {
			t.Fatalf("globex's second window: %+v, %v", o, err)
		}
		before, err = read(globex, "fp")
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if n, err := log.Reap(context.Background(), time.Minute, 0); err != nil || n != 2 {
			t.Fatalf("reap: %d, %v; want 2 (acme's fp and only-acme)", n, err)
		}
		for _, fp := range []string{"fp", "only-acme"} {
			if _, err := log.Get(acme, db, fp); !errors.Is(err, racefree.ErrNotFound) {
				t.Errorf("acme's %s after the reap: %v, want ErrNotFound", fp, err)
			}
		}
		unchanged("reap", before)
		if o, err := log.Observe(acme, db, ev, time.Minute); err != nil || !o.Process || o.Fence != 2 || o.Count != 1 {
			t.Fatalf("acme observes after its reap: %+v, %v; want a new window at fence 2", o, err)
		}
		unchanged("observe after the reap", before)
	})
}

// TestRecordNeedsALeasedClaim puts a NULL on one side of record's fence
// comparison: an event whose claim was never leased (a claim row written
// before migration 002, NULL fence) or has no claim row at all takes no
// result at any fence.
func TestRecordNeedsALeasedClaim(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		testdb.ExecAll(t, db,
			`INSERT INTO racefree_claims (tenant, ns, key, holder, count, first_seen, last_seen) VALUES ('default', 'dedup', 'legacy', 'x', 1, 1, 1)`,
			`INSERT INTO racefree_dedup_events (tenant, fingerprint, source, level, message) VALUES ('default', 'legacy', 's', 'l', 'm')`,
			`INSERT INTO racefree_dedup_events (tenant, fingerprint, source, level, message) VALUES ('default', 'orphan', 's', 'l', 'm')`,
		)
		if err := log.Record(ctx, db, "legacy", 1, dedup.Result{Classification: "c"}); !errors.Is(err, racefree.ErrNotHeld) {
			t.Errorf("record on a claim with a NULL fence: %v, want ErrNotHeld", err)
		}
		if err := log.Record(ctx, db, "orphan", 1, dedup.Result{Classification: "c"}); !errors.Is(err, racefree.ErrNotFound) {
			t.Errorf("record on an event without a claim: %v, want ErrNotFound", err)
		}
		for _, fp := range []string{"legacy", "orphan"} {
			if r, err := log.Get(ctx, db, fp); err != nil || r.Classification != "" || r.ResultFence != 0 {
				t.Errorf("%s after the refused record: %+v, %v; want no result", fp, r, err)
			}
		}
	})
}

// TestEveryCallNeedsTheTenantsMigration: before migration 011 every call is
// ErrSchemaOutdated and writes nothing; at 011 the default tenant works
// and sees the rows written before; another tenant needs 012.
func TestEveryCallNeedsTheTenantsMigration(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		clock := racefree.NewManualClock(t0)
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated, Clock: clock})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion-1); err != nil {
			t.Fatal(err)
		}
		// An event of the previous release whose window lapsed long ago.
		testdb.ExecAll(t, db,
			`INSERT INTO racefree_claims (ns, key, holder, fence, claimed_at, expires_at, count, first_seen, last_seen) VALUES ('dedup', 'fp', 'x', 1, 1, 2, 1, 1, 1)`,
			`INSERT INTO racefree_dedup_events (fingerprint, source, level, message) VALUES ('fp', 's', 'l', 'm')`,
		)
		count := func() (n int) {
			t.Helper()
			if err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM racefree_claims) + (SELECT count(*) FROM racefree_dedup_events WHERE result_fence IS NULL)`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		log := dedup.New(db)
		ev := dedup.Event{Source: "s", Level: "l", Message: "m", Fingerprint: "fp"}
		outdated := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, racefree.ErrSchemaOutdated) {
				t.Errorf("%s at schema %d: %v, want ErrSchemaOutdated", op, tenant.TenantsVersion-1, err)
			}
		}
		_, err := log.Observe(ctx, db, ev, time.Minute)
		outdated("observe", err)
		_, err = log.Observe(ctx, db, dedup.Event{Source: "s", Level: "l", Message: "new"}, time.Minute)
		outdated("observe of a new event", err)
		outdated("observe in the caller's transaction", db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := log.Observe(ctx, tx, ev, time.Minute)
			return err
		}))
		outdated("record", log.Record(ctx, db, "fp", 1, dedup.Result{Classification: "c"}))
		_, err = log.Get(ctx, db, "fp")
		outdated("get", err)
		n, err := log.Reap(ctx, 0, 0)
		outdated("reap", err)
		if got := count(); got != 2 || n != 0 {
			t.Fatalf("after the calls at schema %d: %d rows without a result, %d reaped; want 2, 0", tenant.TenantsVersion-1, got, n)
		}

		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		if r, err := log.Get(ctx, db, "fp"); err != nil || r.Message != "m" {
			t.Fatalf("get at schema %d: %+v, %v; want the previous release's event", tenant.TenantsVersion, r, err)
		}
		o, err := log.Observe(ctx, db, ev, time.Minute)
		if err != nil || !o.Process || o.Fence != 2 || o.Count != 2 {
			t.Fatalf("observe at schema %d: %+v, %v; want the next window, fence 2, count 2", tenant.TenantsVersion, o, err)
		}
		if err := log.Record(ctx, db, "fp", o.Fence, dedup.Result{Classification: "c"}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
		if n, err := log.Reap(ctx, 0, 0); err != nil || n != 1 {
			t.Fatalf("reap at schema %d: %d, %v; want 1", tenant.TenantsVersion, n, err)
		}
		acme, err := tenant.With(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := log.Observe(acme, db, ev, time.Minute); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("another tenant at schema %d: %v, want ErrSchemaOutdated", tenant.TenantsVersion, err)
		}
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		if o, err := log.Observe(acme, db, ev, time.Minute); err != nil || !o.Process || o.Fence != 1 {
			t.Fatalf("another tenant at the current schema: %+v, %v", o, err)
		}
	})
}

// previous reads a statement of the previous release: dedup's own
// (testdata/previous), or claim's, which dedup's Observe and Reap ran.
func previous(t *testing.T, pkg, engine, name string) string {
	dir := "testdata"
	if pkg == "claim" {
		dir = filepath.Join("..", "claim", "testdata")
	}
	return testdb.Previous(t, dir, engine, name)
}

// TestPreviousReleaseRunsOnTheExpandedSchema is the rollout: at migration
// 011 the previous release's statements (testdata/previous, copied from
// the release before tenants) still observe, record, read and reap beside
// this release's, this release sees their rows as the default tenant's,
// and theirs see its rows.
func TestPreviousReleaseRunsOnTheExpandedSchema(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		clock := racefree.NewManualClock(t0)
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated, Clock: clock})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		engine := db.Engine()
		now := func() int64 { return racefree.Millis(clock.Now()) }
		// observe is the previous release's Observe: claim's acquire in
		// namespace dedup, then insert_event.
		observe := func(fp, holder string) (winner string, fence, count int64) {
			t.Helper()
			var claimed, expires, first, last, at int64
			var inserted bool
			err := db.InTx(ctx, func(tx *sql.Tx) error {
				err := tx.QueryRowContext(ctx, previous(t, "claim", engine, "acquire"), dedup.Namespace, fp, holder, time.Minute.Milliseconds(), now()).
					Scan(&winner, &fence, &claimed, &expires, &count, &first, &last, &at, &inserted)
				if err != nil {
					return err
				}
				_, err = tx.ExecContext(ctx, previous(t, "dedup", engine, "insert_event"), fp, "billing", "error", "m")
				return err
			})
			if err != nil {
				t.Fatalf("previous observe of %s: %v", fp, err)
			}
			return winner, fence, count
		}
		record := func(fp string, fence int64, class string) int64 {
			t.Helper()
			res, err := db.ExecContext(ctx, previous(t, "dedup", engine, "record"), fp, fence, class, "T-1", dedup.Namespace, now())
			if err != nil {
				t.Fatalf("previous record: %v", err)
			}
			n, _ := res.RowsAffected()
			return n
		}
		get := func(fp string) (class string, err error) {
			var source, level, message string
			var c, ext sql.NullString
			var fence sql.NullInt64
			err = db.QueryRowContext(ctx, previous(t, "dedup", engine, "get"), fp).Scan(&source, &level, &message, &c, &ext, &fence)
			return c.String, err
		}

		if w, fence, _ := observe("fp", "old-1"); w != "old-1" || fence != 1 {
			t.Fatalf("previous observe: %s at %d; want old-1 at 1", w, fence)
		}
		if w, _, count := observe("fp", "old-2"); w != "old-1" || count != 2 {
			t.Fatalf("previous observe again: %s, count %d; want old-1's window, count 2", w, count)
		}
		if n := record("fp", 1, "old"); n != 1 {
			t.Fatalf("previous record: %d rows, want 1", n)
		}
		if c, err := get("fp"); err != nil || c != "old" {
			t.Fatalf("previous get: %q, %v", c, err)
		}

		// This release sees the previous release's event as the default
		// tenant's, and counts on.
		log := dedup.New(db)
		ev := dedup.Event{Source: "billing", Level: "error", Message: "m", Fingerprint: "fp"}
		if r, err := log.Get(ctx, db, "fp"); err != nil || r.Classification != "old" || r.ResultFence != 1 {
			t.Fatalf("this release reads the previous release's event: %+v, %v", r, err)
		}
		if o, err := log.Observe(ctx, db, ev, time.Minute); err != nil || o.Process || o.Count != 3 || o.Fence != 1 {
			t.Fatalf("this release observes the previous release's window: %+v, %v; want count 3, not elected", o, err)
		}
		if err := log.Record(ctx, db, "fp", 1, dedup.Result{Classification: "new"}); err != nil {
			t.Fatal(err)
		}
		// And the previous release sees this release's.
		o, err := log.Observe(ctx, db, dedup.Event{Source: "billing", Level: "error", Message: "m", Fingerprint: "fp2"}, time.Minute)
		if err != nil || !o.Process {
			t.Fatal(o, err)
		}
		if w, _, count := observe("fp2", "old-3"); w == "old-3" || count != 2 {
			t.Fatalf("previous observe of this release's window: %s, count %d; want count 2, not won", w, count)
		}
		if n := record("fp2", o.Fence, "old"); n != 1 {
			t.Fatalf("previous record on this release's event: %d rows, want 1", n)
		}
		if c, err := get("fp"); err != nil || c != "new" {
			t.Fatalf("previous get of this release's result: %q, %v", c, err)
		}

		// The previous reaper forgets both; this release starts above the
		// floor it raised.
		clock.Advance(time.Hour)
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			if engine == racefree.SQLite {
				if _, err := tx.ExecContext(ctx, previous(t, "claim", engine, "reap_floor"), dedup.Namespace, now(), 10); err != nil {
					return err
				}
			}
			rows, err := tx.QueryContext(ctx, previous(t, "claim", engine, "reap"), dedup.Namespace, now(), 10)
			if err != nil {
				return err
			}
			var keys []string
			for rows.Next() {
				var k string
				if err := rows.Scan(&k); err != nil {
					return err
				}
				keys = append(keys, k)
			}
			rows.Close()
			slices.Sort(keys)
			if !slices.Equal(keys, []string{"fp", "fp2"}) {
				t.Errorf("previous reap: %v, want [fp fp2]", keys)
			}
			_, err = tx.ExecContext(ctx, previous(t, "dedup", engine, "reap_events"), `["fp","fp2"]`)
			return err
		})
		if err != nil {
			t.Fatalf("previous reap: %v", err)
		}
		if _, err := log.Get(ctx, db, "fp"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("this release after the previous reap: %v, want ErrNotFound", err)
		}
		if o, err := log.Observe(ctx, db, ev, time.Minute); err != nil || !o.Process || o.Count != 1 || o.Fence != 2 {
			t.Fatalf("this release observes a reaped fingerprint: %+v, %v; want a new window at fence 2", o, err)
		}
		var others int
		if err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM racefree_dedup_events WHERE tenant <> 'default') + (SELECT count(*) FROM racefree_claims WHERE tenant <> 'default') + (SELECT count(*) FROM racefree_claim_floors WHERE tenant <> 'default')`).Scan(&others); err != nil || others != 0 {
			t.Fatalf("%d rows outside the default tenant, %v; want 0", others, err)
		}
	})
}
