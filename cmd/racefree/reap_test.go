package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// TestServeReapsClaimsAndDedupFingerprints: serve's reaper deletes
// application claims that lapsed claim-grace ago and dedup fingerprints
// whose window lapsed dedup-retention ago, and keeps the younger ones.
func TestServeReapsClaimsAndDedupFingerprints(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		clock.Set(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		claims, events := claim.New(db), dedup.New(db)
		if _, err := claims.Acquire(ctx, db, "old", "a", time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := events.Observe(ctx, db, dedup.Event{Source: "s", Level: "error", Message: "m", Fingerprint: "old"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		opts := reapOptions{ClaimGrace: time.Hour, DedupRetention: 2 * time.Hour}
		clock.Advance(time.Minute + time.Hour)
		if _, err := claims.Acquire(ctx, db, "young", "a", time.Minute); err != nil {
			t.Fatal(err)
		}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		api := server.New(db, server.Options{})
		reapOnce(ctx, api, claims, events, opts, log)
		if _, err := claims.Get(ctx, db, "old"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("claim lapsed claim-grace ago: %v, want reaped", err)
		}
		if _, err := claims.Get(ctx, db, "young"); err != nil {
			t.Fatalf("young claim: %v, want kept", err)
		}
		if _, err := events.Get(ctx, db, "old"); err != nil {
			t.Fatalf("fingerprint within dedup-retention: %v, want kept", err)
		}
		clock.Advance(time.Hour)
		reapOnce(ctx, api, claims, events, opts, log)
		if _, err := events.Get(ctx, db, "old"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("fingerprint lapsed dedup-retention ago: %v, want reaped", err)
		}
	})
}

// TestServeReapsEveryTenant: serve's reaper visits every tenant, also as
// the application role on PostgreSQL (row-level security binds it to one
// tenant at a time), and every reaper runs without an error there.
func TestServeReapsEveryTenant(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := racefree.NewManualClock(start)
	testdb.EachDSN(t, func(t *testing.T, d string) {
		owner := testdb.Open(t, d, &racefree.Config{Clock: clock})
		dbs := []*racefree.DB{owner}
		if owner.Engine() == racefree.Postgres {
			dbs = append(dbs, testdb.App(t, owner, d))
		}
		for i, db := range dbs {
			clock.Set(start.Add(time.Duration(i) * 100 * time.Hour))
			claims, events := claim.New(db), dedup.New(db)
			key := fmt.Sprintf("old-%d", i)
			for _, id := range []string{"acme", "globex"} {
				ctx, err := tenant.With(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := claims.Acquire(ctx, db, key, "a", time.Minute); err != nil {
					t.Fatal(err)
				}
				if _, err := events.Observe(ctx, db, dedup.Event{Source: "s", Level: "error", Message: "m", Fingerprint: key}, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			count := func() (n int) {
				if err := owner.QueryRowContext(context.Background(), `SELECT (SELECT count(*) FROM racefree_claims WHERE ns = '' AND key = $1) + (SELECT count(*) FROM racefree_dedup_events WHERE fingerprint = $1)`,
					key).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			if n := count(); n != 4 {
				t.Fatalf("%d rows of acme and globex before the reap, want 4", n)
			}
			clock.Advance(10 * time.Hour)
			var logged bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logged, nil))
			reapOnce(context.Background(), server.New(db, server.Options{}), claims, events, reapOptions{ClaimGrace: time.Hour, DedupRetention: time.Hour}, log)
			if strings.Contains(logged.String(), "level=WARN") {
				t.Fatalf("reaper %d failed:\n%s", i, logged.String())
			}
			if left := count(); left != 0 {
				t.Fatalf("reaper %d left %d rows of acme and globex", i, left)
			}
		}
	})
}

// TestEdgesServeReapsAtTheExactGrace: serve's reaper deletes a claim that
// lapsed exactly --claim-grace ago and keeps one that lapsed a millisecond
// later, and likewise a dedup fingerprint at exactly --dedup-retention; a
// grace and a retention of 0 reap at the millisecond of the lapse. A
// negative --claim-grace or --dedup-retention is refused before serve
// writes anything, each alone.
func TestEdgesServeReapsAtTheExactGrace(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := racefree.NewManualClock(start)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		clock.Set(start)
		claims, events := claim.New(db), dedup.New(db)
		lease := func(key string) {
			t.Helper()
			if _, err := claims.Acquire(ctx, db, key, "a", time.Minute); err != nil {
				t.Fatal(err)
			}
			if _, err := events.Observe(ctx, db, dedup.Event{Source: "s", Level: "error", Message: key, Fingerprint: key}, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		lease("exact") // lapses at start + 1m
		clock.Advance(time.Millisecond)
		lease("later") // a millisecond later
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		api := server.New(db, server.Options{})
		reap := func(opts reapOptions) {
			t.Helper()
			reapOnce(ctx, api, claims, events, opts, log)
		}
		kept := func(what, key string, want bool) {
			t.Helper()
			var err error
			if what == "claim" {
				_, err = claims.Get(ctx, db, key)
			} else {
				_, err = events.Get(ctx, db, key)
			}
			if got := err == nil; got != want || err != nil && !errors.Is(err, racefree.ErrNotFound) {
				t.Fatalf("%s %s at %s: kept %v (%v), want %v", what, key, clock.Now().Sub(start), got, err, want)
			}
		}
		opts := reapOptions{ClaimGrace: time.Hour, DedupRetention: 2 * time.Hour}
		clock.Set(start.Add(time.Minute + time.Hour))
		reap(opts)
		kept("claim", "exact", false)
		kept("claim", "later", true)
		kept("fingerprint", "exact", true)
		kept("fingerprint", "later", true)
		clock.Set(start.Add(time.Minute + 2*time.Hour))
		reap(opts)
		kept("claim", "later", false)
		kept("fingerprint", "exact", false)
		kept("fingerprint", "later", true)

		// A grace and a retention of 0: gone at the millisecond of the lapse.
		lease("zero")
		clock.Advance(time.Minute - time.Millisecond)
		reap(reapOptions{})
		kept("claim", "zero", true)
		kept("fingerprint", "zero", true)
		clock.Advance(time.Millisecond)
		reap(reapOptions{})
		kept("claim", "zero", false)
		kept("fingerprint", "zero", false)
	})
	dir := t.TempDir()
	for _, flag := range []string{"--claim-grace", "--dedup-retention"} {
		r := runRefusedServe(t, "--db", "sqlite:"+filepath.Join(dir, "x.db"), flag, "-1ms")
		if r.code == 0 || !strings.HasPrefix(r.stderr, "racefree: invalid "+flag[2:]) {
			t.Errorf("%s -1ms: exit %d, %q; want a refusal naming it", flag, r.code, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused flags wrote %d files", len(entries))
	}
}
