package reaper_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/reaper"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestEdgesRunStartsNoBatchOnAnEndedContext: a context that ended before
// Run starts runs no batch, on either engine; and on PostgreSQL, which
// does not pause, a context that ends during a full batch runs no other.
func TestEdgesRunStartsNoBatchOnAnEndedContext(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{racefree.SQLite, racefree.Postgres} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		calls := 0
		total, err := reaper.Run(ctx, engine, 10, func() (int64, error) {
			calls++
			return 0, errors.New("a batch on an ended context")
		})
		if !errors.Is(err, context.Canceled) || calls != 0 || total != 0 {
			t.Errorf("%s, cancelled before: %d batch(es), total %d, %v; want none, 0, context.Canceled", engine, calls, total, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	total, err := reaper.Run(ctx, racefree.Postgres, 10, func() (int64, error) {
		calls++
		if calls > 1 {
			return 0, errors.New("a batch after the context ended")
		}
		cancel()
		return 10, nil
	})
	if !errors.Is(err, context.Canceled) || calls != 1 || total != 10 {
		t.Errorf("postgres, cancelled during the first full batch: %d batch(es), total %d, %v; want 1, 10, context.Canceled", calls, total, err)
	}
}

// TestEdgesRunTakesABatchOneShortOfFullForTheLast: a batch of size-1 rows
// is short and the last, on either engine; a full batch is followed by
// another, an empty one included.
func TestEdgesRunTakesABatchOneShortOfFullForTheLast(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{racefree.SQLite, racefree.Postgres} {
		for _, c := range []struct {
			batches []int64
			calls   int
			total   int64
		}{
			{[]int64{9, 10}, 1, 9},
			{[]int64{10, 9, 10}, 2, 19},
			{[]int64{10, 10, 0, 10}, 3, 20},
		} {
			calls := 0
			total, err := reaper.Run(context.Background(), engine, 10, func() (int64, error) {
				if calls == len(c.batches) {
					return 0, errors.New("a batch after the last")
				}
				n := c.batches[calls]
				calls++
				return n, nil
			})
			if err != nil || calls != c.calls || total != c.total {
				t.Errorf("%s, batches %v of 10: ran %d, total %d, %v; want %d, %d, nil", engine, c.batches, calls, total, err, c.calls, c.total)
			}
		}
	}
}

// TestEdgesPauseEndsWithItsContext: Pause returns the context's error as
// soon as its context ends, whether it had ended before or ends during
// the pause, however long the pause; with a live context it waits its
// time and returns nil.
func TestEdgesPauseEndsWithItsContext(t *testing.T) {
	t.Parallel()
	wait := func(what string, done <-chan error) {
		t.Helper()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s: Pause returned %v, want context.Canceled", what, err)
			}
		case <-time.After(20 * time.Second): // a deadline for the test, not a wait it needs
			t.Fatalf("%s: Pause of an hour still waits 20 s after its context ended", what)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- reaper.Pause(ctx, time.Hour) }()
	wait("ended before", done)

	ctx, cancel = context.WithCancel(context.Background())
	started := make(chan struct{})
	go func() { close(started); done <- reaper.Pause(ctx, time.Hour) }()
	<-started
	cancel()
	wait("ended during", done)

	if err := reaper.Pause(context.Background(), 0); err != nil {
		t.Errorf("a pause of 0 with a live context: %v, want nil", err)
	}
}

// TestEdgesEachTenantNeedsExactlyTheTenantsMigration: one migration
// before the tenant registry (TenantsVersion-1) EachTenant runs nothing
// and returns a *racefree.SchemaError naming both versions; at
// TenantsVersion it runs fn for the default tenant.
func TestEdgesEachTenantNeedsExactlyTheTenantsMigration(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion-1); err != nil {
			t.Fatal(err)
		}
		calls := 0
		fn := func(context.Context) error { calls++; return nil }
		err := reaper.EachTenant(ctx, db, fn)
		var se *racefree.SchemaError
		if !errors.As(err, &se) || !errors.Is(err, racefree.ErrSchemaOutdated) || se.Have != tenant.TenantsVersion-1 || se.Want != tenant.TenantsVersion || calls != 0 {
			t.Fatalf("at schema %d: %v (%#v), fn ran %d time(s); want a SchemaError from %d to %d and no run",
				tenant.TenantsVersion-1, err, se, calls, tenant.TenantsVersion-1, tenant.TenantsVersion)
		}
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		if err := reaper.EachTenant(ctx, db, fn); err != nil || calls < 1 {
			t.Fatalf("at schema %d: fn ran %d time(s), %v; want at least once (the default tenant), nil", tenant.TenantsVersion, calls, err)
		}
	})
}
