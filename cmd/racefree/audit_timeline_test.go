package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestAuditVerifyWarnsOfATimelineChange runs a real primary and an
// asynchronous standby, appends to a chain, fails over losing the last
// acknowledged entries and appends on the promoted node: audit verify
// reports the chain intact, exit 0, followed by a WARNING line naming the
// timelines and the entry after which entries may have been lost (text);
// the JSON object carries possible_loss and warnings; with --strict it
// exits 3 with one line on stderr. A chain appended to only on the new
// timeline gets no warning.
func TestAuditVerifyWarnsOfATimelineChange(t *testing.T) {
	t.Parallel()
	c := testdb.NewCluster(t)
	ctx := context.Background()
	keys, ring := keygenKeyring(t, t.TempDir())
	appendTo := func(scope string, n int) {
		t.Helper()
		db := c.Primary.Open(t, nil)
		l, _ := audit.New(db, ring)
		for range n {
			if _, err := l.Append(ctx, db, scope, audit.Entry{Actor: "alice", Action: "login"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendTo("acme", 3)
	before := c.Primary.Timeline(t)
	c.FailOverLosing(t, func() { appendTo("acme", 2) })
	after := c.Primary.Timeline(t)
	appendTo("acme", 1)
	appendTo("globex", 1)
	d := c.Primary.URL

	warning := fmt.Sprintf("acme: WARNING: entry 4 records a move from timeline %d to %d: entries acknowledged on timeline %d after entry 3 may have been lost; compare them with checkpoints kept outside the database\n", before, after, before)
	r := runCLI(t, "audit", "verify", "--db", d, "--keys", keys)
	if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "acme: intact, 5 entries") || !strings.Contains(r.stdout, "\n"+warning) ||
		strings.Count(r.stdout, "WARNING") != 1 || !strings.HasSuffix(r.stdout, "\nglobex: intact, 1 entries, no stored checkpoints: a chain cut short cannot be detected\n") {
		t.Fatalf("verify after a failover: %+v\nwant the acme line, then %q", r, warning)
	}
	r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--format", "json", "--scope", "acme")
	var res audit.Result
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &res) != nil || !res.Intact() || len(res.Warnings) != 1 ||
		len(res.PossibleLoss) != 1 || res.PossibleLoss[0] != (audit.TimelineChange{Seq: 4, From: before, To: after, LastSeq: 3}) {
		t.Fatalf("verify --format json after a failover: %+v (%+v)", r, res)
	}
	for _, format := range []string{"text", "json"} {
		r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--format", format, "--strict")
		if r.code != 3 || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "1 of 2 audit chains may have lost entries") {
			t.Fatalf("verify --strict --format %s after a failover: %+v; want exit 3 and one line", format, r)
		}
	}
	r = runCLI(t, "audit", "verify", "--db", d, "--keys", keys, "--scope", "globex", "--strict")
	if r.code != 0 || strings.Contains(r.stdout, "WARNING") {
		t.Fatalf("verify --strict of a chain without a failover: %+v; want exit 0, no warning", r)
	}
}
