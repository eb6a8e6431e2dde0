package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/seq"
	"github.com/racefree/racefree/server"
)

// TestOutside2SequenceRoutesAtTheirEdges: a scope of exactly
// seq.MaxScopeBytes is a counter POST /v1/sequences/{scope}/{name}/next
// counts and GET reads, one byte more is 400; GET reads a name of exactly
// seq.MaxNameBytes, one byte more is 400; racefree_sequence_operations_total
// counts each call under its documented outcome (ok, invalid, exhausted),
// and racefree_sequence_numbers_total counts the numbers handed out, none
// for a call refused as exhausted.
func TestOutside2SequenceRoutesAtTheirEdges(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		scope := strings.Repeat("s", seq.MaxScopeBytes)
		if code, body, _ := do(t, h, "POST", "/v1/sequences/"+scope+"/inv/next", `{"n":2}`); code != 200 || body["scope"] != scope || body["first"] != 1.0 || body["last"] != 2.0 {
			t.Fatalf("next on a scope of %d bytes: %d %v; want 200 first 1 last 2", seq.MaxScopeBytes, code, body)
		}
		if code, body, _ := do(t, h, "POST", "/v1/sequences/"+scope+"s/inv/next", `{}`); code != 400 {
			t.Fatalf("next on a scope of %d bytes: %d %v; want 400", seq.MaxScopeBytes+1, code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/sequences/"+scope+"/inv", ""); code != 200 || body["current"] != 2.0 {
			t.Fatalf("current on a scope of %d bytes: %d %v; want 200 current 2", seq.MaxScopeBytes, code, body)
		}
		name := strings.Repeat("n", seq.MaxNameBytes)
		if code, body, _ := do(t, h, "POST", "/v1/sequences/books/"+name+"/next", `{"n":3}`); code != 200 || body["last"] != 3.0 {
			t.Fatalf("next on a name of %d bytes: %d %v; want 200 last 3", seq.MaxNameBytes, code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/sequences/books/"+name, ""); code != 200 || body["name"] != name || body["current"] != 3.0 {
			t.Fatalf("current on a name of %d bytes: %d %v; want 200 current 3", seq.MaxNameBytes, code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/sequences/books/"+name+"n", ""); code != 400 {
			t.Fatalf("current on a name of %d bytes: %d %v; want 400", seq.MaxNameBytes+1, code, body)
		}

		// One call of each outcome: ok, invalid (n = 0), exhausted (n = 2
		// one short of the BIGINT maximum).
		if code, body, _ := do(t, h, "POST", "/v1/sequences/books/top/next", `{}`); code != 200 {
			t.Fatalf("next: %d %v", code, body)
		}
		if code, body, _ := do(t, h, "POST", "/v1/sequences/books/top/next", `{"n":0}`); code != 400 {
			t.Fatalf("n = 0: %d %v; want 400", code, body)
		}
		if _, err := db.ExecContext(context.Background(), `UPDATE racefree_sequences SET last = 9223372036854775806 WHERE scope = 'books' AND name = 'top'`); err != nil {
			t.Fatal(err)
		}
		if code, body, _ := do(t, h, "POST", "/v1/sequences/books/top/next", `{"n":2}`); code != 409 || body["type"] != server.ProblemType("sequence-exhausted") {
			t.Fatalf("n = 2 one short of the maximum: %d %v; want 409 sequence-exhausted", code, body)
		}
		m := parseMetrics(t, scrape(t, h))
		m.want(t, "calls that handed out numbers", "racefree_sequence_operations_total", 3, "outcome", "ok")
		m.want(t, "a call for n = 0", "racefree_sequence_operations_total", 1, "outcome", "invalid")
		m.want(t, "a call past the maximum", "racefree_sequence_operations_total", 1, "outcome", "exhausted")
		m.want(t, "numbers handed out (2 + 3 + 1; none when exhausted)", "racefree_sequence_numbers_total", 6)
	})
}
