package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/testing/testdb"
)

func TestQuotaConsume(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		testdb.Open(t, dsn, nil) // migrated
		args := []string{"quota", "consume", "user-1", "--db", dsn, "--rate", "1", "--per", "1h", "--burst", "2", "--format", "json"}
		for i, want := range []struct {
			code      int
			allowed   bool
			remaining float64
		}{{0, true, 1}, {0, true, 0}, {3, false, 0}} {
			r := runCLI(t, args...)
			var out map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
				t.Fatalf("charge %d: stdout %q: %v", i+1, r.stdout, err)
			}
			if r.code != want.code || out["allowed"] != want.allowed || out["remaining"] != want.remaining {
				t.Fatalf("charge %d: exit %d, %v, stderr %q", i+1, r.code, out, r.stderr)
			}
			if !want.allowed && (out["retry_after_ms"] == nil || !strings.Contains(r.stderr, "quota exceeded")) {
				t.Fatalf("refusal: %v, stderr %q", out, r.stderr)
			}
			// reset_at: when the bucket is full again, within the 2 hours
			// of the two units charged; never the zero time.
			at, _ := out["reset_at"].(string)
			if reset, err := time.Parse(time.RFC3339Nano, at); err != nil || reset.Before(time.Now()) || reset.After(time.Now().Add(2*time.Hour)) {
				t.Fatalf("charge %d: reset_at %q, %v; want within the next 2 hours", i+1, at, err)
			}
		}
		if r := runCLI(t, "quota", "consume", "user-1", "--db", dsn, "--rate", "1", "--burst", "2", "--n", "3"); r.code != 2 || !strings.Contains(r.stderr, "invalid n") {
			t.Fatalf("n above the burst: exit %d, stderr %q", r.code, r.stderr)
		}
		// Another tenant's counter of the same key is its own.
		if r := runCLI(t, append(args, "--tenant", "acme")...); r.code != 0 || !strings.Contains(r.stdout, `"remaining":1`) {
			t.Fatalf("--tenant acme: exit %d, stdout %q, stderr %q; want allowed with 1 remaining", r.code, r.stdout, r.stderr)
		}
		if r := runCLI(t, append(args, "--tenant", "a b")...); r.code != 2 || !strings.Contains(r.stderr, "invalid tenant") {
			t.Fatalf("--tenant 'a b': exit %d, stderr %q; want exit 2, invalid tenant", r.code, r.stderr)
		}
		// A sliding window: its limit is the rate, its refusal exit 3.
		sliding := []string{"quota", "consume", "user-2", "--db", dsn, "--kind", "sliding_window", "--rate", "1", "--per", "1h", "--format", "json"}
		if r := runCLI(t, sliding...); r.code != 0 || !strings.Contains(r.stdout, `"remaining":0`) {
			t.Fatalf("sliding window: exit %d, stdout %q, stderr %q; want allowed with 0 remaining", r.code, r.stdout, r.stderr)
		}
		if r := runCLI(t, sliding...); r.code != 3 || !strings.Contains(r.stdout, "retry_after_ms") {
			t.Fatalf("sliding window over its limit: exit %d, stdout %q, stderr %q; want exit 3", r.code, r.stdout, r.stderr)
		}
		// Without --format json, one line of text.
		if r := runCLI(t, "quota", "consume", "user-3", "--db", dsn, "--rate", "1", "--per", "1h", "--burst", "2"); r.code != 0 || !strings.HasPrefix(r.stdout, "allowed: 1 remaining, full again at ") || strings.Count(r.stdout, "\n") != 1 {
			t.Fatalf("text: exit %d, stdout %q, stderr %q; want one line, allowed", r.code, r.stdout, r.stderr)
		}
	})
}
