package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestServeWithoutMigrateOneBelowTheRollout: serve --migrate=false serves
// a schema at the rollout's expand step (migration 011, the edge
// TestServeDuringTheRollout tries) and refuses one migration below it,
// with one line naming migrate up, as it refuses an empty database.
func TestServeWithoutMigrateOneBelowTheRollout(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		below := strconv.Itoa(tenant.TenantsVersion - 1)
		if r := runCLI(t, "migrate", "up", "--db", d, "--to", below); r.code != 0 {
			t.Fatalf("migrate up --to %s: %d %q", below, r.code, r.stderr)
		}
		r := runRefusedServe(t, "--db", d, "--migrate=false")
		if r.code == 0 || !strings.Contains(r.stderr, "racefree migrate up") {
			t.Fatalf("serve --migrate=false at %s: exit %d, stderr %q; want a refusal naming migrate up", below, r.code, r.stderr)
		}
	})
}
