package claim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestCombinedCallsWhoseCommitWasCutAreUnavailable cuts a batch of
// acquires, then one of renewals, then one of releases, once PostgreSQL
// committed each and before its answer came (testdb.CutReply): every caller
// gets ErrUnavailable, as a call alone whose answer is lost, none runs
// alone or again, and a reader sees what each batch committed.
func TestCombinedCallsWhoseCommitWasCutAreUnavailable(t *testing.T) {
	dsn := testdb.NewDSN(t, racefree.Postgres)
	direct := testdb.Open(t, dsn, nil)
	proxy, cut := testdb.NewCutReply(t, dsn)
	db := testdb.Open(t, cut, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1})
	claims, reader := claim.New(db), claim.New(direct)
	ctx := context.Background()
	if _, err := claims.Acquire(ctx, db, "warm", "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	const n = 4
	key := func(i int) string { return fmt.Sprintf("k%d", i) }
	holder := func(i int) string { return fmt.Sprintf("h%d", i) }
	cutEach := func(what string, call func(i int) error) {
		t.Helper()
		calls := make([]func() error, n)
		for i := range calls {
			calls[i] = func() error { return call(i) }
		}
		for i, err := range testdb.CutBatch(t, db, direct, proxy, calls...) {
			if !errors.Is(err, racefree.ErrUnavailable) {
				t.Errorf("%s %d: got %v, want ErrUnavailable: its batch may have committed", what, i, err)
			}
		}
	}

	cutEach("acquire", func(i int) error { _, err := claims.Acquire(ctx, db, key(i), holder(i), time.Minute); return err })
	expires := make([]time.Time, n)
	for i := range n {
		c, err := reader.Get(ctx, direct, key(i))
		if err != nil {
			t.Fatal(err)
		}
		if c.Holder != holder(i) || c.Fence != 1 || !c.Live || c.Count != 1 {
			t.Errorf("%s: %+v, want %s's live tenure at fence 1 after one attempt (the batch's)", key(i), c, holder(i))
		}
		expires[i] = c.ExpiresAt
	}

	cutEach("renew", func(i int) error { _, err := claims.Renew(ctx, db, key(i), holder(i), 1, time.Hour); return err })
	for i := range n {
		c, err := reader.Get(ctx, direct, key(i))
		if err != nil {
			t.Fatal(err)
		}
		if c.Holder != holder(i) || c.Fence != 1 || !c.ExpiresAt.After(expires[i].Add(30*time.Minute)) {
			t.Errorf("%s: %+v, want %s's tenure at fence 1 renewed for an hour (the batch's renewal)", key(i), c, holder(i))
		}
	}

	cutEach("release", func(i int) error { return claims.Release(ctx, db, key(i), holder(i), 1) })
	for i := range n {
		c, err := reader.Get(ctx, direct, key(i))
		if err != nil {
			t.Fatal(err)
		}
		if c.Live || c.Fence != 1 {
			t.Errorf("%s: %+v, want released at fence 1 (the batch's release)", key(i), c)
		}
	}
}
