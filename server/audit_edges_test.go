package server_test

import (
	"context"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestAuditListAtItsBounds: GET /v1/audit takes a limit of 1 and of
// audit.MaxListLimit, not 0 nor one past it, and an after of 0, not -1 (400
// invalid-input each); a page of exactly MaxListLimit entries of a chain one
// entry longer holds them all and its next cursor gives the last entry, and
// the page after that is empty with the cursor unchanged.
func TestAuditListAtItsBounds(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ring := auditRing(t, true)
		l, err := audit.New(db, ring)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for range audit.MaxListLimit + 1 {
			if _, err := l.Append(ctx, db, "acme", audit.Entry{Actor: "a", Action: "b"}); err != nil {
				t.Fatal(err)
			}
		}
		h := server.New(db, server.Options{AuditKeys: ring}).Handler()
		for _, q := range []string{"limit=0", "limit=1001", "after=-1"} {
			if code, body, _ := do(t, h, "GET", "/v1/audit?scope=acme&"+q, ""); code != 400 || body["type"] != server.ProblemType("invalid-input") {
				t.Errorf("%s: %d %v; want 400 invalid-input", q, code, body)
			}
		}
		for _, c := range []struct {
			query   string
			entries int
			next    string
		}{{"limit=1&after=0", 1, "1"}, {"limit=1000", 1000, "1000"}, {"after=1000&limit=1000", 1, "1001"}, {"after=1001", 0, "1001"}} {
			code, body, _ := do(t, h, "GET", "/v1/audit?scope=acme&"+c.query, "")
			entries, _ := body["entries"].([]any)
			if code != 200 || len(entries) != c.entries || body["next"] != c.next {
				t.Errorf("%s: %d, %d entries, next %v; want 200, %d entries, next %s", c.query, code, len(entries), body["next"], c.entries, c.next)
			}
		}
	})
}
