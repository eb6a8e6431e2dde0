package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
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
		{"--dashboard-secret", strings.Repeat("s", minDashboardSecret-1)}, // one byte short of the bound
	} {
		r := runRefusedServe(t, append([]string{"--db", "sqlite:" + filepath.Join(dir, "x.db")}, args...)...)
		if r.code == 0 || !strings.HasPrefix(r.stderr, "racefree: invalid ") {
			t.Errorf("%v: exit %d, %q; want a refusal", args, r.code, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused flags wrote %d files", len(entries))
	}
	// A secret of exactly the bound passes the check: serve goes on to
	// listen, and fails there, on an address this test holds (it never
	// answers, so serve cannot be mistaken for started).
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	r := runRefusedServe(t, "--db", "sqlite:"+filepath.Join(dir, "x.db"), "--addr", held.Addr().String(),
		"--dashboard-secret", strings.Repeat("s", minDashboardSecret))
	if r.code == 0 || strings.Contains(r.stderr, "dashboard-secret") || !strings.Contains(r.stderr, "address already in use") {
		t.Errorf("a dashboard secret of %d bytes: exit %d, %q; want it taken, and serve to fail on the address in use", minDashboardSecret, r.code, r.stderr)
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

// TestTokenFromStandardInput: token consume - and token rotate - read the
// token from standard input, one line, its trailing newline (\n or \r\n)
// trimmed, so a token beginning with '-' (which the command line would
// take for a flag) is consumed or rotated; a line of MaxTokenBytes is
// sent. Empty input, a bare newline, two lines or a line one byte over the
// limit is a usage error (exit 2, one line on stderr, nothing on stdout)
// and changes nothing: the token is still consumed (or rotated) after.
func TestTokenFromStandardInput(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		srv := httptest.NewServer(server.New(db, server.Options{}).Handler())
		defer srv.Close()
		tokens, err := onetime.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		// dashed issues from fn until a token begins with '-' (1 in 64).
		dashed := func(fn func() (string, error)) string {
			t.Helper()
			for range 2000 {
				tok, err := fn()
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(tok, "-") {
					return tok
				}
			}
			t.Fatal("no token began with '-' in 2000 issues")
			return ""
		}
		code := dashed(func() (string, error) {
			c, err := tokens.Issue(ctx, db, "email-verify", "u1", time.Hour)
			return c.Token, err
		})
		refresh := dashed(func() (string, error) {
			r, err := tokens.IssueRefresh(ctx, db, "u1", time.Hour)
			return r.Token, err
		})
		consume := []string{"token", "consume", "-", "--purpose", "email-verify", "--server", srv.URL}
		rotate := []string{"token", "rotate", "-", "--server", srv.URL}
		for _, stdin := range []string{"", "\n", "\r\n", code + "\n" + code + "\n", strings.Repeat("x", onetime.MaxTokenBytes+1) + "\n"} {
			for _, args := range [][]string{consume, rotate} {
				r := runCLIWithStdin(t, stdin, args...)
				if r.code != exitUsage || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "racefree: token: ") {
					t.Errorf("%v with stdin %.40q: %+v; want exit 2, one line naming the token", args[:2], stdin, r)
				}
			}
		}
		if r := runCLIWithStdin(t, "", consume...); !strings.Contains(r.stderr, "standard input is empty") {
			t.Errorf("empty stdin: %q, want it said", r.stderr)
		}
		if r := runCLIWithStdin(t, strings.Repeat("x", onetime.MaxTokenBytes)+"\r\n", consume...); r.code != exitRefused || r.stdout != "refused: unknown\n" {
			t.Errorf("a line of MaxTokenBytes: %+v; want it sent, refused as unknown (exit 3)", r)
		}
		r := runCLIWithStdin(t, code+"\n", append(consume, "--format", "json")...)
		if m := jsonOf(t, r, "POST /v1/tokens/consume"); r.code != 0 || m["outcome"] != "consumed" || m["subject"] != "u1" {
			t.Fatalf("token consume - of %q: %+v, want consumed", code, r)
		}
		if r := runCLIWithStdin(t, code+"\n", consume...); r.code != exitRefused || r.stdout != "refused: already_used\n" {
			t.Fatalf("token consume - again: %+v, want already_used", r)
		}
		r = runCLIWithStdin(t, refresh+"\r\n", append(rotate, "--format", "json")...)
		if m := jsonOf(t, r, "POST /v1/tokens/rotate"); r.code != 0 || m["outcome"] != "rotated" || m["generation"] != float64(2) {
			t.Fatalf("token rotate - of %q: %+v, want rotated to generation 2", refresh, r)
		}
		// The token as an argument of its own is no flag: - is the only
		// value read from stdin.
		if r := runCLIWithStdin(t, code+"\n", "token", "consume", "--purpose", "email-verify", "--server", srv.URL, "--", "x"+code); r.code != exitRefused || r.stdout != "refused: unknown\n" {
			t.Fatalf("token consume of an argument: %+v, want the argument sent (unknown)", r)
		}
	})
}
