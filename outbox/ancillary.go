package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// Warning reports that an ancillary step failed after the main work
// committed. The main work stands; the step is a message the relays
// retry (unless its failure was permanent: then it is dead, and
// OnExhausted ran). Log it; do not fail the request.
type Warning struct {
	MessageID int64
	Err       error
	Outcome   *Outcome // nil when even recording the failure failed: the lease lapses and a relay retries
}

func (w *Warning) Error() string {
	return fmt.Sprintf("outbox: ancillary step (message %d) failed and is left to the relay: %v", w.MessageID, w.Err)
}

func (w *Warning) Unwrap() error { return w.Err }

// Ancillary runs main, the request's own work, in a transaction of the
// tenant ctx names, and enqueues m, its ancillary follow-up (an upload, a
// notification), in the same transaction, leased to this process. Once
// the transaction commits it runs h on m right away. Only main's failure
// (or the transaction's) is Ancillary's error, and h did not run. Such an
// error means nothing was written, the request failed, except one
// matching [racefree.ErrUnavailable]: the commit was sent and its reply
// never came, so main's writes and m may have committed, and then a relay
// runs h once m's lease (Options.AncillaryLease) lapses. The outcome is
// unknown, not a failure: settle it by re-reading what main writes before
// doing main again (or answer "unavailable, may have been recorded"),
// never redo main as if nothing happened. A failure of h is returned as
// a *Warning, never as an error: the main work committed, and failing
// the request would make the client send it again and do it twice; the
// message is retried by the relays
// (after Options.Backoff, or at once if this process dies: its lease,
// Options.AncillaryLease, lapses). Give the relays the same handler for
// m's topic. Recording h's outcome is retried while its reply is lost (an
// error matching [racefree.ErrUnavailable]): a completion or failure that
// landed is found, never recorded twice, and answered as if its reply
// had come.
//
// m must not be Ordered: an ordered message waits its turn in the relay.
func (o *Outbox) Ancillary(ctx context.Context, m Message, main func(ctx context.Context, tx *sql.Tx) error, h Handler) (*Warning, error) {
	if h == nil || main == nil {
		return nil, racefree.Invalid("ancillary", "main and the handler must not be nil")
	}
	in, err := o.prepare(m)
	if err != nil {
		return nil, err
	}
	if in.ordered {
		return nil, racefree.Invalid("ordered", "an ordered message cannot run at once: Enqueue it")
	}
	if in.delay > 0 {
		return nil, racefree.Invalid("not_before", "an ancillary step runs at once: Enqueue a delayed message")
	}
	t := tenant.From(ctx)
	host, _ := os.Hostname()
	d := &Delivery{Tenant: t, Topic: m.Topic, Key: m.Key, Payload: in.payload, Headers: decodeHeaders(in.headers),
		Attempt: 1, MaxAttempts: in.maxAttempts, Worker: cleanError(fmt.Errorf("ancillary:%s:%d", host, os.Getpid()))}
	err = o.tenantTx(ctx, t, func(ctx context.Context, tx *sql.Tx) error {
		if err := main(ctx, tx); err != nil {
			return err
		}
		var created, expires int64
		err := tx.QueryRowContext(ctx, o.q.Get("enqueue_leased"), t, m.Topic, m.Key, false, in.payload, in.headers,
			in.maxAttempts, d.Worker, o.opts.AncillaryLease.Milliseconds(), wire.Of(o.db).ClockArg()).Scan(&d.ID, &created, &expires, &d.Fence)
		d.CreatedAt, d.LeaseExpiresAt = racefree.FromMillis(created), racefree.FromMillis(expires)
		return err
	})
	if err != nil {
		return nil, err
	}
	// The main work committed: from here on nothing fails the request, and
	// nothing is cancelled by the caller's context.
	wctx := context.WithoutCancel(ctx)
	hctx, cancel := context.WithTimeout(wctx, o.opts.AncillaryLease*9/10)
	herr := callSafely(hctx, h, d)
	cancel()
	rctx, rcancel := context.WithTimeout(wctx, 30*time.Second)
	defer rcancel()
	// Recording the outcome is retried while its reply is lost: a
	// Complete that landed is found as ErrDelivered, a Fail that landed
	// answers the outcome it recorded.
	if herr == nil {
		err := settle(rctx, nil, func() error { return o.Complete(rctx, o.db, d) })
		if err != nil && !errors.Is(err, ErrDelivered) {
			return &Warning{MessageID: d.ID, Err: fmt.Errorf("the step succeeded, recording it failed (it may run again): %w", err)}, nil
		}
		return nil, nil
	}
	var out *Outcome
	ferr := settle(rctx, nil, func() (ferr error) {
		out, ferr = o.Fail(rctx, d, herr)
		return ferr
	})
	if ferr != nil {
		herr = errors.Join(herr, fmt.Errorf("recording the failure: %w", ferr))
	}
	return &Warning{MessageID: d.ID, Err: herr, Outcome: out}, nil
}

func callSafely(ctx context.Context, h Handler, d *Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("outbox handler panicked: %v", p)
		}
	}()
	return h(ctx, d)
}
