package outbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/tenant"
)

// Handler delivers one message: it performs the side effect and returns
// nil once it is done. It must be idempotent on d.IdempotencyKey(): a
// message is delivered at least once, and again after a crash, a lapsed
// lease or a lost completion. ctx ends when the lease is lost
// (context.Cause is ErrLeaseLost) or the relay stops (ErrRelayStopped).
// Wrap an error with Permanent or RetryAfter to steer the retry; a panic
// is a transient failure.
type Handler func(ctx context.Context, d *Delivery) error

// completeLinger is how long a completion waits for the relay's next claim
// to take it along before the completer writes it on its own.
const completeLinger = 2 * time.Millisecond

// batchWaitMax bounds how long a relay with messages waiting holds back a
// claim until enough slots are free for a batch.
const batchWaitMax = 5 * time.Millisecond

// ErrRelayStopped is the cause of a handler's context when the relay
// stopped and its grace period ran out.
var ErrRelayStopped = errors.New("racefree: outbox relay stopped")

// RelayOptions configures a Relay. The zero value is usable.
type RelayOptions struct {
	// Worker names this relay in leases and in the attempt history
	// (hostname-pid-random when empty). Two relays must not share a name.
	Worker string
	// Topics restricts the relay to these topics (none: every topic).
	Topics []string
	// Tenants restricts the relay to these tenants (none: every tenant
	// racefree has seen, listed again at each poll).
	Tenants []string
	// Concurrency bounds the handlers running at once (16 when 0).
	Concurrency int
	// Batch bounds the messages one claim leases (Concurrency when 0).
	Batch int
	// Lease is how long a claim holds a message (30s when 0); a heartbeat
	// extends the leases of running handlers every Lease/3.
	Lease time.Duration
	// PollInterval is how often every tenant is polled for due messages
	// (1s when 0): the fallback for missed wake-ups and the way retries
	// and delayed messages are found when they come due.
	PollInterval time.Duration
	// Listen makes the relay LISTEN for Enqueue's notifications on
	// PostgreSQL, on one connection of the pool held for as long as Run
	// runs. Leave it off behind a transaction-mode pooler (PgBouncer),
	// where LISTEN does not work: the relay then polls.
	Listen bool
	// FollowUp is how long after a NOTIFY a relay claims that tenant
	// again (50ms when 0; negative: never), for the messages whose
	// enqueues skipped their NOTIFY (Options.NotifyInterval).
	FollowUp time.Duration
	// ShutdownGrace is how long Run, once its context ends, lets running
	// handlers finish before it cancels their contexts (5s when 0; a
	// negative value cancels them at once).
	ShutdownGrace time.Duration
	// Logger receives what goes wrong outside a handler's verdict: a
	// database error, a lease lost, a completion refused as stale
	// (slog.Default() when nil).
	Logger *slog.Logger
}

// Relay claims due messages and hands them to a Handler. Run it in as
// many processes as you like: a message is leased to one relay at a time.
type Relay struct {
	o    *Outbox
	h    Handler
	opts RelayOptions

	running atomic.Bool
	waker   *waker
	stats   struct {
		claimed, delivered, retried, dead, lost, stale, errors, polls atomic.Int64
	}

	mu       sync.Mutex
	inflight map[*Delivery]*flight

	doneMu  sync.Mutex
	done    []*Delivery
	doneSig chan struct{}

	// listening is closed once the relay LISTENs (tests wait on it).
	listening chan struct{}
}

type flight struct {
	cancel  context.CancelCauseFunc
	lease   *Delivery // the heartbeats' copy of the delivery: the handler's is never written while it runs
	handled bool      // the handler returned nil: awaiting completion
	lost    bool      // a heartbeat found the lease lost and cancelled the handler
}

// RelayStats counts what a relay did since it was made.
type RelayStats struct {
	Claimed   int64 // deliveries leased
	Delivered int64 // completed (a completion written again after its reply was lost, which finds its own delivery, counts here)
	Retried   int64 // failed, due again later
	Dead      int64 // failed for good
	LeaseLost int64 // heartbeats that found the lease lapsed or taken over
	Stale     int64 // completions or failures refused: the tenure was over
	Errors    int64 // database errors
	Polls     int64 // rounds that visited every tenant
}

// NewRelay returns a relay that hands the outbox's messages to h. It does
// no I/O; Run starts it.
func (o *Outbox) NewRelay(h Handler, opts *RelayOptions) (*Relay, error) {
	if h == nil {
		return nil, racefree.Invalid("handler", "must not be nil")
	}
	r := &Relay{o: o, h: h, waker: newWaker(), inflight: map[*Delivery]*flight{}, doneSig: make(chan struct{}, 1), listening: make(chan struct{})}
	if opts != nil {
		r.opts = *opts
	}
	p := &r.opts
	if p.Worker == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		p.Worker = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
		if len(p.Worker) > MaxWorkerBytes {
			p.Worker = p.Worker[len(p.Worker)-MaxWorkerBytes:]
		}
	}
	if err := racefree.CheckText("worker", p.Worker, MaxWorkerBytes); err != nil {
		return nil, err
	}
	for _, t := range p.Topics {
		if err := racefree.CheckText("topics", t, MaxTopicBytes); err != nil {
			return nil, err
		}
	}
	for _, t := range p.Tenants {
		if err := tenant.Check(t); err != nil {
			return nil, err
		}
	}
	r.waker.serves = r.servesMessage
	if p.Concurrency == 0 {
		p.Concurrency = 16
	}
	if p.Concurrency < 1 || p.Concurrency > MaxClaim {
		return nil, racefree.Invalid("concurrency", "must be 1 to %d", MaxClaim)
	}
	if p.Batch == 0 {
		p.Batch = p.Concurrency
	}
	if p.Batch < 1 || p.Batch > MaxClaim {
		return nil, racefree.Invalid("batch", "must be 1 to %d", MaxClaim)
	}
	if p.Lease == 0 {
		p.Lease = 30 * time.Second
	}
	if err := checkLease(p.Lease); err != nil {
		return nil, err
	}
	if p.PollInterval == 0 {
		p.PollInterval = time.Second
	}
	if p.PollInterval < time.Millisecond {
		return nil, racefree.Invalid("poll interval", "must be at least 1ms")
	}
	if p.FollowUp == 0 {
		p.FollowUp = 50 * time.Millisecond
	}
	if p.ShutdownGrace == 0 {
		p.ShutdownGrace = 5 * time.Second
	}
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	if p.Listen && !o.dialect.notifies() {
		p.Listen = false // SQLite relays are woken in-process
	}
	return r, nil
}

// Worker returns the relay's name.
func (r *Relay) Worker() string { return r.opts.Worker }

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{
		Claimed: r.stats.claimed.Load(), Delivered: r.stats.delivered.Load(), Retried: r.stats.retried.Load(),
		Dead: r.stats.dead.Load(), LeaseLost: r.stats.lost.Load(), Stale: r.stats.stale.Load(), Errors: r.stats.errors.Load(),
		Polls: r.stats.polls.Load(),
	}
}

// Wake makes the relay poll tenant now (every tenant when tenant is "").
func (r *Relay) Wake(tenantID string) {
	if tenantID == "" {
		r.waker.wakeAll()
		return
	}
	r.waker.wake(tenantID)
}

// Run claims and delivers messages until ctx ends, then stops claiming,
// gives running handlers ShutdownGrace to finish, cancels the rest
// (ErrRelayStopped), records every outcome, and returns nil. A relay runs
// once at a time. Errors of the database are logged and retried at the
// next poll, never returned: Run returns an error only for a relay that
// is already running.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("outbox relay: already running")
	}
	defer r.running.Store(false)
	r.waker.start()

	// Handlers and the bookkeeping outlive ctx: past the point of no
	// return (a side effect done), recording it must not be cancelled.
	base := context.WithoutCancel(ctx)
	hctx, stopHandlers := context.WithCancelCause(base)
	defer stopHandlers(ErrRelayStopped)

	var bg sync.WaitGroup
	bgCtx, stopBG := context.WithCancel(base)
	bg.Add(1)
	go func() { defer bg.Done(); r.heartbeat(bgCtx) }()
	stopCompleter := make(chan struct{})
	completerDone := make(chan struct{})
	go func() { defer close(completerDone); r.completer(base, stopCompleter) }()
	r.o.hub.subscribe(r.waker)
	defer r.o.hub.unsubscribe(r.waker)
	if r.opts.Listen {
		bg.Add(1)
		go func() {
			defer bg.Done()
			var once sync.Once
			listen(bgCtx, r.o.db, r.waker, r.opts.FollowUp, r.report, func() { once.Do(func() { close(r.listening) }) })
		}()
	}

	var handlers sync.WaitGroup
	slots := make(chan struct{}, r.opts.Concurrency)
	freed := make(chan struct{}, 1)
	pending := map[string]bool{}
	poll := time.NewTimer(0) // visit every tenant at once
	defer poll.Stop()
	pollAll := false
	// Claims wait until a good share of the slots is free, so that a busy
	// relay claims in batches rather than one message per freed slot, but
	// never longer than batchWait.
	threshold := max(1, min(r.opts.Batch, r.opts.Concurrency)/2)
	worthIt := func(force bool) bool {
		free := cap(slots) - len(slots)
		return free > 0 && (force || free >= threshold || len(slots) == 0)
	}
	force := false
	batchWait := time.NewTimer(time.Hour)
	batchWait.Stop()
	defer batchWait.Stop()

	for ctx.Err() == nil {
		woken, all := r.waker.take()
		for t, locked := range woken {
			if r.serves(t) {
				pending[t] = pending[t] || locked
			}
		}
		polling := all || pollAll
		if polling {
			pollAll = false
			if ids, err := r.tenants(ctx); err != nil {
				if ctx.Err() == nil {
					r.report(err)
				}
			} else {
				for _, t := range ids {
					if _, ok := pending[t]; !ok {
						pending[t] = false
					}
				}
			}
		}
		// Claim for each pending tenant while there are free slots; a
		// tenant whose claim came back full stays pending.
		order := make([]string, 0, len(pending))
		for t := range pending {
			order = append(order, t)
		}
		slices.Sort(order)
		for _, t := range order {
			if !worthIt(force) || ctx.Err() != nil {
				break
			}
			n := min(r.opts.Batch, cap(slots)-len(slots))
			// Not cancelled with ctx: a claim that committed but whose
			// answer was lost would leave its messages leased to nobody
			// until their leases lapse.
			ds, err := r.claim(base, t, n, pending[t])
			if err != nil {
				if ctx.Err() == nil {
					r.report(err)
				}
				delete(pending, t)
				continue
			}
			if len(ds) < n {
				delete(pending, t)
			} else {
				pending[t] = false
			}
			for _, d := range ds {
				slots <- struct{}{}
				handlers.Add(1)
				go func() {
					defer handlers.Done()
					defer func() {
						<-slots
						select {
						case freed <- struct{}{}:
						default:
						}
					}()
					r.deliver(hctx, d)
				}()
			}
		}
		if polling {
			r.stats.polls.Add(1)
		}
		force = false
		if len(pending) > 0 && worthIt(false) {
			continue
		}
		var freedC <-chan struct{}
		var batchT <-chan time.Time
		if len(pending) > 0 {
			freedC = freed // wait for slots, then claim again
			batchWait.Reset(batchWaitMax)
			batchT = batchWait.C
		}
		select {
		case <-ctx.Done():
		case <-r.waker.c:
		case <-freedC:
		case <-batchT:
			force = true // claim for the free slots, however few
		case <-poll.C:
			pollAll = true
			poll.Reset(r.opts.PollInterval)
		}
		batchWait.Stop()
	}

	// Shut down: no more claims; let handlers finish within the grace,
	// then cancel them.
	finished := make(chan struct{})
	go func() { handlers.Wait(); close(finished) }()
	if r.opts.ShutdownGrace > 0 {
		t := time.NewTimer(r.opts.ShutdownGrace)
		select {
		case <-finished:
		case <-t.C:
		}
		t.Stop()
	}
	stopHandlers(ErrRelayStopped)
	<-finished
	close(stopCompleter) // complete what is left, then stop
	<-completerDone
	stopBG()
	bg.Wait()
	r.waker.stop()
	return nil
}

func (r *Relay) serves(t string) bool {
	return len(r.opts.Tenants) == 0 || slices.Contains(r.opts.Tenants, t)
}

// servesMessage reports whether the relay claims messages of tenant t and
// topic (of any topic when topic is "").
func (r *Relay) servesMessage(t, topic string) bool {
	return r.serves(t) && (topic == "" || len(r.opts.Topics) == 0 || slices.Contains(r.opts.Topics, topic))
}

func (r *Relay) tenants(ctx context.Context) ([]string, error) {
	if len(r.opts.Tenants) > 0 {
		return r.opts.Tenants, nil
	}
	var ids []string
	err := tenant.Each(ctx, r.o.db, func(ctx context.Context) error {
		ids = append(ids, tenant.From(ctx))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox relay: list tenants: %w", err)
	}
	return ids, nil
}

// claim claims up to n messages of tenant t, completing the tenant's
// waiting completions in the same transaction. locked skips SQLite's
// look before the write lock: the relay was woken by an Enqueue whose
// transaction may still hold that lock, and the claim must wait for it.
func (r *Relay) claim(ctx context.Context, t string, n int, locked bool) ([]*Delivery, error) {
	tctx, err := tenant.With(ctx, t)
	if err != nil {
		return nil, err
	}
	// The tenant's completions waiting for the completer ride along: one
	// commit for both.
	done := r.takeDone(t)
	ds, completed, err := r.o.claimCompleting(tctx, r.opts.Worker, n, r.opts.Lease, r.opts.Topics, done, locked)
	if err != nil {
		r.putBack(done) // the completer retries them
		return nil, err
	}
	if len(done) > 0 {
		r.settle(tctx, done, completed)
	}
	r.stats.claimed.Add(int64(len(ds)))
	return ds, nil
}

// takeDone takes the completions of tenant t waiting for the completer.
func (r *Relay) takeDone(t string) []*Delivery {
	r.doneMu.Lock()
	defer r.doneMu.Unlock()
	var mine []*Delivery
	rest := r.done[:0:0]
	for _, d := range r.done {
		if d.Tenant == t {
			mine = append(mine, d)
		} else {
			rest = append(rest, d)
		}
	}
	r.done = rest
	return mine
}

func (r *Relay) putBack(ds []*Delivery) {
	if len(ds) == 0 {
		return
	}
	r.doneMu.Lock()
	r.done = append(r.done, ds...)
	r.doneMu.Unlock()
	select {
	case r.doneSig <- struct{}{}:
	default:
	}
}

// settle counts the completions of ds that landed (completed) and stops
// tracking ds. A delivery whose completion did not land now is asked why
// (whyNot): delivered at its own fence, an earlier completion of the
// same tenure landed (one whose reply was lost, retried by the completer
// or carried by a later claim), and the delivery is counted delivered;
// otherwise its tenure was over, and it is counted and logged stale.
func (r *Relay) settle(ctx context.Context, ds []*Delivery, completed []tenure) {
	defer r.untrack(ds...)
	r.stats.delivered.Add(int64(len(completed)))
	if len(completed) == len(ds) {
		return
	}
	ok := map[tenure]bool{}
	for _, t := range completed {
		ok[t] = true
	}
	for _, d := range ds {
		if ok[tenureOf(d)] {
			continue
		}
		why := r.o.whyNot(ctx, r.o.db, d)
		if errors.Is(why, ErrDelivered) {
			r.stats.delivered.Add(1)
			continue
		}
		r.stats.stale.Add(1)
		r.opts.Logger.Warn("outbox relay: completion refused, the tenure was over (the message will be or was delivered again)",
			"worker", r.opts.Worker, "id", d.ID, "fence", d.Fence, "error", why)
	}
}

func (r *Relay) report(err error) {
	r.stats.errors.Add(1)
	r.opts.Logger.Warn("outbox relay", "worker", r.opts.Worker, "error", err)
}

// deliver runs the handler on d and records the outcome: a success goes
// to the completer (batched), a failure is recorded at once.
func (r *Relay) deliver(hctx context.Context, d *Delivery) {
	dctx, cancel := context.WithCancelCause(hctx)
	defer cancel(nil)
	r.mu.Lock()
	lease := *d // before the handler runs: it may read d, and the heartbeats write their copy
	r.inflight[d] = &flight{cancel: cancel, lease: &lease}
	r.mu.Unlock()

	var err error
	if d.Attempt > d.MaxAttempts {
		err = ErrAttemptsExhausted // the last lease lapsed: no handler
	} else {
		err = r.call(dctx, d)
	}
	if err == nil {
		r.mu.Lock()
		if f := r.inflight[d]; f != nil {
			f.handled = true
		}
		r.mu.Unlock()
		r.doneMu.Lock()
		r.done = append(r.done, d)
		r.doneMu.Unlock()
		select {
		case r.doneSig <- struct{}{}:
		default:
		}
		return
	}
	defer r.untrack(d)
	// Recording the failure runs to its end whatever happens to ctx.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(hctx), 30*time.Second)
	defer fcancel()
	if errors.Is(context.Cause(dctx), ErrRelayStopped) {
		// Stopped, not failed: due again at once, for another relay.
		if ferr := r.o.release(fctx, d, 0, cleanError(fmt.Errorf("%w: %w", ErrRelayStopped, err))); ferr != nil {
			r.report(ferr)
		}
		return
	}
	// A failure whose reply was lost may have landed: Fail again settles
	// it, recording the failure or finding its own recorded.
	var out *Outcome
	ferr := settle(fctx, r.report, func() (ferr error) {
		out, ferr = r.o.Fail(fctx, d, err)
		return ferr
	})
	switch {
	case errors.Is(ferr, racefree.ErrStaleFence) || errors.Is(ferr, racefree.ErrNotHeld):
		r.stats.stale.Add(1)
		r.opts.Logger.Warn("outbox relay: failure not recorded, the tenure was over", "worker", r.opts.Worker, "id", d.ID, "fence", d.Fence, "error", ferr)
	case ferr != nil:
		r.report(ferr)
	case out.Dead:
		r.stats.dead.Add(1)
	default:
		r.stats.retried.Add(1)
	}
}

// call runs the handler, turning a panic into an error.
func (r *Relay) call(ctx context.Context, d *Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("outbox handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return r.h(ctx, d)
}

func (r *Relay) untrack(ds ...*Delivery) {
	r.mu.Lock()
	for _, d := range ds {
		delete(r.inflight, d)
	}
	r.mu.Unlock()
}

// completer completes the handled deliveries that no claim took along
// (a busy relay's next claim completes them in its own transaction): it
// waits completeLinger for that claim, then writes what is left, all of it
// in one statement per tenant. Once stop is closed it writes what is left
// and returns.
func (r *Relay) completer(ctx context.Context, stop <-chan struct{}) {
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	for {
		select {
		case <-r.doneSig:
		case <-stop:
			r.flush(ctx)
			return
		}
		// Give the next claim, which takes the completions along, a
		// moment; then write what it left.
		linger.Reset(completeLinger)
		select {
		case <-linger.C:
		case <-stop:
			r.flush(ctx)
			return
		}
		r.flush(ctx)
	}
}

func (r *Relay) flush(ctx context.Context) {
	r.doneMu.Lock()
	batch := r.done
	r.done = nil
	r.doneMu.Unlock()
	if len(batch) == 0 {
		return
	}
	byTenant := map[string][]*Delivery{}
	for _, d := range batch {
		byTenant[d.Tenant] = append(byTenant[d.Tenant], d)
	}
	for t, ds := range byTenant {
		r.completeBatch(ctx, t, ds)
	}
}

// completeBatch completes ds (of tenant t), retrying database errors for
// a while: a completion that never lands leaves the messages to be
// delivered again once their leases lapse, which is safe, only wasteful.
func (r *Relay) completeBatch(ctx context.Context, t string, ds []*Delivery) {
	tctx, err := tenant.With(ctx, t)
	if err != nil {
		r.report(err)
		return
	}
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		var done []tenure
		cctx, cancel := context.WithTimeout(tctx, 30*time.Second)
		err = r.o.run(cctx, r.o.db, func(exec racefree.Executor) error {
			var err error
			done, err = r.o.complete(cctx, exec, t, ds)
			return err
		})
		cancel()
		if err == nil {
			r.settle(tctx, ds, done)
			return
		}
		r.report(fmt.Errorf("outbox complete: %w", err))
		if attempt == 5 {
			// Given up: stop heartbeating them, so their leases lapse and
			// they are delivered again.
			r.untrack(ds...)
			return
		}
		t := time.NewTimer(wait)
		<-t.C
		wait *= 2
	}
}

// heartbeat extends the leases of the deliveries in flight every Lease/3;
// a delivery whose lease could not be extended loses it: its handler's
// context is cancelled with ErrLeaseLost. It heartbeats each flight's
// copy of its delivery (Heartbeat writes LeaseExpiresAt), never the one
// the handler holds, which the handler may read while it runs.
func (r *Relay) heartbeat(ctx context.Context) {
	tick := time.NewTicker(r.opts.Lease / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.mu.Lock()
		byTenant := map[string][]*Delivery{}
		handed := map[*Delivery]*Delivery{} // each heartbeat's copy to the delivery its handler holds
		for d, f := range r.inflight {
			if !f.lost { // a lost lease is not extended again
				byTenant[d.Tenant] = append(byTenant[d.Tenant], f.lease)
				handed[f.lease] = d
			}
		}
		r.mu.Unlock()
		for t, ds := range byTenant {
			tctx, err := tenant.With(ctx, t)
			if err != nil {
				continue
			}
			for len(ds) > 0 {
				chunk := ds[:min(len(ds), MaxClaim)]
				ds = ds[len(chunk):]
				lost, err := r.o.Heartbeat(tctx, chunk, r.opts.Lease)
				if err != nil {
					if ctx.Err() == nil {
						r.report(err)
					}
					continue
				}
				for _, l := range lost {
					d := handed[l]
					r.mu.Lock()
					f := r.inflight[d]
					skip := f == nil || f.handled || f.lost
					if !skip {
						f.lost = true // once: the handler may take a while to return
					}
					r.mu.Unlock()
					if skip {
						continue // completed meanwhile, the completion will tell, or already lost
					}
					r.stats.lost.Add(1)
					r.opts.Logger.Warn("outbox relay: lease lost", "worker", r.opts.Worker, "id", d.ID, "fence", d.Fence)
					f.cancel(ErrLeaseLost)
				}
			}
		}
	}
}
