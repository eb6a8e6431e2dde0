package client_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/client"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestClientReadsAPageOfOneLargeEvent: a page holds its first item
// whatever its size, so a reply can be longer than server.MaxPageBytes: a
// webhook body of 1.4 MiB of control bytes is listed as a JSON string six
// times as long, a page of 8.4 MiB (past the 8 MiB the client once read).
// InboxEvents reads it and gives the body back byte for byte, then pages
// on to an empty page.
func TestClientReadsAPageOfOneLargeEvent(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	s := server.New(db, server.Options{Token: "secret", InboxSecrets: map[string][]string{"stripe": {"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}})
	c, _, _ := outsideClient(t, s.Handler(), nil, 0, client.Options{})
	in, err := inbox.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	body := bytes.Repeat([]byte{1}, 1400<<10)
	if _, err := in.Receive(ctx, "stripe", "evt_large", body, nil); err != nil {
		t.Fatal(err)
	}
	evs, err := c.InboxEvents(ctx, "stripe", 0, 0)
	if err != nil || len(evs) != 1 || evs[0].ID != "evt_large" || !bytes.Equal(evs[0].Payload, body) {
		t.Fatalf("a page of one event of %d bytes (%d escaped): %d events, %v; want it, byte for byte", len(body), 6*len(body), len(evs), err)
	}
	if evs, err := c.InboxEvents(ctx, "stripe", evs[0].Seq, 0); err != nil || len(evs) != 0 {
		t.Fatalf("the page after it: %d events, %v; want none", len(evs), err)
	}
}
