package inbox

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/problem"
)

// DefaultMaxBody bounds a delivery's body when Handler.MaxBody is zero.
const DefaultMaxBody = 1 << 20

// Delivery represents a verified delivery, as Handler.Process sees it.
type Delivery struct {
	Source  string
	ID      string // webhook-id
	Payload []byte // the body, as signed
}

// Handler receives Standard Webhooks deliveries of one source over HTTP.
//
// For each request it reads the body (at most MaxBody bytes, else 413),
// verifies the signature (else 401, with a WWW-Authenticate challenge of
// the scheme Standard-Webhooks), and only then hands the delivery to
// Inbox.Receive, with Process as the processing function. It answers 204
// No Content for a new delivery, a duplicate, and a permanent failure (the
// sender must stop retrying), 400 for an event ID the inbox refuses, 503
// when the database reported a transient conflict or an outage (503
// read-only on a node that accepts no writes), and 500 for any other
// failure, including a transient one of Process, so that the sender
// retries. Errors are application/problem+json documents (RFC 9457).
type Handler struct {
	Inbox    *Inbox
	Source   string
	Verifier *Verifier
	// Process is called with the delivery inside its transaction when the
	// event is new. Mark errors retrying cannot fix with Permanent. Defaults
	// to nil: the event is only recorded, to be read with List.
	Process func(ctx context.Context, tx *sql.Tx, d Delivery) error
	// MaxBody bounds the body in bytes. Defaults to DefaultMaxBody, 1 MiB.
	MaxBody int64
	// Logger receives the failures answered with 5xx. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// ServeHTTP handles one delivery.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed", "deliveries are POSTed")
		return
	}
	limit := h.MaxBody
	if limit <= 0 {
		limit = DefaultMaxBody
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			writeProblem(w, http.StatusRequestEntityTooLarge, "too-large", "Request body too large", err.Error())
			return
		}
		writeProblem(w, http.StatusBadRequest, "invalid-input", "Invalid input", "reading the body: "+err.Error())
		return
	}
	id, err := h.Verifier.Verify(r.Header, body)
	if err != nil {
		// RFC 9110 §11.6.1: a 401 carries a challenge.
		w.Header().Set("WWW-Authenticate", `Standard-Webhooks realm="`+quoted(h.Source)+`"`)
		writeProblem(w, http.StatusUnauthorized, "bad-signature", "Bad webhook signature", err.Error())
		return
	}
	d := Delivery{Source: h.Source, ID: id, Payload: body}
	var fn func(tx *sql.Tx) error
	if h.Process != nil {
		fn = func(tx *sql.Tx) error { return h.Process(r.Context(), tx, d) }
	}
	_, err = h.Inbox.Receive(r.Context(), h.Source, id, body, fn)
	var ie *racefree.InputError
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.As(err, &ie):
		writeProblem(w, http.StatusBadRequest, "invalid-input", "Invalid input", ie.Error())
	case errors.Is(err, racefree.ErrNotDurable):
		h.log().WarnContext(r.Context(), "inbox delivery not stored: no synchronous standby would wait for its commit", "source", h.Source, "id", id, "err", err)
		writeProblem(w, http.StatusServiceUnavailable, "not-durable", "No synchronous standby", "no synchronous standby would wait for the commit; the delivery was not stored: retry")
	case errors.Is(err, racefree.ErrReadOnly):
		h.log().WarnContext(r.Context(), "inbox delivery not stored: the database is read-only", "source", h.Source, "id", id, "err", err)
		writeProblem(w, http.StatusServiceUnavailable, "read-only", "Database is read-only", "the database node reached accepts no writes; the delivery was not stored: retry")
	case errors.Is(err, racefree.ErrRetryable), errors.Is(err, racefree.ErrUnavailable):
		h.log().WarnContext(r.Context(), "inbox delivery not stored: retry", "source", h.Source, "id", id, "err", err)
		writeProblem(w, http.StatusServiceUnavailable, "retry", "Busy, retry later", "")
	default:
		h.log().ErrorContext(r.Context(), "inbox delivery failed: the sender will retry", "source", h.Source, "id", id, "err", err)
		writeProblem(w, http.StatusInternalServerError, "internal", "Internal error", "")
	}
}

// quoted escapes s for the inside of an RFC 9110 quoted-string.
func quoted(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
}

func (h *Handler) log() *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return slog.Default()
}

func writeProblem(w http.ResponseWriter, status int, name, title, detail string) {
	problem.Write(w, problem.New(status, name, title, detail))
}
