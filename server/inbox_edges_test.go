package server_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestInboxEdgesOverHTTP tries the inbox routes at their edges, on a
// source that two tenants configure (each with its own secret: the server
// reads the body itself to find the secret that verifies it) and on one
// that one tenant configures: a body of exactly InboxMaxBody is recorded
// for the signer's tenant alone, one byte more is 413 and records
// nothing; the id, the timestamp and the body, each changed alone after
// signing, are 401 and record nothing; a list of limit 1000 is taken,
// 1001 refused, and `after` the last event is an empty page that keeps
// the cursor.
func TestInboxEdgesOverHTTP(t *testing.T) {
	t.Parallel()
	const max = 64
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		opts := server.Options{RequireKey: true, InboxMaxBody: max, InboxSecrets: map[string][]string{
			tenantA + "/stripe": {secretA}, tenantB + "/stripe": {secretB}, tenantB + "/github": {secretB}}}
		h := server.New(db, opts).Handler()
		keyA, keyB := newKey(t, db, tenantA, apikey.Read|apikey.Write), newKey(t, db, tenantB, apikey.Read|apikey.Write)
		ids := func(key, source string) string {
			t.Helper()
			code, body, _ := do(t, h, "GET", "/v1/inbox/"+source, "", bearerOf(key)...)
			if code != 200 {
				t.Fatalf("list %s: %d %v", source, code, body)
			}
			var out []string
			for _, e := range body["events"].([]any) {
				out = append(out, e.(map[string]any)["id"].(string))
			}
			return strings.Join(out, ",")
		}
		now := time.Now()
		at := max - len(`{"p":""}`)
		exact, over := `{"p":"`+strings.Repeat("x", at)+`"}`, `{"p":"`+strings.Repeat("x", at+1)+`"}`
		for _, source := range []string{"stripe", "github"} {
			if code, body, _ := do(t, h, "POST", "/v1/inbox/"+source, exact, webhook(t, secretB, "evt_exact", now, exact)...); code != 204 {
				t.Errorf("%s: a body of exactly %d bytes: %d %v, want 204", source, max, code, body)
			}
			if code, body, _ := do(t, h, "POST", "/v1/inbox/"+source, over, webhook(t, secretB, "evt_over", now, over)...); code != 413 {
				t.Errorf("%s: a body of %d bytes: %d %v, want 413", source, max+1, code, body)
			}
			// Each field the signature covers, changed alone after signing.
			sig := webhook(t, secretB, "evt_signed", now, `{}`)
			for name, c := range map[string]struct {
				body string
				hdr  []string
			}{
				"id":        {`{}`, append(append([]string{}, sig...), "webhook-id", "evt_other")},
				"timestamp": {`{}`, append(append([]string{}, sig...), "webhook-timestamp", strconv.FormatInt(now.Unix()+1, 10))},
				"body":      {`{ }`, sig},
			} {
				if code, body, _ := do(t, h, "POST", "/v1/inbox/"+source, c.body, c.hdr...); code != 401 {
					t.Errorf("%s: the %s changed after signing: %d %v, want 401", source, name, code, body)
				}
			}
			if got := ids(keyB, source); got != "evt_exact" {
				t.Errorf("%s: tenant %s lists %q, want evt_exact alone", source, tenantB, got)
			}
		}
		if got := ids(keyA, "stripe"); got != "" {
			t.Errorf("tenant %s lists %q of a delivery %s signed", tenantA, got, tenantB)
		}
		for q, want := range map[string]int{"limit=1000": 200, "limit=1001": 400, "limit=1": 200} {
			if code, body, _ := do(t, h, "GET", "/v1/inbox/stripe?"+q, "", bearerOf(keyB)...); code != want {
				t.Errorf("?%s: %d %v, want %d", q, code, body, want)
			}
		}
		code, body, _ := do(t, h, "GET", "/v1/inbox/stripe?after=1", "", bearerOf(keyB)...)
		if evs, _ := body["events"].([]any); code != 200 || len(evs) != 0 || body["next"] != "1" {
			t.Errorf("after the last event: %d %v, want no event and next 1", code, body)
		}
	})
}
