package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/outbox"
)

// adminOutboxRoutes repair dead letters: operator routes, like the CLI's
// `racefree outbox dead redrive|discard`.
var adminOutboxRoutes = []string{"POST /v1/outbox/dead/{id}/redrive", "POST /v1/outbox/dead/{id}/discard"}

func (s *Server) outboxRoutes() {
	s.outbox, s.outboxErr = outbox.New(s.db, s.opts.Outbox)
	s.handle("POST /v1/outbox", s.transactional(s.enqueueMessage))
	s.handle("GET /v1/outbox/dead", http.HandlerFunc(s.listDead))
	s.handle("GET /v1/outbox/stats", http.HandlerFunc(s.outboxStats))
	s.handle("GET /v1/outbox/messages/{id}", http.HandlerFunc(s.getMessage))
	s.handle(adminOutboxRoutes[0], s.transactional(s.redriveDead))
	s.handle(adminOutboxRoutes[1], s.transactional(s.discardDead))
}

// Outbox returns the outbox the routes enqueue to, for relays that serve
// it in the same process (serve --relay), or the error of Options.Outbox.
func (s *Server) Outbox() (*outbox.Outbox, error) {
	if s.outboxErr != nil {
		return nil, fmt.Errorf("outbox options: %v", s.outboxErr) // a configuration error, not the client's: 500
	}
	return s.outbox, nil
}

// ReapOutbox deletes every tenant's messages delivered at least the
// outbox's retention ago, and counts them in racefree_reaped_rows_total.
// Serve calls it every minute.
func (s *Server) ReapOutbox(ctx context.Context) (int64, error) {
	o, err := s.Outbox()
	if err != nil {
		return 0, err
	}
	n, err := o.Reap(ctx)
	s.CountReaped("outbox_messages", n)
	return n, err
}

// enqueueRequest is the body of POST /v1/outbox.
type enqueueRequest struct {
	Topic string `json:"topic"`
	Key   string `json:"key"`
	// Payload is any JSON value, delivered as its bytes, as sent (with
	// Content-Type: application/json unless Headers name one).
	Payload json.RawMessage `json:"payload"`
	// PayloadBase64 is a payload of any bytes, in standard base64.
	PayloadBase64 *string           `json:"payload_base64"`
	Headers       map[string]string `json:"headers"`
	DelayMs       *int64            `json:"delay_ms"`
	NotBefore     *string           `json:"not_before"` // RFC 3339
	MaxAttempts   int               `json:"max_attempts"`
	Ordered       bool              `json:"ordered"`
}

// message turns the request into an [outbox.Message], checking what the
// outbox does not (the payload's form, the delay's).
func (req *enqueueRequest) message(now time.Time) (outbox.Message, error) {
	m := outbox.Message{Topic: req.Topic, Key: req.Key, MaxAttempts: req.MaxAttempts, Ordered: req.Ordered}
	switch {
	case req.Payload != nil && req.PayloadBase64 != nil:
		return m, racefree.Invalid("payload", "send payload (a JSON value) or payload_base64 (bytes), not both")
	case req.PayloadBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*req.PayloadBase64)
		if err != nil || strings.ContainsAny(*req.PayloadBase64, "\r\n") { // the decoder would skip line breaks
			return m, racefree.Invalid("payload_base64", "must be standard base64")
		}
		m.Payload = b
	case req.Payload != nil:
		m.Payload = req.Payload
	}
	if len(req.Headers) > 0 || req.Payload != nil {
		m.Headers = make(map[string]string, len(req.Headers)+1)
		for k, v := range req.Headers {
			m.Headers[k] = v
		}
	}
	if req.Payload != nil && !hasHeader(m.Headers, "Content-Type") {
		m.Headers["Content-Type"] = "application/json"
	}
	switch {
	case req.DelayMs != nil && req.NotBefore != nil:
		return m, racefree.Invalid("delay_ms", "send delay_ms or not_before, not both")
	case req.DelayMs != nil:
		if *req.DelayMs < 0 || *req.DelayMs > outbox.MaxDelay.Milliseconds() {
			return m, racefree.Invalid("delay_ms", "must be 0 to %d", outbox.MaxDelay.Milliseconds())
		}
		if *req.DelayMs > 0 {
			m.NotBefore = now.Add(time.Duration(*req.DelayMs) * time.Millisecond)
		}
	case req.NotBefore != nil:
		t, err := time.Parse(time.RFC3339Nano, *req.NotBefore)
		if err != nil {
			return m, racefree.Invalid("not_before", "must be an RFC 3339 time, such as 2030-01-02T15:04:05Z")
		}
		m.NotBefore = t
	}
	return m, nil
}

func hasHeader(h map[string]string, name string) bool {
	for k := range h {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// enqueueMessage enqueues one message in the request's transaction: with
// an Idempotency-Key, the message and the stored answer commit together,
// so a retried request gets the same id back and enqueues nothing more.
func (s *Server) enqueueMessage(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error) {
	o, err := s.Outbox()
	if err != nil {
		return nil, err
	}
	var req enqueueRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	now := time.Now()
	if c := s.db.Clock(); c != nil {
		now = c.Now()
	}
	m, err := req.message(now)
	if err != nil {
		return nil, err
	}
	id, err := o.Enqueue(ctx, exec, m)
	if err != nil {
		return nil, err
	}
	s.metrics.enqueued.Inc()
	return map[string]any{"id": id, "idempotency_key": strconv.FormatInt(id, 10), "topic": m.Topic, "key": m.Key}, nil
}

// storedMessage holds the members a dead letter (GET /v1/outbox/dead) and
// a message read alone (GET /v1/outbox/messages/{id}) share.
type storedMessage struct {
	ID            int64             `json:"id"`
	Topic         string            `json:"topic"`
	Key           string            `json:"key"`
	Ordered       bool              `json:"ordered"`
	Payload       json.RawMessage   `json:"payload,omitempty"`        // when the payload is JSON
	PayloadBase64 string            `json:"payload_base64,omitempty"` // when it is not
	Headers       map[string]string `json:"headers"`
	Attempts      int               `json:"attempts"`
	MaxAttempts   int               `json:"max_attempts"`
	CreatedAt     string            `json:"created_at"`
	LastError     string            `json:"last_error"`
}

func toStoredMessage(r *outbox.Record) storedMessage {
	m := storedMessage{ID: r.ID, Topic: r.Topic, Key: r.Key, Ordered: r.Ordered, Headers: r.Headers, Attempts: r.Attempts,
		MaxAttempts: r.MaxAttempts, CreatedAt: formatTime(r.CreatedAt), LastError: r.LastError}
	if len(r.Payload) > 0 && json.Valid(r.Payload) {
		m.Payload = r.Payload
	} else if len(r.Payload) > 0 {
		m.PayloadBase64 = base64.StdEncoding.EncodeToString(r.Payload)
	}
	return m
}

// deadMessage is one message of GET /v1/outbox/dead.
type deadMessage struct {
	storedMessage
	DiedAt string `json:"died_at"`
}

func toDeadMessage(r *outbox.Record) deadMessage {
	return deadMessage{storedMessage: toStoredMessage(r), DiedAt: formatTime(r.AvailableAt)}
}

// messageJSON is the answer of GET /v1/outbox/messages/{id}: [outbox.Record]
// with its failure history.
type messageJSON struct {
	storedMessage
	State       string        `json:"state"`
	AvailableAt string        `json:"available_at"`
	Fence       int64         `json:"fence"`
	LeasedBy    string        `json:"leased_by"`
	History     []attemptJSON `json:"history"`
}

// attemptJSON is one failed tenure of a message: [outbox.Attempt].
type attemptJSON struct {
	Fence   int64  `json:"fence"`
	Attempt int    `json:"attempt"`
	Worker  string `json:"worker"`
	At      string `json:"at"`
	Outcome string `json:"outcome"`
	Error   string `json:"error"`
}

// getMessage answers the request's tenant's message id in any state, with
// its failure history, as [outbox.Outbox.Get]: 404 for an id that is not the
// tenant's, or was reaped or discarded.
func (s *Server) getMessage(w http.ResponseWriter, r *http.Request) {
	id, err := deadID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	o, err := s.Outbox()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var rec *outbox.Record
	err = s.reading(r.Context(), func(ctx context.Context, exec racefree.Executor) (err error) {
		rec, err = o.Get(ctx, exec, id)
		return err
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	m := messageJSON{storedMessage: toStoredMessage(rec), State: string(rec.State), AvailableAt: formatTime(rec.AvailableAt),
		Fence: rec.Fence, LeasedBy: rec.LeasedBy, History: []attemptJSON{}}
	for _, a := range rec.History {
		m.History = append(m.History, attemptJSON{Fence: a.Fence, Attempt: a.Attempt, Worker: a.Worker, At: formatTime(a.At), Outcome: a.Outcome, Error: a.Error})
	}
	writeJSON(w, http.StatusOK, m)
}

// listDead answers the request's tenant's dead messages, by id, filtered
// by topic and key, a page at a time (?after=<next>&limit=): at most limit
// of them and MaxPageBytes of JSON.
// deadChunk is how many dead letters listDead reads at once: 16 payloads
// of outbox.MaxPayloadBytes at most in memory beside the page.
const deadChunk = 16

func (s *Server) listDead(w http.ResponseWriter, r *http.Request) {
	o, err := s.Outbox()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	f := outbox.Filter{Topic: q.Get("topic"), Key: q.Get("key")}
	after, limit, ok := page(w, q, outbox.MaxPage)
	if !ok {
		return
	}
	if limit < 1 || limit > outbox.MaxPage {
		// Read in chunks below, the page's own limit must be judged whole.
		s.writeError(w, r, racefree.Invalid("limit", "must be 1 to %d", outbox.MaxPage))
		return
	}
	// next: pass as after; unchanged when there was nothing more. A page
	// stops at MaxPageBytes of JSON, so a short one is not the end. The
	// rows are read deadChunk at a time, each read after the last id of
	// the one before, so that the server holds at most deadChunk payloads
	// (each up to outbox.MaxPayloadBytes) beside the page, not limit.
	out := newJSONPage("messages", after)
	for cursor, left := after, limit; left > 0; {
		n := min(left, deadChunk)
		var rs []*outbox.Record
		err = s.reading(r.Context(), func(ctx context.Context, exec racefree.Executor) (err error) {
			rs, err = o.Dead(ctx, exec, f, cursor, n)
			return err
		})
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		for _, rec := range rs {
			ok, err := out.add(toDeadMessage(rec), rec.ID)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			if !ok {
				writeJSON(w, http.StatusOK, out)
				return
			}
		}
		if len(rs) < n {
			break
		}
		cursor, left = rs[len(rs)-1].ID, left-n
	}
	writeJSON(w, http.StatusOK, out)
}

// outboxStats answers the request's tenant's figures.
func (s *Server) outboxStats(w http.ResponseWriter, r *http.Request) {
	o, err := s.Outbox()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var st *outbox.Stats
	err = s.reading(r.Context(), func(ctx context.Context, exec racefree.Executor) (err error) {
		st, err = o.Stats(ctx, exec)
		return err
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int64{
		"backlog": st.Ready + st.Leased, "ready": st.Ready, "due": st.Due, "leased": st.Leased,
		"oldest_pending_ms": st.OldestPending.Milliseconds(), "dead": st.Dead, "delivered": st.Delivered,
	})
}

// deadID returns the path's message id (of a dead letter, or of any message).
func deadID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return 0, racefree.Invalid("id", "must be a message id (a positive integer)")
	}
	return id, nil
}

// errNotDead answers a redrive or discard of a message that is not dead
// (or not the tenant's): 404, nothing changed.
var errNotDead = fmt.Errorf("no dead message with this id: %w", racefree.ErrNotFound)

// redriveDead makes the path's dead message due again at once, with a
// fresh set of attempts, in the request's transaction.
func (s *Server) redriveDead(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error) {
	return s.repairDead(ctx, exec, r, body, "ready", func(o *outbox.Outbox) func(context.Context, racefree.Executor, outbox.Filter) ([]int64, error) {
		return o.Redrive
	})
}

// discardDead deletes the path's dead message and its history, in the
// request's transaction.
func (s *Server) discardDead(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error) {
	return s.repairDead(ctx, exec, r, body, "discarded", func(o *outbox.Outbox) func(context.Context, racefree.Executor, outbox.Filter) ([]int64, error) {
		return o.Discard
	})
}

func (s *Server) repairDead(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte, state string,
	op func(*outbox.Outbox) func(context.Context, racefree.Executor, outbox.Filter) ([]int64, error)) (any, error) {
	id, err := deadID(r)
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := decode(body, &struct{}{}); err != nil {
			return nil, err
		}
	}
	o, err := s.Outbox()
	if err != nil {
		return nil, err
	}
	ids, err := op(o)(ctx, exec, outbox.Filter{IDs: []int64{id}})
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, errNotDead
	}
	return map[string]any{"id": id, "state": state}, nil
}
