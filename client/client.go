package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/seq"
)

// Options configures a Client. A nil *Options means all defaults.
type Options struct {
	// Key is the credential sent as "Authorization: Bearer <Key>": an API
	// key (racefree keys create) or the server's --token. Defaults to none.
	Key string
	// HTTPClient sends the requests. Defaults to a client with a 30s
	// timeout per attempt.
	HTTPClient *http.Client
	// Attempts bounds the attempts of one call, the first included: a
	// transport error, a 503 or a 409 idempotency-in-progress is retried
	// until then. Defaults to 5.
	Attempts int
	// Backoff is the wait before the second attempt; it doubles with each
	// further one, and a Retry-After the server sends is honoured up to
	// MaxBackoff. Defaults to 100ms.
	Backoff time.Duration
	// MaxBackoff bounds any one wait between attempts. Defaults to 2s.
	MaxBackoff time.Duration
}

// Client represents a racefree server. It is safe for concurrent use.
type Client struct {
	base *url.URL
	opts Options
}

// New returns a Client of the server at baseURL (http://host:port, with an
// optional path prefix). It does no I/O; a URL that is not absolute http or
// https is a *racefree.InputError.
func New(baseURL string, opts *Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, racefree.Invalid("server", "must be an http:// or https:// URL, got %q", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u}
	if opts != nil {
		c.opts = *opts
	}
	if c.opts.HTTPClient == nil {
		c.opts.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if c.opts.Attempts < 1 {
		c.opts.Attempts = 5
	}
	if c.opts.Backoff <= 0 {
		c.opts.Backoff = 100 * time.Millisecond
	}
	if c.opts.MaxBackoff <= 0 {
		c.opts.MaxBackoff = 2 * time.Second
	}
	return c, nil
}

// Error represents a problem document (RFC 9457) the server answered with.
// It unwraps to the library's error of the same meaning (a
// *claim.HeldError, [racefree.ErrNotHeld], a *racefree.InputError…), when
// there is one, so errors.Is and errors.As work as on the library.
type Error struct {
	Status    int
	Type      string // e.g. "urn:racefree:problem:held"
	Title     string
	Detail    string
	RequestID string // the server's request id, for its logs
	Members   map[string]json.RawMessage
	err       error
}

func (e *Error) Error() string {
	msg := e.Title
	if e.Detail != "" {
		msg = e.Detail
	}
	if e.RequestID != "" {
		return fmt.Sprintf("racefree server: %d %s (request %s)", e.Status, msg, e.RequestID)
	}
	return fmt.Sprintf("racefree server: %d %s", e.Status, msg)
}

// Unwrap returns the library's error of the same meaning, or nil.
func (e *Error) Unwrap() error { return e.err }

// Errors of the server's credentials, which the library has no use for.
var (
	// ErrUnauthorized means the server refused the credential (401).
	ErrUnauthorized = errors.New("racefree client: unauthorized")
	// ErrForbidden means the credential lacks the route's scope (403).
	ErrForbidden = errors.New("racefree client: insufficient scope")
)

// ErrUnreachable means no attempt of a call got an answer from the server:
// it refused the connection, the name did not resolve, the connection
// broke or timed out. It is the server that could not be reached, not its
// database (a server that answers that its database is unavailable is an
// *Error matching [racefree.ErrUnavailable]).
var ErrUnreachable = errors.New("racefree client: server unreachable")

// UnreachableError is the error of a call none of whose attempts got an
// answer. It matches ErrUnreachable and, since the call may have been
// carried out before a reply was lost, [racefree.ErrUnavailable] ("retry
// with the same Idempotency-Key"); Err is the last attempt's transport
// error.
type UnreachableError struct {
	Server   string // the base URL, without its password
	Attempts int
	Err      error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("racefree client: server unreachable at %s after %d attempts: %v", e.Server, e.Attempts, e.Err)
}

// Unwrap returns ErrUnreachable, [racefree.ErrUnavailable] and the last
// transport error.
func (e *UnreachableError) Unwrap() []error {
	return []error{ErrUnreachable, racefree.ErrUnavailable, e.Err}
}

// OutcomeUnknownError is the error of a call sent without an
// Idempotency-Key (a claim release) when an attempt got no answer (a
// transport error, a 503) and a later attempt was refused in a way the
// unanswered one may itself have caused: the release may have happened
// before its reply was lost, and the key been taken by another holder
// since, so the retry's stale fence says nothing about the release. It
// matches [racefree.ErrUnavailable] ("may have been recorded": settle it by
// re-reading), and not the refusal's own error: errors.Is(err,
// racefree.ErrStaleFence) is false, since the tenure may well have ended
// by this release and not by a takeover. Answer is the later attempt's
// refusal (a *claim.StaleFenceError or an error matching
// [racefree.ErrNotHeld], inside an *Error), for the logs.
type OutcomeUnknownError struct {
	Method, Path string
	Answer       error
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("racefree client: %s %s: outcome unknown, may have been done: an attempt got no answer, and a retry was then refused: %v", e.Method, e.Path, e.Answer)
}

// Unwrap returns [racefree.ErrUnavailable].
func (e *OutcomeUnknownError) Unwrap() error { return racefree.ErrUnavailable }

// DecodeError is the error of a call one of whose attempts got a whole
// 2xx reply that is not the route's answer: a proxy's or a gateway's page
// answered 200, JSON of another shape, an empty body, or a reply longer
// than the client reads (64 MiB). The reply arrived, so the server may
// well have done what was asked: the call is not retried (a retry of a
// call without an Idempotency-Key, such as IssueCode, would do it again),
// and the error matches neither ErrUnreachable nor
// [racefree.ErrUnavailable], since retrying will not mend it. A body cut
// short while it was read is no reply at all, and is retried like a
// transport error. Err is the decoder's error.
type DecodeError struct {
	Method, Path string
	Status       int
	ContentType  string
	RequestID    string // the reply's X-Request-Id, if any
	Body         string // the reply's first bytes, at most 256, for the logs
	Err          error  // the decoder's error
}

func (e *DecodeError) Error() string {
	msg := fmt.Sprintf("racefree client: %s %s: %d reply (Content-Type %q) is not the route's answer: %v; its body begins %q", e.Method, e.Path, e.Status, e.ContentType, e.Err, e.Body)
	if e.RequestID != "" {
		msg += " (request " + e.RequestID + ")"
	}
	return msg
}

// Unwrap returns the decoder's error.
func (e *DecodeError) Unwrap() error { return e.Err }

// maxReply bounds the bytes of a reply the client reads, 64 MiB: a page
// of a list holds at most 4 MiB of JSON (server.MaxPageBytes) but always
// its first item, and one webhook body of up to 8 MiB
// (server.MaxInboxBody) that is not JSON is listed as a JSON string of up
// to six times its bytes. maxSnippet bounds those of a DecodeError's Body.
const (
	maxReply   = 64 << 20
	maxSnippet = 256
)

// problemName returns the name of a problem type URI.
func problemName(typ string) string { return strings.TrimPrefix(typ, "urn:racefree:problem:") }

// sentinel maps the problems with a fixed meaning to the library's errors.
func sentinel(e *Error) error {
	switch problemName(e.Type) {
	case "invalid-input":
		return &racefree.InputError{Field: "request", Reason: e.Detail}
	case "not-found":
		return racefree.ErrNotFound
	case "not-held":
		return racefree.ErrNotHeld
	case "stale-fence":
		return racefree.ErrStaleFence
	case "held":
		return racefree.ErrHeld
	case "idempotency-in-progress":
		return racefree.ErrInProgress
	case "idempotency-key-mismatch":
		return racefree.ErrMismatch
	case "quota-exceeded":
		return racefree.ErrQuotaExceeded
	case "sequence-exhausted":
		return seq.ErrExhausted
	case "schema":
		return racefree.ErrSchemaOutdated
	case "unavailable", "idempotency-unavailable", "not-ready":
		return racefree.ErrUnavailable
	case "read-only":
		return &racefree.ReadOnlyError{Reason: e.Detail}
	case "not-durable":
		return &racefree.NotDurableError{Reason: e.Detail}
	case "unauthorized":
		return ErrUnauthorized
	case "insufficient-scope":
		return ErrForbidden
	}
	return nil
}

// call is one logical request: its attempts share the Idempotency-Key.
type call struct {
	method     string
	path       string // escaped: build it with url.PathEscape on each key
	query      url.Values
	body       any         // JSON-encoded when not nil
	raw        []byte      // sent as it is, when body is nil (a signed webhook delivery)
	header     http.Header // sent with each attempt, beside the client's own
	idempotent bool        // send an Idempotency-Key
	// unsettled names the problems (without an Idempotency-Key) that an
	// earlier attempt whose outcome is unknown may itself have caused: a
	// later attempt's answer of one of them is an *OutcomeUnknownError.
	unsettled []string
}

// do runs the call, retrying transport errors, 503 and 409
// idempotency-in-progress, and decodes a 2xx body into out (when not nil).
// A problem answer is returned as *Error (its library error set by
// sentinel; callers refine it), but one of cl.unsettled after an attempt
// that got no answer or a 503, which is an *OutcomeUnknownError.
func (c *Client) do(ctx context.Context, cl call, out any) error {
	var body []byte
	if cl.body != nil {
		var err error
		if body, err = json.Marshal(cl.body); err != nil {
			return err
		}
	} else if cl.raw != nil {
		body = cl.raw
	}
	u, err := url.Parse(c.base.String() + cl.path)
	if err != nil {
		return racefree.Invalid("path", "%v", err)
	}
	u.RawQuery = cl.query.Encode()
	var key string
	if cl.idempotent {
		key = NewIdempotencyKey()
	}
	wait := c.opts.Backoff
	var last error
	unknown := false // an earlier attempt may have been carried out
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, cl.method, u.String(), bytes.NewReader(body))
		if err != nil {
			return err
		}
		for name, vs := range cl.header {
			req.Header[name] = append([]string(nil), vs...)
		}
		if cl.body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Accept", "application/json, application/problem+json")
		if key != "" {
			req.Header.Set(idempotency.Header, strconv.Quote(key))
		}
		if c.opts.Key != "" {
			req.Header.Set("Authorization", "Bearer "+c.opts.Key)
		}
		retryAfter := time.Duration(0)
		resp, err := c.opts.HTTPClient.Do(req)
		if err == nil {
			var perr *Error
			perr, err = c.read(resp, out)
			if err == nil && perr == nil {
				return nil
			}
			var derr *DecodeError
			if errors.As(err, &derr) {
				// A reply arrived whole: the server answered, and may
				// have done the work. Not retried.
				derr.Method, derr.Path = cl.method, cl.path
				return derr
			}
			if err == nil {
				if !retryable(perr) {
					if unknown && slices.Contains(cl.unsettled, problemName(perr.Type)) {
						return &OutcomeUnknownError{Method: cl.method, Path: cl.path, Answer: perr}
					}
					return perr
				}
				if s, aerr := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64); aerr == nil && s > 0 {
					// Bounded before it is made a Duration, whose
					// nanoseconds would wrap round past 292 years.
					retryAfter = c.opts.MaxBackoff
					if s < int64(c.opts.MaxBackoff/time.Second) {
						retryAfter = time.Duration(s) * time.Second
					}
				}
				err = perr
			}
		}
		last = err
		var perr *Error
		if !errors.As(err, &perr) || perr.Status == http.StatusServiceUnavailable {
			unknown = true
		}
		if ctx.Err() != nil {
			return fmt.Errorf("racefree client: %s %s: %w", cl.method, cl.path, context.Cause(ctx))
		}
		if attempt >= c.opts.Attempts {
			var perr *Error
			if errors.As(last, &perr) {
				return perr
			}
			return &UnreachableError{Server: c.base.Redacted(), Attempts: attempt, Err: last}
		}
		d := min(max(wait, retryAfter), c.opts.MaxBackoff)
		wait *= 2
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("racefree client: %s %s: %w", cl.method, cl.path, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// retryable reports whether a problem answer may be retried with the same
// request: the server was unavailable or busy, or the first attempt of the
// same Idempotency-Key is still running.
func retryable(e *Error) bool {
	return e.Status == http.StatusServiceUnavailable || problemName(e.Type) == "idempotency-in-progress"
}

// read decodes resp: a 2xx into out, a problem into *Error. A whole 2xx
// reply that does not decode into out is a *DecodeError, never retried;
// any other error is a body cut short, which is retried like a transport
// error.
func (c *Client) read(resp *http.Response, out any) (*Error, error) {
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxReply+1))
	if err != nil {
		return nil, err
	}
	long := len(raw) > maxReply
	if long {
		raw = raw[:maxReply]
	}
	if resp.StatusCode/100 == 2 {
		if out == nil || resp.StatusCode == http.StatusNoContent {
			return nil, nil
		}
		if long {
			return nil, decodeError(resp, raw, fmt.Errorf("reply longer than %d bytes, not read", maxReply))
		}
		if err := json.Unmarshal(raw, out); err != nil {
			if cutShort(resp, raw) {
				return nil, fmt.Errorf("racefree client: %s reply cut short: %w", resp.Request.URL.Path, io.ErrUnexpectedEOF)
			}
			return nil, decodeError(resp, raw, err)
		}
		return nil, nil
	}
	e := &Error{Status: resp.StatusCode, Title: resp.Status, RequestID: resp.Header.Get("X-Request-Id")}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil {
		e.Members = m
		_ = json.Unmarshal(m["type"], &e.Type)
		_ = json.Unmarshal(m["title"], &e.Title)
		_ = json.Unmarshal(m["detail"], &e.Detail)
		_ = json.Unmarshal(m["request_id"], &e.RequestID)
	}
	if e.Type == "" && resp.StatusCode == http.StatusServiceUnavailable {
		e.Type = "urn:racefree:problem:unavailable" // a proxy's 503
	}
	e.err = sentinel(e)
	return e, nil
}

// cutShort reports whether raw, which does not decode, may be a reply cut
// short that the transport could not tell from a whole one: a body of no
// declared length (neither Content-Length nor chunked) ends where the
// connection closed, so one whose JSON ends before its first value does is
// a lost reply, not an answer.
func cutShort(resp *http.Response, raw []byte) bool {
	if resp.ContentLength >= 0 || slices.Contains(resp.TransferEncoding, "chunked") {
		return false
	}
	err := json.NewDecoder(bytes.NewReader(raw)).Decode(new(json.RawMessage))
	return err == io.EOF || err == io.ErrUnexpectedEOF
}

// decodeError returns the *DecodeError of a whole 2xx reply whose body raw
// is not the route's answer; do names the call.
func decodeError(resp *http.Response, raw []byte, err error) *DecodeError {
	if len(raw) > maxSnippet {
		raw = raw[:maxSnippet]
	}
	return &DecodeError{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"),
		RequestID: resp.Header.Get("X-Request-Id"), Body: string(raw), Err: err}
}

// member decodes the problem's extension member name into v.
func (e *Error) member(name string, v any) bool {
	raw, ok := e.Members[name]
	return ok && json.Unmarshal(raw, v) == nil
}

// NewIdempotencyKey returns a random key (32 hex digits) for one logical
// request.
func NewIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
