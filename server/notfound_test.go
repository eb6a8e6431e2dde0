package server_test

import (
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestEveryNotFoundSaysWhat: a 404 names what was not found, in its
// problem's detail, on every route that can answer one.
func TestEveryNotFoundSaysWhat(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		for _, c := range []struct{ method, path, body, want string }{
			{"GET", "/v1/claims/no-such-job", "", `no claim on key "no-such-job"`},
			{"POST", "/v1/claims/no-such-job/renew", `{"holder":"w1","fence":1,"ttl_ms":1000}`, `no claim on key "no-such-job"`},
			{"POST", "/v1/events/fp-404/result", `{"fence":1,"classification":"done"}`, `no event with fingerprint "fp-404"`},
			{"POST", "/v1/outbox/dead/424242/redrive", "", "no dead outbox message 424242"},
			{"POST", "/v1/outbox/dead/424242/discard", "", "no dead outbox message 424242"},
			{"GET", "/v1/events/fp-404", "", `no event with fingerprint "fp-404"`},
			{"GET", "/v1/outbox/messages/424242", "", "no outbox message 424242"},
			{"GET", "/v1/nothing/here", "", "GET /v1/nothing/here is not a route"},
		} {
			code, body, _ := do(t, h, c.method, c.path, c.body)
			detail, _ := body["detail"].(string)
			if code != 404 {
				// renew of a missing claim may be refused as not held: a 409 names it too
				if code == 409 && c.method == "POST" && strings.HasSuffix(c.path, "/renew") && detail != "" {
					continue
				}
				t.Errorf("%s %s: %d %v, want 404", c.method, c.path, code, body)
				continue
			}
			if !strings.Contains(detail, c.want) {
				t.Errorf("%s %s: detail %q, want it to say %q", c.method, c.path, detail, c.want)
			}
		}
	})
}
