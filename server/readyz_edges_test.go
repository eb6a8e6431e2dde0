package server_test

import (
	"context"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// TestReadyzAtTheSchemaEdges: /readyz is 503 not-ready one migration
// below the schema it needs and 200 at it: the current version by
// default, Options.OldestSchema (a rollout's expand step) when set; a
// schema past OldestSchema but short of the current is still ready.
// /healthz is 200 throughout.
func TestReadyzAtTheSchemaEdges(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		ms, err := db.Migrations()
		if err != nil {
			t.Fatal(err)
		}
		last, oldest := ms[len(ms)-1].Version, int64(tenant.TenantsVersion)
		ready := func(opts server.Options) int {
			t.Helper()
			h := server.New(db, opts).Handler()
			if code, body, _ := do(t, h, "GET", "/healthz", ""); code != 200 {
				t.Fatalf("healthz: %d %v", code, body)
			}
			code, body, _ := do(t, h, "GET", "/readyz", "")
			if code != 200 && (code != 503 || body["type"] != "urn:racefree:problem:not-ready") {
				t.Fatalf("readyz: %d %v, want 200 or 503 not-ready", code, body)
			}
			return code
		}
		rollout := server.Options{OldestSchema: oldest}
		for _, c := range []struct {
			version           int64
			current, rollout_ int // /readyz without and with OldestSchema
		}{
			{oldest - 1, 503, 503},
			{oldest, 503, 200},
			{oldest + 1, 503, 200},
			{last - 1, 503, 200},
			{last, 200, 200},
		} {
			if _, err := db.MigrateUpTo(ctx, c.version); err != nil {
				t.Fatal(err)
			}
			if got := ready(server.Options{}); got != c.current {
				t.Errorf("schema at %d of %d: readyz %d, want %d", c.version, last, got, c.current)
			}
			if got := ready(rollout); got != c.rollout_ {
				t.Errorf("schema at %d of %d with OldestSchema %d: readyz %d, want %d", c.version, last, oldest, got, c.rollout_)
			}
		}
	})
}
