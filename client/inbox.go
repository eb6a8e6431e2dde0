package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
)

// Deliver forwards one Standard Webhooks delivery to the server's inbox of
// source (POST /v1/inbox/{source}), its body and its webhook-id,
// webhook-timestamp and webhook-signature headers exactly as the sender
// signed them: a relay in front of the server, or a test. The route is
// authenticated by the signature, not by the client's key. A new delivery
// and a duplicate of one already recorded both succeed (the inbox records
// each webhook-id once), which is why Deliver retries like a call with an
// Idempotency-Key. A bad signature is an *Error of type bad-signature, a
// source the server has no secret for one of type unknown-source.
func (c *Client) Deliver(ctx context.Context, source string, header http.Header, body []byte) error {
	h := http.Header{}
	for _, name := range []string{"webhook-id", "webhook-timestamp", "webhook-signature", "Content-Type"} {
		if v := header.Values(name); len(v) > 0 {
			h[http.CanonicalHeaderKey(name)] = v
		}
	}
	if body == nil {
		body = []byte{}
	}
	return c.do(ctx, call{method: "POST", path: "/v1/inbox/" + url.PathEscape(source), raw: body, header: h}, nil)
}

// InboxEvents returns the deliveries of source the key's tenant received,
// oldest first, those numbered above after and at most limit (1 to
// [inbox.MaxListLimit]; 0: the server's default), as [inbox.Inbox.List] (GET
// /v1/inbox/{source}); page on with after set to the last Seq returned
// until none is. A page also stops at 4 MiB of JSON (server.MaxPageBytes;
// one larger event alone), so fewer than limit is not the end.
// Payload holds the body as received when it was JSON; the server shows a
// body that is not JSON as a JSON string, whose text Payload holds (so a
// body that was itself a JSON string reads back without its quotes).
func (c *Client) InboxEvents(ctx context.Context, source string, after int64, limit int) ([]inbox.Event, error) {
	if limit < 0 || limit > inbox.MaxListLimit {
		return nil, racefree.Invalid("limit", "must be between 1 and %d, or 0 for the server's default", inbox.MaxListLimit)
	}
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Events []struct {
			Seq        int64           `json:"seq"`
			ID         string          `json:"id"`
			Status     string          `json:"status"`
			Reason     string          `json:"reason"`
			ReceivedAt time.Time       `json:"received_at"`
			Payload    json.RawMessage `json:"payload"`
		} `json:"events"`
	}
	if err := c.do(ctx, call{method: "GET", path: "/v1/inbox/" + url.PathEscape(source), query: q}, &out); err != nil {
		return nil, err
	}
	evs := make([]inbox.Event, 0, len(out.Events))
	for _, e := range out.Events {
		payload := []byte(e.Payload)
		var text string
		if len(e.Payload) > 0 && e.Payload[0] == '"' && json.Unmarshal(e.Payload, &text) == nil {
			payload = []byte(text)
		}
		evs = append(evs, inbox.Event{Seq: e.Seq, ID: e.ID, Status: e.Status, Reason: e.Reason, Payload: payload, ReceivedAt: e.ReceivedAt})
	}
	return evs, nil
}
