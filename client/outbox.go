package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strconv"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/outbox"
)

// Enqueue stores m in the key's tenant's outbox for the relays, as
// [outbox.Outbox.Enqueue] (POST /v1/outbox), and returns its id, which is
// the Idempotency-Key every delivery carries. The payload travels as
// payload_base64, so its bytes are delivered exactly as given (set a
// Content-Type header for the relay to send). A zero NotBefore is due at
// once; another is sent as not_before. A retry after a lost reply carries
// the same Idempotency-Key and returns the same id, enqueuing nothing
// more. Bad input (a header named Racefree-*, a topic too long) is a
// *racefree.InputError from the server, nothing stored.
func (c *Client) Enqueue(ctx context.Context, m outbox.Message) (int64, error) {
	if err := racefree.CheckText("topic", m.Topic, outbox.MaxTopicBytes); err != nil {
		return 0, err
	}
	body := map[string]any{"topic": m.Topic}
	if m.Key != "" {
		body["key"] = m.Key
	}
	if len(m.Payload) > 0 {
		body["payload_base64"] = base64.StdEncoding.EncodeToString(m.Payload)
	}
	if len(m.Headers) > 0 {
		body["headers"] = m.Headers
	}
	if !m.NotBefore.IsZero() {
		body["not_before"] = m.NotBefore.UTC().Format(time.RFC3339Nano)
	}
	if m.MaxAttempts != 0 {
		body["max_attempts"] = m.MaxAttempts
	}
	if m.Ordered {
		body["ordered"] = true
	}
	var out struct {
		ID int64 `json:"id"`
	}
	if err := c.do(ctx, call{method: "POST", path: "/v1/outbox", body: body, idempotent: true}, &out); err != nil {
		return 0, err
	}
	return out.ID, nil
}

// deadJSON is one message of GET /v1/outbox/dead.
type deadJSON struct {
	ID            int64             `json:"id"`
	Topic         string            `json:"topic"`
	Key           string            `json:"key"`
	Ordered       bool              `json:"ordered"`
	Payload       json.RawMessage   `json:"payload"`
	PayloadBase64 string            `json:"payload_base64"`
	Headers       map[string]string `json:"headers"`
	Attempts      int               `json:"attempts"`
	MaxAttempts   int               `json:"max_attempts"`
	CreatedAt     time.Time         `json:"created_at"`
	DiedAt        time.Time         `json:"died_at"`
	LastError     string            `json:"last_error"`
}

// messageJSON is the answer of GET /v1/outbox/messages/{id}.
type messageJSON struct {
	deadJSON
	State       outbox.State `json:"state"`
	AvailableAt time.Time    `json:"available_at"`
	Fence       int64        `json:"fence"`
	LeasedBy    string       `json:"leased_by"`
	History     []struct {
		Fence   int64     `json:"fence"`
		Attempt int       `json:"attempt"`
		Worker  string    `json:"worker"`
		At      time.Time `json:"at"`
		Outcome string    `json:"outcome"`
		Error   string    `json:"error"`
	} `json:"history"`
}

// Message returns the key's tenant's message id in any state, with its
// latest failed attempts oldest first in History, as [outbox.Outbox.Get]
// (GET /v1/outbox/messages/{id}). An id that is not the tenant's, or was
// reaped or discarded, is an error matching [racefree.ErrNotFound].
func (c *Client) Message(ctx context.Context, id int64) (*outbox.Record, error) {
	if id < 1 {
		return nil, racefree.Invalid("id", "must be a message id (a positive integer)")
	}
	var m messageJSON
	if err := c.do(ctx, call{method: "GET", path: "/v1/outbox/messages/" + strconv.FormatInt(id, 10)}, &m); err != nil {
		return nil, err
	}
	r, err := m.deadJSON.record()
	if err != nil {
		return nil, err
	}
	r.State, r.AvailableAt, r.Fence, r.LeasedBy = m.State, m.AvailableAt, m.Fence, m.LeasedBy
	for _, a := range m.History {
		r.History = append(r.History, outbox.Attempt{Fence: a.Fence, Attempt: a.Attempt, Worker: a.Worker, At: a.At, Outcome: a.Outcome, Error: a.Error})
	}
	return r, nil
}

// record returns m as a Record of a dead message.
func (m deadJSON) record() (*outbox.Record, error) {
	r := &outbox.Record{ID: m.ID, Topic: m.Topic, Key: m.Key, Ordered: m.Ordered, Headers: m.Headers, State: outbox.Dead,
		Attempts: m.Attempts, MaxAttempts: m.MaxAttempts, CreatedAt: m.CreatedAt, AvailableAt: m.DiedAt, LastError: m.LastError}
	switch {
	case m.PayloadBase64 != "":
		b, err := base64.StdEncoding.DecodeString(m.PayloadBase64)
		if err != nil {
			return nil, err
		}
		r.Payload = b
	case len(m.Payload) > 0:
		r.Payload = m.Payload
	}
	return r, nil
}

// Dead returns the key's tenant's dead messages, by id, above after and at
// most limit (1 to [outbox.MaxPage]; 0: the server's default), filtered by
// f's Topic and Key, as [outbox.Outbox.Dead] (GET /v1/outbox/dead). Each
// Record has State [outbox.Dead], AvailableAt the time it died, and its
// payload: one that is not JSON as its bytes, a JSON one as the same JSON
// value as the server writes it (compact, with <, > and & escaped as
// \u003c, \u003e and \u0026), not always its bytes as sent. Page on
// with after set to the last id returned until none is: a page also stops
// at 4 MiB of JSON (server.MaxPageBytes), so fewer than limit is not the
// end. A limit out of range is a *racefree.InputError, before any
// request.
func (c *Client) Dead(ctx context.Context, f outbox.Filter, after int64, limit int) ([]*outbox.Record, error) {
	if limit < 0 || limit > outbox.MaxPage {
		return nil, racefree.Invalid("limit", "must be between 1 and %d, or 0 for the server's default", outbox.MaxPage)
	}
	q := url.Values{}
	if f.Topic != "" {
		q.Set("topic", f.Topic)
	}
	if f.Key != "" {
		q.Set("key", f.Key)
	}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Messages []deadJSON `json:"messages"`
	}
	if err := c.do(ctx, call{method: "GET", path: "/v1/outbox/dead", query: q}, &out); err != nil {
		return nil, err
	}
	rs := make([]*outbox.Record, 0, len(out.Messages))
	for _, m := range out.Messages {
		r, err := m.record()
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// OutboxStats returns the key's tenant's outbox figures, as
// [outbox.Outbox.Stats] (GET /v1/outbox/stats).
func (c *Client) OutboxStats(ctx context.Context) (*outbox.Stats, error) {
	var out struct {
		Ready, Due, Leased, Dead, Delivered int64
		OldestPendingMs                     int64 `json:"oldest_pending_ms"`
	}
	if err := c.do(ctx, call{method: "GET", path: "/v1/outbox/stats"}, &out); err != nil {
		return nil, err
	}
	return &outbox.Stats{Ready: out.Ready, Due: out.Due, Leased: out.Leased, Dead: out.Dead, Delivered: out.Delivered,
		OldestPending: time.Duration(out.OldestPendingMs) * time.Millisecond}, nil
}

// Redrive makes the dead message id due again at once with a fresh set of
// attempts (POST /v1/outbox/dead/{id}/redrive, admin scope). A message
// that is not dead, or not the tenant's, is an error matching
// [racefree.ErrNotFound], nothing changed.
func (c *Client) Redrive(ctx context.Context, id int64) error {
	return c.repair(ctx, id, "redrive")
}

// Discard deletes the dead message id and its history (POST
// /v1/outbox/dead/{id}/discard, admin scope). A message that is not dead,
// or not the tenant's, is an error matching [racefree.ErrNotFound].
func (c *Client) Discard(ctx context.Context, id int64) error {
	return c.repair(ctx, id, "discard")
}

func (c *Client) repair(ctx context.Context, id int64, op string) error {
	if id < 1 {
		return racefree.Invalid("id", "must be a message id (a positive integer)")
	}
	return c.do(ctx, call{method: "POST", path: "/v1/outbox/dead/" + strconv.FormatInt(id, 10) + "/" + op, idempotent: true}, nil)
}
