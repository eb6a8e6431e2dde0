package main

import (
	"context"
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
	"github.com/racefree/racefree/onetime"
	"github.com/racefree/racefree/server"
)

func TestServeRefusesBadRefreshOptions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--refresh-grace", "5s"},
		{"--refresh-grace", "5s", "--refresh-secret", "short"},
		{"--refresh-grace", "-1s"},
		{"--refresh-grace", "2h", "--refresh-secret", strings.Repeat("s", 32)},
		{"--token-retention", "-1s"},
		{"--dashboard-secret", "short"},
	} {
		r := runRefusedServe(t, append([]string{"--db", "sqlite:" + filepath.Join(dir, "x.db")}, args...)...)
		if r.code == 0 || !strings.HasPrefix(r.stderr, "racefree: invalid ") {
			t.Errorf("%v: exit %d, %q; want a refusal", args, r.code, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused flags wrote %d files", len(entries))
	}
	f := serveCmd().Flags()
	for name, want := range map[string]string{"refresh-grace": "0s", "token-retention": "24h0m0s"} {
		if got := f.Lookup(name).DefValue; got != want {
			t.Errorf("--%s defaults to %s, want %s", name, got, want)
		}
	}
}

// TestServeReapsTokens: serve's reaper deletes codes and refresh-token
// families expired token-retention ago, and keeps younger ones.
func TestServeReapsTokens(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := racefree.NewManualClock(start)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		clock.Set(start)
		tokens, err := onetime.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		old, _ := tokens.Issue(ctx, db, "login", "u", time.Minute)
		oldFamily, _ := tokens.IssueRefresh(ctx, db, "u", time.Minute)
		clock.Advance(time.Hour)
		young, _ := tokens.Issue(ctx, db, "login", "u", time.Minute)
		clock.Advance(time.Hour)
		// Claims and fingerprints are kept for less than the tokens: the young
		// code, expired 59 minutes ago, is kept by --token-retention alone.
		opts := reapOptions{ClaimGrace: 30 * time.Minute, DedupRetention: 30 * time.Minute, TokenRetention: 90 * time.Minute}
		api := server.New(db, server.Options{})
		reapOnce(ctx, api, claim.New(db), dedup.New(db), opts, slog.New(slog.NewTextHandler(io.Discard, nil)))
		for tok, want := range map[string]onetime.Outcome{old.Token: onetime.Unknown, young.Token: onetime.Expired} {
			if r, err := tokens.Consume(ctx, db, "login", tok); err != nil || r.Outcome != want {
				t.Fatalf("after a reap: %v %v, want %v", r.Outcome, err, want)
			}
		}
		if r, err := tokens.Rotate(ctx, db, oldFamily.Token); err != nil || r.Outcome != onetime.Unknown {
			t.Fatalf("family expired token-retention ago: %v %v, want unknown", r.Outcome, err)
		}
	})
}
