package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/racefree/racefree"
)

// HTTPError is a delivery's non-2xx answer. Classify treats 4xx other
// than 408 and 429 as permanent, the rest as transient, and retries a
// transient one after the answer's Retry-After when it has one.
type HTTPError struct {
	Status     int
	RetryAfter time.Duration // from Retry-After (seconds or an HTTP date); 0 when none
	Body       string        // the first bytes of the answer, for the history
}

func (e *HTTPError) Error() string {
	s := fmt.Sprintf("HTTP %d", e.Status)
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (Retry-After %s)", e.RetryAfter)
	}
	if e.Body != "" {
		s += ": " + e.Body
	}
	return s
}

// HTTPStatus returns the answer's status (StatusError).
func (e *HTTPError) HTTPStatus() int { return e.Status }

// HTTPOptions configures HTTPHandler.
type HTTPOptions struct {
	// URL receives every message, unless URLFor is set.
	URL string
	// URLFor picks the URL of each delivery (by topic, say). An error is
	// a permanent failure.
	URLFor func(d *Delivery) (string, error)
	// Client sends the requests (http.DefaultClient's transport when nil),
	// through a copy that follows no redirect turning the POST into a GET.
	Client *http.Client
	// Timeout bounds each request (30s when 0). Keep it well below the
	// relay's lease.
	Timeout time.Duration
	// ContentType is sent when the message has no Content-Type header
	// (application/octet-stream when empty).
	ContentType string
}

// ReservedHeaderPrefix starts the names of the headers racefree sets on a
// delivery (HTTPHandler); a message header whose name starts with it, in
// any case, is an InputError at Enqueue, so no tenant can claim to be
// another or forge a fence.
const ReservedHeaderPrefix = "Racefree-"

// reserved reports whether name starts with ReservedHeaderPrefix, in any
// case.
func reserved(name string) bool {
	return len(name) >= len(ReservedHeaderPrefix) && strings.EqualFold(name[:len(ReservedHeaderPrefix)], ReservedHeaderPrefix)
}

// maxBody is how much of an error answer is kept.
const maxBody = 512

// HTTPHandler returns a Handler that POSTs each message's payload to a
// URL, with the message's headers and these, which racefree sets and no
// message can (Enqueue refuses a header whose name starts with
// ReservedHeaderPrefix, "Racefree-", in any case):
//
//   - Idempotency-Key: the message id, the same on every delivery (the
//     receiver applies it once however often it arrives);
//   - Racefree-Outbox-Tenant: the tenant that enqueued the message (a
//     relay serves every tenant, often to one URL: this says whose it is);
//   - Racefree-Outbox-Fence: the fence of the lease this delivery runs
//     under. It grows with every lease of the message (a lease that
//     lapsed and was taken over, a retry), and never goes back, so a
//     receiver that keeps the highest fence it saw per Idempotency-Key
//     and refuses a request whose fence is lower (409) refuses a relay
//     whose lease lapsed and was taken over: its completion would be
//     refused anyway (StaleFenceError), and the newer holder's request
//     is the one that counts;
//   - Racefree-Outbox-Topic and Racefree-Outbox-Attempt.
//
// A 2xx answer is a delivery; any other answer is an *HTTPError,
// classified by Classify; a network error or a timeout is transient. A
// redirect is followed only when it repeats the POST (307, 308); a 301,
// 302 or 303, which would turn it into a GET without the payload, is the
// answer (an *HTTPError, transient), never a delivery.
func HTTPHandler(opts HTTPOptions) (Handler, error) {
	if opts.URLFor == nil {
		if err := checkURL(opts.URL); err != nil {
			return nil, err
		}
	}
	if opts.Timeout == 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Timeout < 0 {
		return nil, racefree.Invalid("timeout", "must be positive")
	}
	if opts.ContentType == "" {
		opts.ContentType = "application/octet-stream"
	}
	client := opts.Client
	if client == nil {
		client = &http.Client{}
	}
	client = keepPOST(client)
	return func(ctx context.Context, d *Delivery) error {
		target := opts.URL
		if opts.URLFor != nil {
			u, err := opts.URLFor(d)
			if err == nil {
				err = checkURL(u)
			}
			if err != nil {
				return Permanent(fmt.Errorf("no URL for message %d: %w", d.ID, err))
			}
			target = u
		}
		ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(d.Payload))
		if err != nil {
			return Permanent(err)
		}
		for k, v := range d.Headers {
			if !reserved(k) { // a message stored before Enqueue refused them
				req.Header.Set(k, v)
			}
		}
		if req.Header.Get("Content-Type") == "" {
			req.Header.Set("Content-Type", opts.ContentType)
		}
		req.Header.Set("Idempotency-Key", d.IdempotencyKey())
		req.Header.Set("Racefree-Outbox-Tenant", d.Tenant)
		req.Header.Set("Racefree-Outbox-Fence", strconv.FormatInt(d.Fence, 10))
		req.Header.Set("Racefree-Outbox-Topic", d.Topic)
		req.Header.Set("Racefree-Outbox-Attempt", strconv.Itoa(d.Attempt))
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("POST %s: %w", target, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // reuse the connection
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return nil
		}
		return &HTTPError{Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), Body: strings.TrimSpace(string(body))}
	}, nil
}

// keepPOST returns a copy of c that follows a redirect only when it
// repeats the POST with its payload (307, 308). A 301, 302 or 303 would
// make it a GET without the payload, and the answer to that GET (a 2xx
// from a page that takes no message) is no delivery: the delivery's
// answer is then the redirect itself, an *HTTPError (transient, as every
// non-4xx). c's own CheckRedirect, or Go's default of at most 10
// redirects, judges the rest.
func keepPOST(c *http.Client) *http.Client {
	cp := *c
	next := c.CheckRedirect
	cp.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.Method != via[0].Method {
			return http.ErrUseLastResponse
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &cp
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return racefree.Invalid("url", "must be an absolute http or https URL")
	}
	return nil
}

// parseRetryAfter reads a Retry-After header: seconds, or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	// Seconds: a number past MaxDelay reads as MaxDelay before it is made
	// a Duration, whose nanoseconds would overflow and wrap to a delay of
	// any size, a second or none.
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		if s > int64(MaxDelay/time.Second) {
			return MaxDelay
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, MaxDelay)
		}
	}
	return 0
}
