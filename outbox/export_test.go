package outbox

import (
	"context"
	"time"
)

// Listening returns a channel closed once r LISTENs (tests).
func Listening(r *Relay) <-chan struct{} { return r.listening }

// ClaimCompleting is a relay's claim (tests): it completes done, tenures
// of the tenant ctx names, and claims up to n messages, in one
// transaction, and returns the claimed deliveries and the ids of the
// completions that landed.
func ClaimCompleting(ctx context.Context, o *Outbox, worker string, n int, lease time.Duration, done []*Delivery) ([]*Delivery, []int64, error) {
	ds, completed, err := o.claimCompleting(ctx, worker, n, lease, nil, done, false)
	var ids []int64
	for _, t := range completed {
		ids = append(ids, t.id)
	}
	return ds, ids, err
}
