package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/dunglas/httpsfv"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/problem"
)

// Header is the request header that carries the idempotency key.
const Header = "Idempotency-Key"

// MiddlewareOptions configures Middleware. The zero value means the
// defaults.
type MiddlewareOptions struct {
	// Methods the middleware applies to. Defaults to POST and PATCH.
	Methods []string
	// Required makes a missing key a 400. Defaults to false: requests
	// without a key pass through unprotected.
	Required bool
	// Scope returns the scope of a request's key: the principal plus the
	// route, so that two clients' keys never meet. Defaults to
	// DefaultScope: the principal the server authenticated (see
	// WithPrincipal), or else a hash of the Authorization header, plus the
	// method and the path.
	Scope func(r *http.Request) string
	// Store decides from the handler's status whether its response is
	// stored and replayed to retries. A response that is not stored
	// reaches the client, and the next retry runs the handler again.
	// Defaults to StoreStatus.
	Store func(status int) bool
	// MaxBodyBytes bounds the request body, which is read in full to
	// fingerprint it. Defaults to 1 MiB; larger bodies get 413.
	MaxBodyBytes int64
	// Headers are the response headers stored and replayed. Defaults to
	// Content-Type, Location and Retry-After.
	Headers []string
}

// StoreStatus is the default [MiddlewareOptions.Store]: it stores the
// responses of requests that executed, and no others, as the most-used
// payment APIs do. Stored: 1xx-3xx, and 4xx but for the following. Not
// stored: 400 (the request failed validation), 401, 403 (not
// authenticated or not allowed), 404, 405 (no such resource or method),
// 408 (timed out reading the request), 413, 415 (body refused unread), 429
// (rate limited), and every 5xx (the outcome is unknown or transient).
// The middleware's own 409 (the key is in flight) and 422 (the key was
// used with another request) are never stored either: the handler does not
// run for them.
func StoreStatus(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden,
		http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusRequestTimeout,
		http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusTooManyRequests:
		return false
	}
	return status < 500
}

type principalKey struct{}

// callKey is the context key of the Call that Middleware passes to its
// handler.
type callKey struct{}

// CallFrom returns the Call that Middleware runs the request of ctx (a
// handler's r.Context()) under, and false for a request it passed through
// without a key (a method it does not apply to, no Idempotency-Key). Use
// its StepKey and Step to make the handler's own writes idempotent: a
// retry after a 5xx, which the middleware does not store, runs the handler
// again with the same key.
func CallFrom(ctx context.Context) (*Call, bool) {
	c, ok := ctx.Value(callKey{}).(*Call)
	return c, ok
}

// WithPrincipal returns a copy of ctx that carries principal, the identity
// the server authenticated for this request (a user, an API key's ID, a
// tenant). The default scope puts every principal's keys apart; a server's
// authentication sets it on the request before the middleware runs.
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// Principal returns the principal set by WithPrincipal, if any.
func Principal(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(principalKey{}).(string)
	return p, ok
}

// DefaultScope is the default [MiddlewareOptions.Scope]: a hash of the
// request's principal (WithPrincipal) or, when none was set, of its
// Authorization header, then the method and the path (escaped; hashed when
// it would make the scope longer than MaxScopeBytes). Requests with
// neither principal nor header share one key space: put a server that
// authenticates no one behind a Scope of its own if its clients must not
// meet.
func DefaultScope(r *http.Request) string {
	var who [sha256.Size]byte
	if p, ok := Principal(r.Context()); ok {
		who = sha256.Sum256([]byte("principal\x00" + p))
	} else {
		who = sha256.Sum256([]byte("authorization\x00" + r.Header.Get("Authorization")))
	}
	scope := hex.EncodeToString(who[:8]) + " " + r.Method + " "
	path := r.URL.EscapedPath()
	if len(scope)+len(path) > MaxScopeBytes {
		h := sha256.Sum256([]byte(path))
		path = "sha256:" + hex.EncodeToString(h[:])
	}
	return scope + path
}

// storedResponse is what Middleware stores for a key.
type storedResponse struct {
	Status int                 `json:"status"`
	Header map[string][]string `json:"header,omitempty"`
	Body   []byte              `json:"body,omitempty"`
}

// errNotStored carries a response that must reach the client but not be
// stored ([MiddlewareOptions.Store] refused its status), so that a retry runs
// the handler again.
type errNotStored struct{ resp *storedResponse }

func (errNotStored) Error() string { return "response not stored" }

// Middleware makes next idempotent per the IETF draft "The Idempotency-Key
// HTTP Header Field":
//
//   - a malformed key, or a missing one when Required, is 400;
//   - a duplicate while the first request is in flight is 409 with
//     Retry-After;
//   - the same key with another request (method, path, query and body
//     hash) is 422;
//   - a replay returns the stored status, headers and body with
//     Idempotent-Replayed: true;
//   - when the store cannot be reached or cannot record the outcome, the
//     answer is a 503 problem with Retry-After: retry with the same key;
//   - a response whose status [MiddlewareOptions.Store] refuses (by default
//     StoreStatus: validation and authentication failures, 404, 405, 408,
//     413, 415, 429 and 5xx) is not stored, so a retry runs again.
//
// A retry runs the handler again after any 5xx, and a 5xx is also what a
// handler answers when its own write's outcome is unknown (its commit's
// reply lost: [racefree.ErrUnavailable]), when that write may have
// happened. So a handler whose writes must not happen twice makes them
// idempotent by the request's key: [CallFrom] gives it the run's [Call],
// whose StepKey is the same in every retry of the request (a UNIQUE
// column of the row it inserts, or the key it passes to another system),
// and whose Step saves a recovery point that a retry resumes from.
//
// Once the handler has returned, its response is stored even if the
// client has gone (Options.CompleteTimeout).
//
// The key is parsed as the draft says, as an RFC 8941 Structured Field
// string: "…" with \" and \\ escapes; parameters ("k";a=1) are ignored.
// As a leniency for clients that do not quote, an unquoted key of token
// characters (letters, digits and !#$%&'*+-.^_`|~/:, not starting with
// ":") is accepted too, as a key of its own kind: 42 and "42" are two
// keys. Anything else (a byte sequence, a list, a boolean, a
// parameterised token, two header lines) is a 400.
//
// An informational answer the handler writes before its response (a 1xx
// other than 101 Switching Protocols: 103 Early Hints, say) reaches the
// client at once, with the handler's headers of that moment, and is
// neither stored nor replayed: the response is the first other status.
//
// Errors are application/problem+json. The whole response of next is
// buffered, so streaming handlers do not belong behind it.
func (s *Store) Middleware(opts MiddlewareOptions) func(http.Handler) http.Handler {
	if len(opts.Methods) == 0 {
		opts.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if opts.Scope == nil {
		opts.Scope = DefaultScope
	}
	if opts.Store == nil {
		opts.Store = StoreStatus
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if len(opts.Headers) == 0 {
		opts.Headers = []string{"Content-Type", "Location", "Retry-After"}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !slices.Contains(opts.Methods, r.Method) {
				next.ServeHTTP(w, r)
				return
			}
			raw, present := r.Header[Header]
			if !present {
				if opts.Required {
					writeProblem(w, http.StatusBadRequest, "idempotency-key-missing", "Idempotency-Key required", "this route requires an Idempotency-Key header")
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			key, err := ParseKey(raw)
			if err != nil {
				writeProblem(w, http.StatusBadRequest, "idempotency-key-malformed", "Malformed Idempotency-Key", err.Error())
				return
			}
			body, err := io.ReadAll(io.LimitReader(r.Body, opts.MaxBodyBytes+1))
			if err != nil {
				writeProblem(w, http.StatusBadRequest, "invalid-input", "Unreadable body", err.Error())
				return
			}
			if int64(len(body)) > opts.MaxBodyBytes {
				writeProblem(w, http.StatusRequestEntityTooLarge, "body-too-large", "Request body too large",
					fmt.Sprintf("idempotent requests are limited to %d bytes", opts.MaxBodyBytes))
				return
			}
			var fresh *storedResponse
			res, err := s.Do(r.Context(), opts.Scope(r), key, Fingerprint(r, body), func(ctx context.Context, call *Call) ([]byte, error) {
				rec := &recorder{header: http.Header{}, status: http.StatusOK, client: w}
				req := r.WithContext(context.WithValue(ctx, callKey{}, call))
				req.Body = io.NopCloser(bytes.NewReader(body))
				next.ServeHTTP(rec, req)
				fresh = &storedResponse{Status: rec.status, Body: rec.body.Bytes(), Header: map[string][]string{}}
				for k, v := range rec.header {
					fresh.Header[k] = v
				}
				if !opts.Store(rec.status) {
					return nil, errNotStored{fresh}
				}
				return json.Marshal(storedResponse{Status: rec.status, Body: fresh.Body, Header: pick(rec.header, opts.Headers)})
			})
			var notStored errNotStored
			var inProgress *InProgressError
			var input *racefree.InputError
			switch {
			case errors.As(err, &notStored):
				write(w, notStored.resp, false)
			case errors.As(err, &inProgress):
				w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(inProgress.RetryAfter.Seconds()))))
				writeProblem(w, http.StatusConflict, "idempotency-in-progress", "Request in progress",
					"a request with this Idempotency-Key is still being processed; retry later")
			case errors.Is(err, racefree.ErrMismatch):
				writeProblem(w, http.StatusUnprocessableEntity, "idempotency-key-mismatch", "Idempotency-Key reused",
					"this Idempotency-Key was used with a different request")
			case errors.As(err, &input):
				writeProblem(w, http.StatusBadRequest, "idempotency-key-malformed", "Malformed Idempotency-Key", input.Error())
			case err != nil:
				w.Header().Set("Retry-After", "1")
				writeProblem(w, http.StatusServiceUnavailable, "idempotency-unavailable", "Idempotency store unavailable",
					"the outcome of this request could not be recorded; retry with the same Idempotency-Key")
			case res.Replayed:
				var stored storedResponse
				if err := json.Unmarshal(res.Response, &stored); err != nil {
					writeProblem(w, http.StatusInternalServerError, "internal", "Internal error", "stored response unreadable")
					return
				}
				write(w, &stored, true)
			default:
				write(w, fresh, false)
			}
		})
	}
}

func write(w http.ResponseWriter, resp *storedResponse, replayed bool) {
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

func pick(h http.Header, names []string) map[string][]string {
	out := map[string][]string{}
	for _, n := range names {
		if v := h.Values(n); len(v) > 0 {
			out[http.CanonicalHeaderKey(n)] = v
		}
	}
	return out
}

func writeProblem(w http.ResponseWriter, status int, name, title, detail string) {
	problem.Write(w, problem.New(status, name, title, detail))
}

// unquoted prefixes the stored form of an unquoted key. A tab can appear
// in no Structured Field string and in no token, so an unquoted key never
// meets a quoted one.
const unquoted = "\t"

// ParseKey returns the key that the Idempotency-Key header's values (all
// its lines, as in r.Header["Idempotency-Key"]) carry, as Middleware reads
// it: an RFC 8941 string, or, as a documented leniency, an unquoted key of
// token characters, returned in a form that no string key takes. An error
// means a 400.
func ParseKey(values []string) (string, error) {
	if len(values) != 1 {
		return "", errors.New("exactly one Idempotency-Key header is allowed")
	}
	item, err := httpsfv.UnmarshalItem(values)
	if str, ok := item.Value.(string); err == nil && ok {
		if len(str) == 0 || len(str) > MaxKeyBytes {
			return "", fmt.Errorf("Idempotency-Key must be 1 to %d characters", MaxKeyBytes)
		}
		return str, nil
	}
	v := strings.Trim(values[0], " \t")
	if !isUnquotedKey(v) {
		return "", errors.New(`Idempotency-Key must be a Structured Field string such as "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	}
	if len(v) > MaxKeyBytes-len(unquoted) {
		return "", fmt.Errorf("an unquoted Idempotency-Key must be 1 to %d characters", MaxKeyBytes-len(unquoted))
	}
	return unquoted + v, nil
}

// isUnquotedKey reports whether v is 1*(tchar / ":" / "/") not starting
// with ":" (which opens a byte sequence).
func isUnquotedKey(v string) bool {
	if v == "" || v[0] == ':' {
		return false
	}
	for _, c := range []byte(v) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// Fingerprint returns the fingerprint Middleware gives a request whose
// body is body: a hash of the method, the path as sent (escaped, as
// DefaultScope reads it: /files/a%2Fb and /files/a/b are two requests),
// the query string as sent and the body.
func Fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", r.Method, r.URL.EscapedPath(), r.URL.RawQuery)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// recorder buffers a handler's response. An informational 1xx answer
// (103 Early Hints, say) is not the response: it passes through to the
// client at once, and the first other status is the one recorded.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
	client http.ResponseWriter
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.wrote {
		return
	}
	if informational(code) {
		r.inform(code)
		return
	}
	r.status, r.wrote = code, true
}

// informational reports whether code is a 1xx answer that net/http sends
// ahead of the final one: 100 to 199 but 101 Switching Protocols.
func informational(code int) bool {
	return code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols
}

// inform sends the 1xx answer code to the client with the handler's
// headers as they are now (as net/http sends a handler's 1xx), and then
// puts the client's headers back as they were, so that the final answer
// carries only what the middleware writes.
func (r *recorder) inform(code int) {
	h := r.client.Header()
	saved := h.Clone()
	for k, v := range r.header {
		h[k] = slices.Clone(v)
	}
	r.client.WriteHeader(code)
	clear(h)
	for k, v := range saved {
		h[k] = v
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}
