package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/internal/testdb"
	"github.com/racefree/racefree/server"
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
