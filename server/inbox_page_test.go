package server_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestInboxListPageIsBoundedByBytes proves that GET /v1/inbox/{source}
// bounds a page by payload bytes (inbox.MaxListBytes) as well as by count,
// and that next still leads to every event once.
func TestInboxListPageIsBoundedByBytes(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{Token: "tok", InboxSecrets: map[string][]string{"stripe": {secret}}}).Handler()
		in, err := inbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			p := bytes.Repeat([]byte{'a' + byte(i)}, 3*inbox.MaxListBytes/8) // 1.5 MiB
			if _, err := in.Receive(context.Background(), "stripe", fmt.Sprintf("e%d", i), p, nil); err != nil {
				t.Fatal(err)
			}
		}
		auth := []string{"Authorization", "Bearer tok"}
		var pages []int
		after := "0"
		for range 5 {
			code, body, _ := do(t, h, "GET", "/v1/inbox/stripe?limit=1000&after="+after, "", auth...)
			evs, _ := body["events"].([]any)
			if code != 200 {
				t.Fatalf("after=%s: %d %v", after, code, body)
			}
			if len(evs) == 0 {
				break
			}
			pages = append(pages, len(evs))
			after = body["next"].(string)
		}
		if got, want := fmt.Sprint(pages), "[2 1]"; got != want {
			t.Fatalf("pages of %s events, want %s", got, want)
		}
		if after != "3" {
			t.Fatalf("last next = %s, want 3", after)
		}
	})
}
