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
	// route, so that two clients' keys never meet. Defaults to a hash of
	// the Authorization header, the method and the path.
	Scope func(r *http.Request) string
	// MaxBodyBytes bounds the request body, which is read in full to
	// fingerprint it. Defaults to 1 MiB; larger bodies get 413.
	MaxBodyBytes int64
	// Headers are the response headers stored and replayed. Defaults to
	// Content-Type, Location and Retry-After.
	Headers []string
}

// storedResponse is what Middleware stores for a key.
type storedResponse struct {
	Status int                 `json:"status"`
	Header map[string][]string `json:"header,omitempty"`
	Body   []byte              `json:"body,omitempty"`
}

// errNotStored carries a response that must reach the client but not be
// stored (5xx and 429), so that a retry runs the handler again.
type errNotStored struct{ resp *storedResponse }

func (errNotStored) Error() string { return "response not stored" }

// Middleware makes next idempotent per the IETF draft "The Idempotency-Key
// HTTP Header Field":
//
//   - a malformed key, or a missing one when Required, is 400;
//   - a duplicate while the first request is in flight is 409 with
//     Retry-After;
//   - the same key with another request (method, path and body hash) is
//     422;
//   - a replay returns the stored status, headers and body with
//     Idempotent-Replayed: true;
//   - 5xx and 429 responses are not stored, so a retry runs again.
//
// Errors are application/problem+json. The whole response of next is
// buffered, so streaming handlers do not belong behind it.
func (s *Store) Middleware(opts MiddlewareOptions) func(http.Handler) http.Handler {
	if len(opts.Methods) == 0 {
		opts.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if opts.Scope == nil {
		opts.Scope = defaultScope
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
			key, err := parseKey(raw)
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
			res, err := s.Do(r.Context(), opts.Scope(r), key, requestFingerprint(r, body), func(ctx context.Context, _ *Call) ([]byte, error) {
				rec := &recorder{header: http.Header{}, status: http.StatusOK}
				req := r.WithContext(ctx)
				req.Body = io.NopCloser(bytes.NewReader(body))
				next.ServeHTTP(rec, req)
				fresh = &storedResponse{Status: rec.status, Body: rec.body.Bytes(), Header: map[string][]string{}}
				for k, v := range rec.header {
					fresh.Header[k] = v
				}
				if rec.status >= 500 || rec.status == http.StatusTooManyRequests {
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

// parseKey reads the key per the draft: a Structured Field string
// ("…"), with a bare token also accepted, as many clients send one. Keys
// are 1 to 255 printable ASCII characters.
func parseKey(values []string) (string, error) {
	if len(values) != 1 {
		return "", errors.New("exactly one Idempotency-Key header is allowed")
	}
	v := strings.TrimSpace(values[0])
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 || !strings.HasSuffix(v, `"`) || strings.ContainsAny(v[1:len(v)-1], `"\`) {
			return "", errors.New(`Idempotency-Key must be a string such as "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		}
		v = v[1 : len(v)-1]
	}
	if len(v) == 0 || len(v) > MaxKeyBytes {
		return "", fmt.Errorf("Idempotency-Key must be 1 to %d characters", MaxKeyBytes)
	}
	for _, c := range []byte(v) {
		if c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return "", errors.New("Idempotency-Key must be printable ASCII without spaces, quotes or backslashes")
		}
	}
	return v, nil
}

// requestFingerprint covers the method, the path and a hash of the body.
func requestFingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", r.Method, r.URL.Path)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

func defaultScope(r *http.Request) string {
	principal := sha256.Sum256([]byte(r.Header.Get("Authorization")))
	return hex.EncodeToString(principal[:8]) + " " + r.Method + " " + r.URL.Path
}

// recorder buffers a handler's response.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}
