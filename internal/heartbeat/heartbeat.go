// Package heartbeat keeps a lease alive by renewing it at a fraction of its
// TTL, and tells its holder, by cancelling a context, the moment the lease
// is lost. claim.Store.Keep and the HTTP client's Keep share it.
package heartbeat

import (
	"context"
	"errors"
	"time"
)

// ErrLapsed is the cause of a kept context cancelled because no renewal
// succeeded within the lease's TTL: the holder must assume another holder
// may have taken over.
var ErrLapsed = errors.New("racefree: claim lapsed: no renewal succeeded within its TTL")

// Renewals happen every ttl/Fraction; a renewal that failed for a reason
// that may pass (a transport error, a busy database) is retried every
// ttl/RetryFraction until one succeeds or the TTL since the last success
// has passed.
const (
	Fraction      = 3
	RetryFraction = 10
)

// Keep renews a lease of ttl by calling renew every ttl/Fraction until ctx
// ends or the returned stop is called. It returns a context derived from
// ctx that is cancelled when the lease is lost: renew returned an error for
// which lost reports true (its cause, context.Cause, is that error), or
// ttl passed since the last renewal that succeeded (counted from when that
// renewal was sent, or from the call to Keep) with none succeeding (its
// cause is ErrLapsed). Each renewal's context ends at that deadline, so a
// renewal that hangs cannot hide a lapse. stop cancels the context (cause
// context.Canceled) and waits for the heartbeat to end; it does not release
// the lease.
func Keep(ctx context.Context, ttl time.Duration, renew func(context.Context) error, lost func(error) bool) (kept context.Context, stop func()) {
	deadline := time.Now().Add(ttl)
	kept, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		timer := time.NewTimer(ttl / Fraction)
		defer timer.Stop()
		for {
			select {
			case <-kept.Done():
				return
			case <-timer.C:
			}
			sent := time.Now()
			rctx, rcancel := context.WithDeadline(kept, deadline)
			err := renew(rctx)
			rcancel()
			switch {
			case kept.Err() != nil:
				return
			case err == nil:
				deadline = sent.Add(ttl)
				timer.Reset(ttl / Fraction)
			case lost(err):
				cancel(err)
				return
			case !time.Now().Before(deadline):
				cancel(ErrLapsed)
				return
			default:
				timer.Reset(min(ttl/RetryFraction, time.Until(deadline)))
			}
		}
	}()
	return kept, func() { cancel(context.Canceled); <-done }
}
