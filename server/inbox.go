package server

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/problem"
)

// inboxPost is the route webhook senders POST to. It is authenticated by
// the delivery's signature, not by Options.Token, which senders do not have.
const inboxPost = "POST /v1/inbox/{source}"

// inboxRoutes serves the webhook inboxes of the configured sources.
type inboxRoutes struct {
	in       *inbox.Inbox
	handlers map[string]*inbox.Handler // by source
	err      error                     // a configuration error, answered with 500
}

var sourceName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)

// ParseInboxSecrets parses "source=whsec_…" pairs, as given to
// --inbox-secret or, comma-separated, in RACEFREE_INBOX_SECRETS, into the
// secrets of each source. A source may appear several times: all its
// secrets are accepted, for rotation. Source names are 1 to 100 of
// A-Z a-z 0-9 . _ -, and every secret must be a valid Standard Webhooks
// secret.
func ParseInboxSecrets(pairs []string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, p := range pairs {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		source, secret, ok := strings.Cut(p, "=")
		if !ok || !sourceName.MatchString(source) {
			return nil, racefree.Invalid("inbox secret", "want source=whsec_…, with a source of 1 to 100 letters, digits, '.', '_' or '-'")
		}
		if _, err := inbox.NewVerifier([]string{secret}, nil); err != nil {
			return nil, fmt.Errorf("inbox secret of %s: %w", source, err)
		}
		out[source] = append(out[source], secret)
	}
	return out, nil
}

func (s *Server) inboxRoutes() {
	s.inbox = &inboxRoutes{handlers: map[string]*inbox.Handler{}}
	s.inbox.in, s.inbox.err = inbox.New(s.db, &inbox.Options{Retention: s.opts.InboxRetention})
	for source, secrets := range s.opts.InboxSecrets {
		v, err := inbox.NewVerifier(secrets, nil)
		if err != nil || !sourceName.MatchString(source) {
			s.inbox.err = fmt.Errorf("inbox source %q: %v", source, err)
			continue
		}
		s.inbox.handlers[source] = &inbox.Handler{Inbox: s.inbox.in, Source: source, Verifier: v, MaxBody: s.opts.InboxMaxBody, Logger: s.log,
			Process: markNew}
	}
	s.mux.HandleFunc(inboxPost, s.inboxReceive)
	s.mux.HandleFunc("GET /v1/inbox/{source}", s.inboxList)
}

// signedRoute reports whether r goes to a route that authenticates itself.
func signedRoute(pattern string) bool { return pattern == inboxPost }

// inboxHandler returns the source's handler, or writes the problem.
func (s *Server) inboxHandler(w http.ResponseWriter, r *http.Request) *inbox.Handler {
	if s.inbox.err != nil {
		s.writeError(w, r, s.inbox.err)
		return nil
	}
	source := r.PathValue("source")
	h := s.inbox.handlers[source]
	if h == nil {
		writeProblem(w, problem.UnknownSource.New(fmt.Sprintf("no inbox secret is configured for source %q", source)))
	}
	return h
}

func (s *Server) inboxReceive(w http.ResponseWriter, r *http.Request) {
	h := s.inboxHandler(w, r)
	if h == nil {
		return
	}
	if err := noNUL("webhook-id", r.Header.Get("webhook-id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	isNew := new(bool)
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	h.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), newDeliveryKey{}, isNew)))
	outcome := "new"
	switch {
	case rec.status >= 500:
		outcome = "failed"
	case rec.status >= 400:
		outcome = "rejected"
	case !*isNew:
		outcome = "duplicate"
	}
	s.metrics.inbox.WithLabelValues(h.Source, outcome).Inc()
}

// newDeliveryKey is the context key of the flag that markNew sets.
type newDeliveryKey struct{}

// markNew is the inbox's processing function: the inbox calls it only for
// a delivery it has not seen, so the server can count duplicates.
func markNew(ctx context.Context, _ *sql.Tx, _ inbox.Delivery) error {
	if p, ok := ctx.Value(newDeliveryKey{}).(*bool); ok {
		*p = true
	}
	return nil
}

// inboxEvent is one event of GET /v1/inbox/{source}.
type inboxEvent struct {
	Seq        int64  `json:"seq"`
	ID         string `json:"id"`
	Status     string `json:"status"`
	Reason     string `json:"reason,omitempty"`
	ReceivedAt string `json:"received_at"` // RFC 3339, milliseconds, UTC
	Payload    any    `json:"payload"`     // the JSON body, or a string when it is not JSON
}

func (s *Server) inboxList(w http.ResponseWriter, r *http.Request) {
	h := s.inboxHandler(w, r)
	if h == nil {
		return
	}
	q := r.URL.Query()
	after, limit := int64(0), 100
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			badRequest(w, "after must be a cursor returned as next")
			return
		}
		after = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			badRequest(w, fmt.Sprintf("limit must be an integer between 1 and %d", inbox.MaxListLimit))
			return
		}
		limit = n
	}
	evs, err := s.inbox.in.List(r.Context(), h.Source, after, limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := struct {
		Events []inboxEvent `json:"events"`
		Next   string       `json:"next"` // pass as after; unchanged when there was nothing new
	}{Events: []inboxEvent{}, Next: strconv.FormatInt(after, 10)}
	for _, e := range evs {
		ev := inboxEvent{Seq: e.Seq, ID: e.ID, Status: e.Status, Reason: e.Reason,
			ReceivedAt: e.ReceivedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"), Payload: string(e.Payload)}
		if json.Valid(e.Payload) {
			ev.Payload = json.RawMessage(e.Payload)
		}
		out.Events = append(out.Events, ev)
		out.Next = strconv.FormatInt(e.Seq, 10)
	}
	writeJSON(w, http.StatusOK, out)
}

// InboxSources returns the configured sources, sorted.
func (s *Server) InboxSources() []string {
	out := make([]string, 0, len(s.inbox.handlers))
	for k := range s.inbox.handlers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
