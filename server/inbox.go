package server

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/problem"
	"github.com/racefree/racefree/tenant"
)

// inboxPost is the route webhook senders POST to. It is authenticated by
// the delivery's signature, not by an API key, which senders do not have;
// the secret that verifies the signature names the tenant.
const inboxPost = "POST /v1/inbox/{source}"

// inboxRoutes serves the webhook inboxes of the configured sources.
type inboxRoutes struct {
	in       *inbox.Inbox
	handlers map[string][]*inbox.Handler // by source, one per tenant that configured it
	tenants  map[*inbox.Handler]string   // each handler's tenant
	err      error                       // a configuration error, answered with 500
}

// sourceName is a source's name: 1 to 100 of A-Z a-z 0-9 . _ -, other than
// "." and "..", which no path can carry (cleanPath).
var sourceName = regexp.MustCompile(`^(?:[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}|\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,98}|\.\.[A-Za-z0-9._-]{1,98})$`)

// ParseInboxSecrets parses "[tenant/]source=whsec_…" pairs, as given to
// --inbox-secret or, comma-separated, in RACEFREE_INBOX_SECRETS, into the
// secrets of each source, keyed as Options.InboxSecrets wants: "source"
// for the default tenant, "tenant/source" for another. A source may appear
// several times: all its secrets are accepted, for rotation. Source names
// are 1 to 100 of A-Z a-z 0-9 . _ -, tenants valid tenant ids, and every
// secret must be a valid Standard Webhooks secret that no other tenant
// uses for the same source (the secret that verifies a delivery names its
// tenant).
func ParseInboxSecrets(pairs []string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, p := range pairs {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		name, secret, ok := strings.Cut(p, "=")
		if !ok {
			return nil, racefree.Invalid("inbox secret", "want [tenant/]source=whsec_…, with a source of 1 to 100 letters, digits, '.', '_' or '-'")
		}
		key, _, _, err := inboxKey(name)
		if err != nil {
			return nil, err
		}
		if _, err := inbox.NewVerifier([]string{secret}, nil); err != nil {
			return nil, fmt.Errorf("inbox secret of %s: %w", name, err)
		}
		out[key] = append(out[key], secret)
	}
	if err := sharedSecrets(out); err != nil {
		return nil, err
	}
	return out, nil
}

// inboxKey parses "[tenant/]source" into its canonical key ("source" for
// the default tenant), the tenant and the source.
func inboxKey(name string) (key, tenantID, source string, err error) {
	tenantID, source, ok := strings.Cut(name, "/")
	if !ok {
		tenantID, source = tenant.Default, name
	}
	if !sourceName.MatchString(source) {
		return "", "", "", racefree.Invalid("inbox secret", "want [tenant/]source=whsec_…, with a source of 1 to 100 letters, digits, '.', '_' or '-'")
	}
	if err := tenant.Check(tenantID); err != nil {
		return "", "", "", fmt.Errorf("inbox secret of %s: %w", name, err)
	}
	if tenantID == tenant.Default {
		return source, tenantID, source, nil
	}
	return tenantID + "/" + source, tenantID, source, nil
}

// sharedSecrets refuses a secret that two tenants use for one source: a
// delivery signed with it could not say whose it is.
func sharedSecrets(secrets map[string][]string) error {
	owner := map[[2]string]string{} // (source, secret) -> key
	for key, list := range secrets {
		_, _, source, err := inboxKey(key)
		if err != nil {
			return err
		}
		for _, secret := range list {
			k := [2]string{source, strings.TrimPrefix(secret, "whsec_")}
			if other, ok := owner[k]; ok && other != key {
				return racefree.Invalid("inbox secret", "%s and %s share a secret: each tenant needs its own, since the secret names the tenant of a delivery", other, key)
			}
			owner[k] = key
		}
	}
	return nil
}

func (s *Server) inboxRoutes() {
	s.inbox = &inboxRoutes{handlers: map[string][]*inbox.Handler{}, tenants: map[*inbox.Handler]string{}}
	s.inbox.in, s.inbox.err = inbox.New(s.db, &inbox.Options{Retention: s.opts.InboxRetention})
	if s.opts.InboxMaxBody > MaxInboxBody {
		s.inbox.err = fmt.Errorf("server: InboxMaxBody %d is over MaxInboxBody (%d): a body that large could not be listed in a reply clients read", s.opts.InboxMaxBody, MaxInboxBody)
	}
	if err := sharedSecrets(s.opts.InboxSecrets); err != nil {
		s.inbox.err = err
	}
	for _, key := range slices.Sorted(maps.Keys(s.opts.InboxSecrets)) {
		_, tenantID, source, err := inboxKey(key)
		if err != nil {
			s.inbox.err = fmt.Errorf("inbox source %q: %v", key, err)
			continue
		}
		v, err := inbox.NewVerifier(s.opts.InboxSecrets[key], nil)
		if err != nil {
			s.inbox.err = fmt.Errorf("inbox source %q: %v", key, err)
			continue
		}
		h := &inbox.Handler{Inbox: s.inbox.in, Source: source, Verifier: v, MaxBody: s.opts.InboxMaxBody, Logger: s.log,
			Process: markNew}
		s.inbox.handlers[source] = append(s.inbox.handlers[source], h)
		s.inbox.tenants[h] = tenantID
	}
	s.handle(inboxPost, http.HandlerFunc(s.inboxReceive))
	s.handle("GET /v1/inbox/{source}", http.HandlerFunc(s.inboxList))
}

// signedRoute reports whether r goes to a route that authenticates itself.
func signedRoute(pattern string) bool { return pattern == inboxPost }

// validSource answers 400 itself, and reports false, when the path's source
// is not a source name (sourceName), which no configuration can hold.
func (s *Server) validSource(w http.ResponseWriter, r *http.Request) bool {
	if !sourceName.MatchString(r.PathValue("source")) {
		badRequest(w, "source must be 1 to 100 letters, digits, '.', '_' or '-'")
		return false
	}
	return true
}

// inboxHandler returns the handler of the path's source for the
// request's tenant, or writes the problem.
func (s *Server) inboxHandler(w http.ResponseWriter, r *http.Request) *inbox.Handler {
	if !s.validSource(w, r) {
		return nil
	}
	if s.inbox.err != nil {
		s.writeError(w, r, s.inbox.err)
		return nil
	}
	source, id := r.PathValue("source"), tenant.From(r.Context())
	for _, h := range s.inbox.handlers[source] {
		if s.inbox.tenants[h] == id {
			return h
		}
	}
	writeProblem(w, problem.UnknownSource.New(fmt.Sprintf("no inbox secret is configured for source %q", source)))
	return nil
}

// signer returns the handler of the path's source whose secret verifies
// the delivery, and so its tenant: the one handler when one tenant
// configured the source, else the one that verifies (or the first, which
// answers 401). It leaves r's body readable again.
func (s *Server) signer(w http.ResponseWriter, r *http.Request) *inbox.Handler {
	if !s.validSource(w, r) {
		return nil
	}
	if s.inbox.err != nil {
		s.writeError(w, r, s.inbox.err)
		return nil
	}
	source := r.PathValue("source")
	hs := s.inbox.handlers[source]
	switch len(hs) {
	case 0:
		writeProblem(w, problem.UnknownSource.New(fmt.Sprintf("no inbox secret is configured for source %q", source)))
		return nil
	case 1:
		return hs[0]
	}
	limit := hs[0].MaxBody
	if limit <= 0 {
		limit = inbox.DefaultMaxBody
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		body = nil // the handler answers the short body
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	for _, h := range hs {
		if _, err := h.Verifier.Verify(r.Header, body); err == nil {
			return h
		}
	}
	return hs[0]
}

func (s *Server) inboxReceive(w http.ResponseWriter, r *http.Request) {
	h := s.signer(w, r)
	if h == nil {
		return
	}
	if err := noNUL("webhook-id", r.Header.Get("webhook-id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, err := tenant.With(r.Context(), s.inbox.tenants[h])
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	isNew := new(bool)
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	h.ServeHTTP(rec, r.WithContext(context.WithValue(ctx, newDeliveryKey{}, isNew)))
	outcome := "new"
	switch {
	case rec.status >= 500:
		outcome = "failed"
	case rec.status >= 400:
		outcome = "rejected"
	case !*isNew:
		outcome = "duplicate"
	}
	s.metrics.inbox.WithLabelValues(h.Source, outcome).Inc() // the source, never the tenant
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
	after, limit, ok := page(w, q, inbox.MaxListLimit)
	if !ok {
		return
	}
	evs, err := s.inbox.in.List(r.Context(), h.Source, after, limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// next: pass as after; unchanged when there was nothing new. A page
	// stops at MaxPageBytes of JSON (a body that is not JSON is a string,
	// up to six times its bytes), so a short one is not the end.
	out := newJSONPage("events", after)
	for _, e := range evs {
		ev := inboxEvent{Seq: e.Seq, ID: e.ID, Status: e.Status, Reason: e.Reason,
			ReceivedAt: e.ReceivedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"), Payload: string(e.Payload)}
		if json.Valid(e.Payload) {
			ev.Payload = json.RawMessage(e.Payload)
		}
		ok, err := out.add(ev, e.Seq)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if !ok {
			break
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// InboxSources returns the configured sources, sorted: "source" for the
// default tenant's, "tenant/source" for another's.
func (s *Server) InboxSources() []string {
	var out []string
	for h, id := range s.inbox.tenants {
		if id == tenant.Default {
			out = append(out, h.Source)
		} else {
			out = append(out, id+"/"+h.Source)
		}
	}
	sort.Strings(out)
	return out
}

// page reads a list route's cursor query (after, a cursor returned as
// next; limit, default 100) and answers 400 itself when one is not a
// number; ok is false then. The range of limit, 1 to max, is the
// listing's own to refuse; max only names it in the message.
func page(w http.ResponseWriter, q url.Values, max int) (after int64, limit int, ok bool) {
	after, limit = 0, 100
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			badRequest(w, "after must be a cursor returned as next")
			return 0, 0, false
		}
		after = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			badRequest(w, fmt.Sprintf("limit must be an integer between 1 and %d", max))
			return 0, 0, false
		}
		limit = n
	}
	return after, limit, true
}
