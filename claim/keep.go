package claim

import (
	"context"
	"errors"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/heartbeat"
)

// ErrLapsed is the cause (context.Cause) of a context returned by Keep
// that was cancelled because no renewal succeeded within the TTL.
var ErrLapsed = heartbeat.ErrLapsed

// Keep renews c (its Key, Holder and Fence) for ttl every ttl/3, on the
// pool and for the tenant ctx names, until ctx ends or stop is called, and
// returns a context that is cancelled the moment the claim is lost: a
// renewal answered *StaleFenceError or [racefree.ErrNotHeld] (the cause,
// context.Cause, is that error), or ttl passed since the last successful
// renewal was sent (or since Keep was called) without another succeeding,
// for instance while the database was unreachable (the cause is ErrLapsed).
// Do the claim's work under the returned context, and call Keep right after
// Acquire. stop ends the heartbeat and waits for it; it does not release
// the claim (call Release).
func (s *Store) Keep(ctx context.Context, c *Claim, ttl time.Duration) (kept context.Context, stop func()) {
	key, holder, fence := c.Key, c.Holder, c.Fence
	return heartbeat.Keep(ctx, ttl, func(ctx context.Context) error {
		_, err := s.Renew(ctx, s.db, key, holder, fence, ttl)
		return err
	}, Lost)
}

// Lost reports whether err, returned by a renewal, means the claim is lost
// for good (another tenure began, the claim lapsed or was released, or the
// renewal can never succeed), rather than a failure that may pass.
func Lost(err error) bool {
	return errors.Is(err, racefree.ErrStaleFence) || errors.Is(err, racefree.ErrNotHeld) ||
		errors.Is(err, racefree.ErrHeld) || errors.Is(err, racefree.ErrInvalidInput)
}
