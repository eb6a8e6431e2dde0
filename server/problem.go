package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/problem"
	"github.com/racefree/racefree/internal/text"
	"github.com/racefree/racefree/internal/wire"
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
	err = wire.Of(s.db).InterpretError(err)
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
		return problem.NotFound.New(notFoundDetail(r))
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
	case errors.Is(err, racefree.ErrNotDurable):
		s.log.WarnContext(r.Context(), "request not served: no synchronous standby would wait for its commit", "method", r.Method, "path", r.URL.Path, "err", err)
		return problem.NotDurable.New("this server requires synchronous replication (--require-synchronous-replication) and no synchronous standby would wait for the commit; nothing was written: retry (with the same Idempotency-Key for a POST) once one streams")
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

// notFoundDetail says what r asked for and the tenant does not have, in
// the words of the route: every 404 names what was not found.
func notFoundDetail(r *http.Request) string {
	switch r.Pattern {
	case "GET /v1/claims/{key}", "POST /v1/claims/{key}/renew", "DELETE /v1/claims/{key}":
		return fmt.Sprintf("no claim on key %q: never acquired, or reaped after it lapsed", r.PathValue("key"))
	case "GET /v1/events/{fingerprint}", "POST /v1/events/{fingerprint}/result":
		return fmt.Sprintf("no event with fingerprint %q: never observed, or reaped after its window", r.PathValue("fingerprint"))
	case "GET /v1/audit/checkpoints/latest":
		return fmt.Sprintf("no checkpoint of audit scope %q", r.URL.Query().Get("scope"))
	case "GET /v1/outbox/messages/{id}":
		return fmt.Sprintf("no outbox message %s: never enqueued, delivered and reaped, discarded, or another tenant's", r.PathValue("id"))
	case "POST /v1/outbox/dead/{id}/redrive", "POST /v1/outbox/dead/{id}/discard":
		return fmt.Sprintf("no dead outbox message %s: never dead, redriven or discarded already, or another tenant's", r.PathValue("id"))
	}
	return "not found: " + r.Method + " " + r.URL.Path
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

// mediaTypeError refuses a request body that is not JSON (415).
type mediaTypeError struct{ got string }

func (e *mediaTypeError) Error() string {
	return fmt.Sprintf("the request body must be JSON (Content-Type: application/json), not %q", e.got)
}

// jsonBody refuses a Content-Type other than application/json or a +json
// type (415), on every route that takes a JSON body (serveOperation), even
// an empty one, so that every route answers alike: a form or a text/plain
// body is a client's mistake, and it is what a browser sends cross-origin
// without a CORS preflight. A request without a Content-Type is taken as
// JSON.
func jsonBody(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" || ct == "application/json" {
		return nil // what clients send: nothing to parse
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return &mediaTypeError{got: ct}
	}
	return nil
}

// isMediaType reports whether err refuses the body's media type.
func isMediaType(err error) bool {
	var mt *mediaTypeError
	return errors.As(err, &mt)
}

// decode reads one JSON object from body into v, refusing unknown fields
// and trailing data. Its errors are *racefree.InputError naming the field
// and what was expected, never a Go type. A flat body of a flat request
// type takes decodeFlat's short path; every other body, and every body it
// refuses, decodeStrict's.
func decode(body []byte, v any) error {
	if decodeFlat(body, v) {
		return nil
	}
	return decodeStrict(body, v)
}

// decodeStrict is decode through encoding/json, with exactMembers.
func decodeStrict(body []byte, v any) error {
	if string(bytes.TrimSpace(body)) == "null" {
		return racefree.Invalid("request body", "must be a JSON object, got null")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if dec.Decode(new(json.RawMessage)) != io.EOF {
			return racefree.Invalid("request body", "has data after the JSON object")
		}
		return exactMembers(body, reflect.TypeOf(v), "")
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
// check ([racefree.CheckText]).
func noNUL(field, value string) error {
	if text.HasNUL(value) {
		return racefree.Invalid(field, "must not contain a NUL byte")
	}
	return nil
}

// positiveFence refuses a fence that no tenure was ever given, as the
// claim and dedup libraries do ([claim.ValidateFence]), before either runs.
func positiveFence(fence *int64) error {
	if fence == nil {
		return racefree.Invalid("fence", "is required")
	}
	return claim.ValidateFence(*fence)
}

// writeJSON answers v as JSON, as a json.Encoder writes it (HTML
// characters escaped, a newline after it); an answer that writes itself
// (jsonAppender) does so in one write, without reflection.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	if a, ok := v.(jsonAppender); ok {
		_, _ = w.Write(append(a.appendJSON(make([]byte, 0, 320)), '\n'))
		return
	}
	_ = json.NewEncoder(w).Encode(v)
}

// jsonContentType is the Content-Type of every JSON answer, one slice for
// all: net/http copies a response's headers when it writes them, and no
// handler changes a value in place.
var jsonContentType = []string{"application/json"}

// jsonAppender is an answer that appends its JSON to a buffer, byte for
// byte as encoding/json would write it.
type jsonAppender interface{ appendJSON(b []byte) []byte }

// appendJSONString appends s as encoding/json writes a string: as it is
// when every byte is printable ASCII other than ", \\, <, > and &; through
// encoding/json otherwise.
func appendJSONString(b []byte, s string) []byte {
	if plainJSON(s) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// plainJSON reports whether encoding/json writes s as it is, between
// quotes: every byte printable ASCII, none escaped (", \\ and, as HTML,
// <, > and &).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// appendJSONTime appends t as formatTime's string: in timeFormat, or ""
// for the zero time. Either is plain ASCII.
func appendJSONTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	if !t.IsZero() {
		b = t.UTC().AppendFormat(b, timeFormat)
	}
	return append(b, '"')
}

// rawMessage is the type of a field that takes any JSON value, null too.
var rawMessage = reflect.TypeFor[json.RawMessage]()

// exactMembers refuses what encoding/json lets through but the request's
// schema does not: a member named in another case than its field's json
// name ("Holder" for holder), and a null member, which Go would take for
// an absent one, unless its field takes any JSON value. It checks the
// JSON object raw against struct type t, and the objects of its struct
// fields likewise.
func exactMembers(raw []byte, t reflect.Type, prefix string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) != nil {
		return nil // not an object: decode judged it
	}
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		fields[name] = t.Field(i).Type
	}
	for name, v := range members {
		ft, ok := fields[name]
		switch {
		case !ok:
			return racefree.Invalid(prefix+name, "is not a field of this request")
		case ft == rawMessage:
		case string(bytes.TrimSpace(v)) == "null":
			return racefree.Invalid(prefix+name, "must not be null: leave it out instead")
		default:
			if err := exactMembers(v, ft, prefix+name+"."); err != nil {
				return err
			}
		}
	}
	return nil
}
