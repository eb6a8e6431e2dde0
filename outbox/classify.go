package outbox

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Verdict is how a failure is treated.
type Verdict struct {
	// Permanent failures are not retried: the message dies at once.
	Permanent bool
	// RetryAfter, when positive, is the delay before the next attempt,
	// instead of the backoff.
	RetryAfter time.Duration
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as a failure that no retry can fix (a payload the
// receiver rejects): the message dies at once. Only mark what is clearly
// permanent: a transient failure taken for a permanent one is a message
// silently lost to the dead letters, while a permanent one taken for
// transient only costs retries.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &permanentError{err: err}
}

type retryAfterError struct {
	d   time.Duration
	err error
}

func (e *retryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %v", e.d, e.err)
}
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter marks err as transient, to be retried after d (a receiver's
// Retry-After) instead of the backoff.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry later")
	}
	return &retryAfterError{d: d, err: err}
}

// StatusError is implemented by errors that carry an HTTP status, such as
// *HTTPError: Classify treats them like the HTTP handler's answers.
type StatusError interface {
	error
	HTTPStatus() int
}

// Classify is the default classifier. When in doubt, retry:
//
//   - RetryAfter(d, err): transient, retried after d;
//   - Permanent(err): permanent;
//   - an error with an HTTP status (StatusError): 4xx except 408 and 429
//     is permanent, anything else transient (with the RetryAfter of an
//     *HTTPError, from the answer's Retry-After);
//   - anything else, timeouts and cancellations included: transient.
func Classify(err error) Verdict {
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return Verdict{RetryAfter: ra.d}
	}
	var pe *permanentError
	if errors.As(err, &pe) {
		return Verdict{Permanent: true}
	}
	var se StatusError
	if errors.As(err, &se) {
		v := Verdict{Permanent: PermanentStatus(se.HTTPStatus())}
		var he *HTTPError
		if errors.As(err, &he) && !v.Permanent {
			v.RetryAfter = he.RetryAfter
		}
		return v
	}
	return Verdict{}
}

// PermanentStatus reports whether an HTTP answer with this status means
// that retrying cannot help: a 4xx other than 408 (Request Timeout) and
// 429 (Too Many Requests).
func PermanentStatus(status int) bool {
	return status >= 400 && status < 500 && status != 408 && status != 429
}

// Backoff bounds.
const (
	BackoffBase = time.Second
	BackoffMax  = time.Hour
)

// Backoff is the default delay before the attempt after the n-th failed
// one: exponential from BackoffBase, doubling per attempt up to
// BackoffMax, with equal jitter (a uniformly random point in the upper
// half), so that messages failing together do not come back together.
func Backoff(attempt int) time.Duration {
	return jitter(exponential(attempt, BackoffBase, BackoffMax))
}

func exponential(attempt int, base, max time.Duration) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// jitter returns a uniformly random duration in [d/2, d].
func jitter(d time.Duration) time.Duration {
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(d-half+1)
}
