package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestAuditVerifyRouteReportsATimelineChange runs a real primary and an
// asynchronous standby, appends through the server, fails over losing
// the last acknowledged entries and appends through a server on the
// promoted node: GET /v1/audit/verify answers the chain intact, with
// possible_loss naming the timelines and the last entry kept, and one
// warning line.
func TestAuditVerifyRouteReportsATimelineChange(t *testing.T) {
	t.Parallel()
	c := testdb.NewCluster(t)
	ring := auditRing(t, true)
	appendTo := func(n int) {
		t.Helper()
		h := server.New(c.Primary.Open(t, nil), server.Options{AuditKeys: ring}).Handler()
		for range n {
			if code, body, _ := do(t, h, "POST", "/v1/audit", `{"scope":"acme","actor":"alice","action":"login"}`); code != 200 {
				t.Fatalf("append: %d %v", code, body)
			}
		}
	}
	appendTo(2)
	before := c.Primary.Timeline(t)
	c.FailOverLosing(t, func() { appendTo(3) })
	after := c.Primary.Timeline(t)
	appendTo(1)
	h := server.New(c.Primary.Open(t, nil), server.Options{AuditKeys: ring}).Handler()
	code, body, _ := do(t, h, "GET", "/v1/audit/verify?scope=acme", "")
	loss, _ := body["possible_loss"].([]any)
	warnings, _ := body["warnings"].([]any)
	want := fmt.Sprint(map[string]any{"seq": 3.0, "from_timeline": float64(before), "to_timeline": float64(after), "last_seq": 2.0})
	if code != 200 || body["intact"] != true || len(loss) != 1 || fmt.Sprint(loss[0]) != want ||
		len(warnings) != 1 || !strings.Contains(fmt.Sprint(warnings[0]), "after entry 2 may have been lost") {
		t.Fatalf("verify after a failover: %d %v; want intact, possible_loss [%s] and one warning", code, body, want)
	}
}
