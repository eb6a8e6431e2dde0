package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/problem"
	"github.com/racefree/racefree/internal/text"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/seq"
)

// Problem represents an RFC 9457 problem details document.
type Problem = problem.Problem

// ProblemType returns the stable type URI for name.
func ProblemType(name string) string { return problem.Type(name) }

func writeProblem(w http.ResponseWriter, p Problem) { problem.Write(w, p) }

func badRequest(w http.ResponseWriter, detail string) {
	writeProblem(w, problem.InvalidInput.New(detail))
}

// problemFor is the one mapping from an error to the problem every route
// answers with. Errors the client can act on keep their message; a
// database outage or a busy database is 503 (Retry-After, the outcome of a
// write is unknown: retry it with the same Idempotency-Key); anything else
// is a 500 whose detail says nothing about internals, and is logged.
func (s *Server) problemFor(r *http.Request, err error) Problem {
	// A primitive that returned a driver's error as it came is mapped here,
	// by the engine's one interpretation.
	err = s.db.InterpretError(err)
	var (
		ie   *racefree.InputError
		held *claim.HeldError
		sf   *claim.StaleFenceError
		mbe  *http.MaxBytesError
		tr   *tokenRefusedError
		qe   *quota.ExceededError
	)
	switch {
	case errors.As(err, &tr):
		return tokenProblem(tr)
	case isMediaType(err):
		return problem.UnsupportedMediaType.New(err.Error())
	case errors.As(err, &mbe):
		return problem.TooLarge.New("the request body is limited to " + strconv.FormatInt(mbe.Limit, 10) + " bytes")
	case errors.As(err, &ie):
		return problem.InvalidInput.New(ie.Error())
	case errors.As(err, &held):
		p := problem.Held.New(held.Error())
		p.Extra = map[string]any{"holder": held.Claim.Holder, "fence": held.Claim.Fence, "expires_at": formatTime(held.Claim.ExpiresAt)}
		return p
	case errors.As(err, &qe):
		p := problem.QuotaExceeded.New(qe.Error())
		p.Extra = map[string]any{"retry_after_ms": qe.Decision.RetryAfter.Milliseconds(), "remaining": qe.Decision.Remaining,
			"reset_at": formatTime(qe.Decision.ResetAt)}
		return p
	case errors.Is(err, racefree.ErrNotFound):
		return problem.NotFound.New("")
	case errors.Is(err, audit.ErrUnknownKey), errors.Is(err, audit.ErrNoSigner):
		s.log.ErrorContext(r.Context(), "audit keyring incomplete", "method", r.Method, "path", r.URL.Path, "err", err)
		return problem.AuditKeyMissing.New(err.Error()) // key ids only, never key material
	case errors.Is(err, racefree.ErrStaleFence):
		p := problem.StaleFence.New(err.Error())
		if errors.As(err, &sf) {
			p.Extra = map[string]any{"fence": sf.Fence, "current_fence": sf.Current}
		}
		return p
	case errors.Is(err, racefree.ErrNotHeld):
		return problem.NotHeld.New(err.Error())
	case errors.Is(err, racefree.ErrInProgress):
		return problem.InProgress.New("a request with this Idempotency-Key is still being processed; retry later")
	case errors.Is(err, seq.ErrExhausted):
		return problem.SequenceExhausted.New(err.Error())
	case errors.Is(err, racefree.ErrMismatch):
		return problem.KeyMismatch.New("this Idempotency-Key was used with a different request")
	case errors.Is(err, racefree.ErrSchemaOutdated), errors.Is(err, racefree.ErrSchemaTooNew):
		return problem.Schema.New(err.Error())
	case errors.Is(err, racefree.ErrReadOnly):
		s.log.WarnContext(r.Context(), "request not served: the database is read-only", "method", r.Method, "path", r.URL.Path, "err", err)
		return problem.ReadOnly.New("the database node this server reaches accepts no writes (a standby, or read-only transactions); nothing was written: retry (with the same Idempotency-Key for a POST) once the primary is reachable")
	case errors.Is(err, racefree.ErrUnavailable), errors.Is(err, racefree.ErrRetryable), errors.Is(err, context.DeadlineExceeded),
		errors.Is(r.Context().Err(), context.DeadlineExceeded):
		s.log.WarnContext(r.Context(), "request not served: database unavailable or busy", "method", r.Method, "path", r.URL.Path, "err", err)
		return problem.Unavailable.New("the database is unavailable or busy; retry (with the same Idempotency-Key for a POST)")
	}
	if r.Context().Err() == nil {
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	return problem.Internal.New("")
}

// writeError answers err with its problem, and the headers err carries
// (a headerError's).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	setHeader(w, headerOf(nil, err))
	var ipe *idempotency.InProgressError
	if errors.As(err, &ipe) {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(ipe.RetryAfter.Seconds()))))
	}
	var qe *quota.ExceededError
	if errors.As(err, &qe) {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(qe.Decision.RetryAfter.Seconds())))))
	}
	writeProblem(w, s.problemFor(r, err))
}

// maxBody bounds every JSON request body; a larger one is 413.
const maxBody = 1 << 20

// readBody reads r's body, at most maxBody bytes; a larger body returns an
// *http.MaxBytesError.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if mbe := (*http.MaxBytesError)(nil); err != nil && !errors.As(err, &mbe) {
		return nil, racefree.Invalid("request body", "could not be read: it was sent too slowly or cut short")
	}
	return body, err
}

// decode reads one JSON object from body into v, refusing unknown fields
// and trailing data. Its errors are *racefree.InputError naming the field
// and what was expected, never a Go type.
func decode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if dec.Decode(new(json.RawMessage)) != io.EOF {
			return racefree.Invalid("request body", "has data after the JSON object")
		}
		return nil
	}
	var (
		se *json.SyntaxError
		te *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		return racefree.Invalid("request body", "is empty: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return racefree.Invalid("request body", "is not valid JSON: it ends too early")
	case errors.As(err, &se):
		return racefree.Invalid("request body", "is not valid JSON (at byte %d)", se.Offset)
	case errors.As(err, &te) && te.Field == "":
		return racefree.Invalid("request body", "must be a JSON object, got %s", te.Value)
	case errors.As(err, &te):
		return racefree.Invalid(te.Field, "must be %s, got %s", jsonKind(te.Type), te.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return racefree.Invalid(strings.Trim(name, `"`), "is not a field of this request")
	}
	return racefree.Invalid("request body", "is not a valid request")
}

// jsonKind says, in JSON's words, what a Go type accepts.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// noNUL refuses text with a NUL byte on every engine: SQLite would store
// it and PostgreSQL refuse it. The libraries refuse it too, by the same
// check (racefree.CheckText).
func noNUL(field, value string) error {
	if text.HasNUL(value) {
		return racefree.Invalid(field, "must not contain a NUL byte")
	}
	return nil
}

// positiveFence refuses a fence that no tenure was ever given, as the
// claim and dedup libraries do (claim.ValidateFence), before either runs.
func positiveFence(fence *int64) error {
	if fence == nil {
		return racefree.Invalid("fence", "is required")
	}
	return claim.ValidateFence(*fence)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
