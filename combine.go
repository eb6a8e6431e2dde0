package racefree

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/racefree/racefree/internal/statement"
	"github.com/racefree/racefree/internal/wire"
)

// many reports whether every statement of op has a Many form.
func many(op *wire.Op) bool {
	for _, st := range op.Stmts {
		if st.Many == "" {
			return false
		}
	}
	return len(op.Stmts) > 0
}

// sameForm reports whether a and b run as one form: both run their
// statements one by one, or both run the same Many forms. On an engine
// that pipelines, only operations of one form share a batch (manyBatch
// runs the first operation's forms for all of them); on the others, a
// batch runs each form's operations together (runTx).
func sameForm(a, b *wire.Op) bool {
	if many(a) != many(b) {
		return false
	}
	if !many(a) {
		return true
	}
	return slices.EqualFunc(a.Stmts, b.Stmts, func(x, y *wire.Statement) bool { return x.Many == y.Many })
}

// keysApart reports whether a batch led by op holds at most one
// operation of each Key. It does on an engine that pipelines
// (PostgreSQL), whose batch sends every statement before any result comes
// back, locks rows in the order of the batch's keys, and runs the
// statements of two or more operations as one statement over arrays,
// which cannot update one row twice; and wherever op's statements have
// Many forms, whatever the engine, since one statement over arrays sees
// none of the rows its other elements write. (On an engine that
// pipelines, every operation of a batch has the leader's forms,
// sameForm; on the others a batch mixes forms, so take asks this of each
// operation it adds and of the one of its key already in the batch.)
// Elsewhere (SQLite) a batch runs each
// operation's statements one after the other in one transaction, each
// seeing the writes of those before it, exactly as if they had run alone
// in that order: operations of one key share a batch, in the order they
// came (runBatch), and a hot key commits many operations at once.
func (db *DB) keysApart(op *wire.Op) bool {
	_, pipelines := db.engine.(wire.Pipeliner)
	return pipelines || many(op)
}

// CombineStats are the combiner's figures since the DB opened.
type CombineStats struct {
	Batches   int64         // batches committed: one commit each
	Ops       int64         // operations in those batches
	MaxBatch  int           // the largest batch
	Many      int64         // operations in those batches whose statements ran as Many forms: one statement per form for many operations ([wire.ManyBinder])
	Folded    int64         // operations in those batches that ran folded with others of their key ([wire.Op].Fold)
	QueueWait time.Duration // summed over the operations: from Combine to their batch's start
	Failed    int64         // batches that failed whole, committed nothing, and whose operations ran alone
	Unknown   int64         // batches whose outcome is unknown (the commit got no answer): each operation was answered the batch's error, none ran alone
	Yields    int64         // times a caller about to take a batch first yielded the processor (runtime.Gosched), so that callers ready to run could join it
	Queued    int           // operations waiting now
	Running   int           // operations of the batch in flight now
}

// combineTimeout bounds a batch on PostgreSQL, which runs on the context
// of none of its callers: a caller that gives up must not fail the others.
const combineTimeout = time.Minute

// combiner gathers the operations of concurrent Combine calls. It has no
// goroutine of its own: the caller that finds no batch in flight leads,
// runs a batch, and hands the lead to the first caller still waiting.
type combiner struct {
	mu      sync.Mutex
	leads   int // batches in flight, each run by a leading caller
	queue   []*pending
	arrived uint64 // Combine calls so far: the next one's pending.arrival
	// answered is how many callers the batch that ended last answered:
	// when more than one, the others may be about to call again, and a
	// caller that leads yields the processor before taking its batch.
	answered int
	stats    CombineStats
}

// pending is one Combine call. Its wake receives exactly one signal: the
// lead (batch set), or the result (ran, err).
type pending struct {
	op       *wire.Op
	since    time.Time
	arrival  uint64 // the order of the call among Combine's, under combiner.mu
	wake     chan struct{}
	batch    []*pending // the batch it leads, from the moment it leads
	followed bool       // its batch runs another op of its key right after it: its IfMissed statements may run
	leads    bool       // handed the lead: it takes its batch when it wakes
	many     bool       // its statements ran as Many forms (settleMany)
	folded   bool       // it ran in a fold ([wire.Op].Fold)
	ran      bool
	err      error
}

// combine runs op in a batch with the operations of concurrent Combine
// calls, as one transaction, and returns once that transaction committed:
// on SQLite one IMMEDIATE transaction whose statements run prepared, in
// which eight or more operations whose statements have the same Many
// forms run as one statement per form over a JSON array, and the others
// one by one; on PostgreSQL one pipelined batch (one round trip, one
// commit), in which two or more operations whose statements have Many
// forms run as one statement per form over arrays, whatever their number
// ([wire.ManyBinder]: the fewest operations a Many form runs for). A call
// that finds no batch in flight starts one at once, once the goroutines
// ready to run have had their turn to join it (runtime.Gosched: never a
// timer, so an idle DB adds no wait); otherwise the next batch leaves as
// soon as one in flight is done, and another starts beside it only when a
// quarter of Config.CombineMax operations wait and fewer than
// Config.CombineBatches run.
// A batch holds at most Config.CombineMax operations of one Group, and
// runs them in the order of their keys, so that two processes' batches
// take row locks in the same order, and the operations of one key in the
// order they came (on SQLite, whose write lock excludes every other
// writer, form by form, each form's operations in that order). On
// PostgreSQL, and for every operation whose statements have Many forms,
// it never holds two of one Key (DB.keysApart): the later waits for the
// next batch. On SQLite, whose batch runs each operation's statements one
// after the other, each seeing the writes of those before it, operations
// of one key share a batch, each deciding on the state the one before it
// left, as if it had run alone just after it: a hot key commits many
// operations at once. There, a run of two or more operations of one key
// with one FoldAs that follow one another runs at once, through the
// first one's Fold ([wire.Op].Fold), which decides each of them as they
// would one after the other.
//
// It reports whether op ran. False, with a nil error, when Config.Combine
// is off, or when op's batch failed as a whole and the database is known
// to have committed nothing of it (ErrNotCommitted: a statement's error,
// a commit the database refused, nothing sent): the caller runs op alone,
// so one operation's failure never fails the others. A transient conflict
// (ErrRetryable, which is known to have committed nothing) runs the batch
// again first, as InTx does. True with ctx's error when ctx ended before
// Combine was called or while op waited for a batch: op never ran. Once op's batch began, it runs to its
// end on a context of its own, and Combine returns its outcome, unless
// the Deadline of an operation in it (Op.Deadline) ended it first: then
// it failed as a whole, and the server's answer says it committed nothing.
//
// A batch whose outcome is unknown (the statements and the commit were
// sent and no answer came: a connection lost, a timeout) may have
// committed: Combine never runs it again, nor any op of it alone, and
// reports true with the batch's error to each of its callers, after
// InterpretError: on PostgreSQL, ErrUnavailable for a lost connection,
// what one call alone returns when its own commit's answer is lost. The
// caller settles it as it would alone: re-read, or retry with what makes
// the retry safe (an idempotency key, a fence). On SQLite, which commits
// in the process, only an I/O error at the commit leaves the outcome
// unknown ([wire.CommitJudge]).
func (db *DB) combine(ctx context.Context, op *wire.Op) (bool, error) {
	if !db.combining() {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return true, err // never queued: a batch would run it on a context of its own
	}
	c := &db.comb
	p := &pending{op: op, since: time.Now(), wake: make(chan struct{}, 1)}
	c.mu.Lock()
	p.arrival = c.arrived
	c.arrived++
	// A batch starts at once when none is in flight: an idle DB adds no
	// wait. While one is, the call queues for the next, unless a quarter
	// of CombineMax is waiting and fewer than CombineBatches are in
	// flight: then it starts another with them. Letting every caller that
	// finds a free place start a batch made batches of one or two, each
	// paying a commit, where keeping the place for a pile-up makes them
	// several times larger.
	lead := c.leads == 0 || c.leads < db.cfg.CombineBatches && len(c.queue)+1 >= max(2, db.cfg.CombineMax/4)
	yield := false
	if lead {
		c.leads++
		yield = c.answered > 1 || len(c.queue) > 0
	} else {
		c.queue = append(c.queue, p)
	}
	c.mu.Unlock()
	if !lead {
		select {
		case <-p.wake:
		case <-ctx.Done():
			c.mu.Lock()
			if i := slices.Index(c.queue, p); i >= 0 {
				c.queue = slices.Delete(c.queue, i, i+1)
				c.mu.Unlock()
				return true, ctx.Err()
			}
			c.mu.Unlock()
			<-p.wake // op is in a batch, or leads the next one
		}
	}
	if lead || p.leads {
		// Leading, or handed the lead: yield the processor once, then
		// take the batch, so that the callers ready to run now (those the
		// last batch answered, calling again) queue first and are in it.
		// Taken at once, a batch that found none in flight held its
		// leader alone, the callers that came a moment later queued for
		// the next, and batches of a hot key averaged two operations
		// where they now hold eight or more. Yielding waits for no timer,
		// but it is not free: it wakes another thread to look for work,
		// about a tenth of a claim's CPU at one client. So a caller yields
		// only when others may be about to join: it was handed the lead
		// (others were queued), or the last batch answered more callers
		// than its leader. A lone caller, one batch of one after another,
		// never yields.
		if yield || p.leads {
			c.mu.Lock()
			c.stats.Yields++
			c.mu.Unlock()
			runtime.Gosched()
		}
		c.mu.Lock()
		p.batch = c.take(p, db.cfg.CombineMax, !db.canPipeline(), db.keysApart)
		c.mu.Unlock()
	}
	if p.batch != nil {
		db.lead(context.WithoutCancel(ctx), p.batch)
	}
	return p.ran, p.err
}

// combining reports whether Config.Combine is on: CombineDefault and
// CombineOn combine, CombineOff does not.
func (db *DB) combining() bool { return db.cfg.Combine != CombineOff }

// CombineStats returns the combiner's figures.
func (db *DB) CombineStats() CombineStats {
	c := &db.comb
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Queued = len(c.queue)
	return s
}

// lead runs one batch, whose first operation is the leader's own, then
// hands the lead to the first operation still queued.
func (db *DB) lead(ctx context.Context, batch []*pending) {
	c := &db.comb
	err := db.runBatch(ctx, batch)
	// Only a batch known to have committed nothing lets its operations
	// run alone; one that may have committed answers each of them with
	// its error, as a call alone whose commit got no answer.
	alone := err != nil && errors.Is(err, ErrNotCommitted)

	c.mu.Lock()
	c.stats.Running -= len(batch)
	switch {
	case err == nil:
		c.stats.Batches++
		c.stats.Ops += int64(len(batch))
		c.stats.MaxBatch = max(c.stats.MaxBatch, len(batch))
		for _, p := range batch {
			if p.many {
				c.stats.Many++
			}
			if p.folded {
				c.stats.Folded++
			}
		}
	case alone:
		c.stats.Failed++
	default:
		c.stats.Unknown++
	}
	for i, p := range batch {
		// Only now, after the commit: each caller returns only after its
		// batch committed, or after its outcome became unknown.
		p.ran = !alone
		switch {
		case alone:
			p.err = nil
		case err != nil:
			p.err = err
		}
		if i > 0 {
			p.wake <- struct{}{}
		}
	}
	c.answered = len(batch)
	idle := len(c.queue) == 0
	if idle {
		c.leads--
	} else {
		next := c.queue[0]
		c.queue = slices.Delete(c.queue, 0, 1)
		next.leads = true
		next.wake <- struct{}{}
	}
	c.mu.Unlock()
	if idle {
		db.writer.rest() // no batch follows now: the pool is whole again soon
	}
}

// take makes the batch that lead leads: lead's operation (not queued),
// then, in order, the queued operations of the same group, and of the
// same form (sameForm) unless mixed, up to n, which it removes from the
// queue. An operation whose key is already in the batch is passed over
// when apart (DB.keysApart) holds for it or for the one of its key in the
// batch; otherwise operations of one key share it. An operation passed
// over keeps its place, and so does every later one of its key, which
// never joins a batch ahead of it: operations on one key run in the order
// they came. c.mu is held.
func (c *combiner) take(lead *pending, n int, mixed bool, apart func(*wire.Op) bool) []*pending {
	first := lead.op
	group := first.Group
	keys := map[string]bool{first.Key: apart(first)} // in the batch: whether its op keeps the key apart
	passed := map[string]bool{}                      // passed over: later ones of the key wait too
	batch := []*pending{lead}
	now := time.Now()
	c.stats.QueueWait += now.Sub(lead.since)
	rest := c.queue[:0]
	for _, p := range c.queue {
		k := p.op.Key
		apartIn, in := keys[k]
		if len(batch) < n && p.op.Group == group && !passed[k] && !(in && (apartIn || apart(p.op))) && (mixed || sameForm(first, p.op)) {
			keys[k] = apartIn || apart(p.op)
			batch = append(batch, p)
			c.stats.QueueWait += now.Sub(p.since)
			continue
		}
		if p.op.Group == group {
			passed[k] = true
		}
		rest = append(rest, p)
	}
	clear(c.queue[len(rest):])
	c.queue = rest
	c.stats.Running += len(batch)
	return batch
}

// runBatch runs the operations of batch in one transaction, in the order
// of their keys, and the operations of one key in the order they came
// (pending.arrival: the leader's may be later than those it took), so
// that each sees the state the one before it left (batch[0] stays the
// leader's in batch), and sets each
// one's err to its own outcome. Its error matches ErrNotCommitted when
// the batch is known to have committed nothing; any other error leaves
// the outcome unknown, and is never retried. The earliest
// Op.Deadline of batch ends it: on an engine that can bound a pipeline on
// the server ([wire.ServerBound]), the server ends it, and answers so; on the
// others, the batch's context. A pipeline's statements and its commit are
// all sent at once, so a client that gave up on it could not stop the
// server from committing it later (once a lock it waited for is free).
func (db *DB) runBatch(ctx context.Context, batch []*pending) error {
	ops := make([]*pending, len(batch))
	copy(ops, batch)
	slices.SortFunc(ops, func(a, b *pending) int {
		return cmp.Or(strings.Compare(a.op.Key, b.op.Key), cmp.Compare(a.arrival, b.arrival))
	})
	for i, p := range ops {
		p.followed = i+1 < len(ops) && ops[i+1].op.Key == p.op.Key
	}
	var deadline time.Time
	for _, p := range ops {
		if d := p.op.Deadline; !d.IsZero() && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
	}
	p, pipelines := db.engine.(wire.Pipeliner)
	sb, serverBound := db.engine.(wire.ServerBound)
	if pipelines {
		if !deadline.IsZero() && !serverBound {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		ctx, cancel := context.WithTimeout(ctx, combineTimeout)
		defer cancel()
		// The wait for a connection is the client's alone: the server
		// bounds only what it runs. So it ends at the earliest Deadline
		// on every engine, or a batch that got a connection late would
		// commit operations whose callers had given up long before.
		waits := ctx
		if !deadline.IsZero() && serverBound {
			var cancel context.CancelFunc
			waits, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		return db.retryBatch(ctx, func() error {
			var bound []*wire.Statement
			if serverBound && !deadline.IsZero() {
				bound = append(bound, sb.Bound(max(time.Until(deadline), time.Millisecond)))
			}
			return db.pipelineBatch(ctx, waits, p, bound, ops)
		})
	}
	// No timeout on SQLite, whose busy timeout bounds every wait. The
	// earliest Deadline bounds only what waits for another writer: BEGIN
	// IMMEDIATE (or the statement alone, which takes the write lock
	// itself) and the retries after SQLITE_BUSY. Once the batch holds the
	// write lock, its statements and its commit wait for no one (WAL:
	// readers never block a writer), and they run on the batch's own
	// context: the driver watches a context that can end with a goroutine
	// per statement, which cost a fifth of a claim at one client. The
	// transaction itself is bound to the deadline (database/sql rolls it
	// back when it passes), so a batch that outlives it by a statement or
	// two either commits before it rolls back, or commits nothing.
	waits := ctx
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		waits, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	if len(ops) == 1 && len(ops[0].stmts()) == 1 && len(ops[0].op.Begin) == 0 {
		// One statement alone commits by itself: no BEGIN and COMMIT.
		return db.retryBatch(waits, func() error { return db.judgeCommit(db.runOp(waits, db.poolRunner(), ops[0])) })
	}
	defer db.prepareOps(ctx, ops)
	clocks := engineClocks(ops)
	defer setClocks(clocks, nil) // alone, each reads the clock again
	if w := db.takeWriter(waits, len(ops)); w != nil {
		defer w.mu.Unlock()
		return db.retryBatch(waits, func() error {
			if err := w.open(waits, db.sql); err != nil { // after a try that broke it
				return NotCommitted(fmt.Errorf("begin: %w", err))
			}
			return db.runOnWriter(ctx, waits, w, ops, clocks)
		})
	}
	return db.retryBatch(waits, func() error {
		tx, err := db.sql.BeginTx(waits, nil)
		if err != nil {
			return NotCommitted(fmt.Errorf("begin: %w", err))
		}
		setClocks(clocks, Millis(time.Now())) // under the write lock
		if err := db.runTx(ctx, txRunner(db, tx), ops); err != nil {
			_ = tx.Rollback()
			return NotCommitted(err) // no COMMIT was sent
		}
		if err := expired(waits); err != nil {
			_ = tx.Rollback()
			return NotCommitted(fmt.Errorf("commit: %w", err))
		}
		if err := tx.Commit(); err != nil {
			return db.judgeCommit(fmt.Errorf("commit: %w", err))
		}
		return nil
	})
}

// expired returns ctx's error, or context.DeadlineExceeded once the
// clock has passed ctx's deadline though its timer has not fired yet: on
// a loaded machine a timer fires late (tens of milliseconds), and a batch
// whose deadline passed must not send its COMMIT in that gap, after its
// callers, whose own timers fired first, were told it failed.
func expired(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// engineClocks returns the clock parameters of ops' statements
// (wire.Statement.Clock) that name the engine's clock (nil), for
// setClocks.
func engineClocks(ops []*pending) []*any {
	var clocks []*any
	for _, p := range ops {
		for _, st := range p.op.Stmts {
			if st.Clock > 0 && st.Args[st.Clock-1] == nil {
				clocks = append(clocks, &st.Args[st.Clock-1])
			}
		}
	}
	return clocks
}

// setClocks sets each of clocks to v: Unix milliseconds read under a
// batch's write lock, or nil again, the engine's clock, once the batch is
// over.
func setClocks(clocks []*any, v any) {
	for _, c := range clocks {
		*c = v
	}
}

// runTx runs the first operation's Begin, then every operation of ops,
// through run. On an engine that binds Many forms ([wire.ManyBinder]) it runs ops
// form by form (forms), the forms in the order of their first operation:
// the operations of a form that has Many forms, when they are at least
// the engine's ManyFrom, each form once for all of them (runMany); the
// others one by one, in order, each run of them that folds at once
// (runOps).
func (db *DB) runTx(ctx context.Context, run runner, ops []*pending) error {
	for _, st := range ops[0].op.Begin {
		if _, err := run(ctx, st); err != nil {
			return err
		}
	}
	b, binds := db.engine.(wire.ManyBinder)
	if !binds {
		return db.runOps(ctx, run, ops)
	}
	for _, form := range forms(ops) {
		var err error
		if many(form[0].op) && len(form) >= max(2, b.ManyFrom()) {
			err = db.runMany(ctx, run, b, form)
		} else {
			// Too few for their Many forms, which over an array of one
			// element (on SQLite, of fewer than eight) cost more than the
			// statements they stand for.
			err = db.runOps(ctx, run, form)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// runOps runs every operation of ops through run, one by one, in order,
// but for a run of two or more that fold together (foldRun), which runs
// at once (runFold).
func (db *DB) runOps(ctx context.Context, run runner, ops []*pending) error {
	for i := 0; i < len(ops); {
		n := foldRun(ops[i:])
		var err error
		if n >= 2 {
			err = runFold(ctx, run, ops[i:i+n])
		} else {
			err = db.runOp(ctx, run, ops[i]) // n is 1
		}
		if err != nil {
			return err
		}
		i += n
	}
	return nil
}

// foldRun returns how many operations from ops[0] on fold together: ops[0]
// has a Fold and a FoldAs, and those after it that follow it with its Key
// and its FoldAs ([wire.Op].Fold).
func foldRun(ops []*pending) int {
	first := ops[0].op
	if first.Fold == nil || first.FoldAs == "" {
		return 1
	}
	n := 1
	for n < len(ops) && ops[n].op.Key == first.Key && ops[n].op.FoldAs == first.FoldAs {
		n++
	}
	return n
}

// runFold runs ops, a run of operations that fold together, through the
// first one's Fold, in the order they came; each counts as run.
func runFold(ctx context.Context, run runner, ops []*pending) error {
	folded := make([]*wire.Op, len(ops))
	for i, p := range ops {
		p.err, p.many, p.folded = nil, false, true
		folded[i] = p.op
	}
	return ops[0].op.Fold(ctx, wire.Run(run), folded)
}

// forms splits ops by form (sameForm), in the order of each form's first
// operation; each form keeps its operations in the order of ops.
func forms(ops []*pending) [][]*pending {
	var out [][]*pending
	for _, p := range ops {
		i := slices.IndexFunc(out, func(f []*pending) bool { return sameForm(f[0].op, p.op) })
		if i < 0 {
			out = append(out, []*pending{p})
		} else {
			out[i] = append(out[i], p)
		}
	}
	return out
}

// judgeCommit marks err, returned by a COMMIT or by a statement that
// commits by itself, ErrNotCommitted unless the engine says it may have
// committed ([wire.CommitJudge]); an engine that cannot tell leaves every such
// error unknown.
func (db *DB) judgeCommit(err error) error {
	if err == nil {
		return nil
	}
	if j, ok := db.engine.(wire.CommitJudge); ok && !j.MayHaveCommitted(err) {
		return NotCommitted(err)
	}
	return err
}

// retryBatch is retry for a batch: it runs op again only after a transient
// conflict known to have committed nothing (ErrRetryable and
// ErrNotCommitted). A batch that may have committed is never run again.
func (db *DB) retryBatch(ctx context.Context, op func() error) error {
	return db.retryIf(ctx, op, func(err error) bool {
		return errors.Is(err, ErrRetryable) && errors.Is(err, ErrNotCommitted)
	})
}

// prepareOps prepares on the pool (DB.prepared) the statements of ops
// that a batch's transaction ran unprepared (Many forms, for the
// operations that ran them), once the transaction no longer holds its
// connection, so that the next batches run them prepared.
func (db *DB) prepareOps(ctx context.Context, ops []*pending) {
	for _, p := range ops {
		for _, st := range p.op.Begin {
			db.prepareOnce(ctx, st.Query)
		}
		for _, st := range p.op.Stmts {
			if p.many {
				db.prepareOnce(ctx, st.Many)
			} else {
				db.prepareOnce(ctx, st.Query)
			}
		}
	}
}

// prepareOnce prepares query on the pool unless it is already.
func (db *DB) prepareOnce(ctx context.Context, query string) {
	if db.preparedAlready(query) == nil {
		db.prepared(ctx, query)
	}
}

// stmts returns the statements of p's operation that its batch may run:
// an IfMissed statement only when p is followed (runOp runs it only after
// a miss; a pipeline never).
func (p *pending) stmts() []*wire.Statement {
	if p.followed || !slices.ContainsFunc(p.op.Stmts, missed) {
		return p.op.Stmts
	}
	return slices.DeleteFunc(slices.Clone(p.op.Stmts), missed)
}

// missed reports whether st is an IfMissed statement.
func missed(st *wire.Statement) bool { return st.IfMissed }

// runOp runs p's statements (pending.stmts) through run, an IfMissed one
// only when the statement before it found no row, and sets p.err to
// ErrNotFound when a Dest statement found no row. Any other error is
// returned: the batch fails.
func (db *DB) runOp(ctx context.Context, run runner, p *pending) error {
	p.err, p.many, p.folded = nil, false, false
	found := true // the statement before: a miss runs the IfMissed one after it
	for _, st := range p.stmts() {
		if st.IfMissed && found {
			continue
		}
		var err error
		found, err = run(ctx, st)
		if err != nil {
			return err
		}
		if !found && p.err == nil {
			p.err = ErrNotFound
		}
	}
	return nil
}

// runner runs one statement of a batch where the batch runs, and reports
// whether a Dest statement found its row (true for the others):
// DB.poolRunner on the pool, txRunner in a *sql.Tx, writer.runner on the
// combiner's writer.
type runner func(ctx context.Context, st *wire.Statement) (found bool, err error)

// poolRunner runs each statement on the pool, prepared there
// (DB.prepared).
func (db *DB) poolRunner() runner {
	return func(ctx context.Context, st *wire.Statement) (bool, error) {
		return statement.Run(ctx, db.sql, db.prepared(ctx, st.Query), statementOf(st))
	}
}

// txRunner runs each statement in tx, prepared for it when the pool
// holds its preparation already (made tx's: StmtContext), else
// unprepared. Making one would take a connection of the pool, and the
// transaction may hold its last (a pool of one waited for itself for
// ever); the batch prepares its statements once it committed
// (prepareOps).
func txRunner(db *DB, tx *sql.Tx) runner {
	return func(ctx context.Context, st *wire.Statement) (bool, error) {
		var ps *sql.Stmt
		if p := db.preparedAlready(st.Query); p != nil {
			ps = tx.StmtContext(ctx, p)
		}
		return statement.Run(ctx, tx, ps, statementOf(st))
	}
}

// statementOf returns st as package statement runs it.
func statementOf(st *wire.Statement) statement.Statement {
	var rows func(statement.Rows) error
	if st.Rows != nil {
		rows = func(r statement.Rows) error { return st.Rows(r) }
	}
	return statement.Statement{Query: st.Query, Args: st.Args, Rows: rows, Dest: st.Dest, Affected: &st.RowsAffected}
}

// pipelineBatch sends ops as one pipelined transaction ([wire.Pipeliner]): the
// first operation's Begin, then bound (runBatch's server-side bound, if
// any), then every operation's statements. waits bounds the wait for a
// connection, ctx the round trip. A Dest
// statement that finds no row is an outcome of its operation, not an error
// of the batch.
func (db *DB) pipelineBatch(ctx, waits context.Context, p wire.Pipeliner, bound []*wire.Statement, ops []*pending) error {
	if b, ok := db.engine.(wire.ManyBinder); ok && len(ops) >= max(2, b.ManyFrom()) && many(ops[0].op) {
		// One operation alone runs its own statements: a statement over
		// arrays of one element costs more than the statement it stands for.
		return db.manyBatch(ctx, waits, p, b, bound, ops)
	}
	stmts := append(append([]*wire.Statement(nil), ops[0].op.Begin...), bound...)
	off := len(stmts)
	type sent struct {
		op    *pending
		st    *wire.Statement
		found bool
	}
	var all []*sent
	for _, o := range ops {
		o.err, o.many = nil, false
		for _, st := range o.stmts() {
			if st.IfMissed {
				continue // a pipeline's statements go before any result comes back
			}
			s := &sent{op: o, st: st, found: true}
			all = append(all, s)
			stmts = append(stmts, &wire.Statement{Query: st.Query, Args: st.Args, Rows: func(r wire.Rows) error {
				switch {
				case st.Rows != nil:
					return st.Rows(r)
				case st.Dest != nil:
					if s.found = r.Next(); s.found {
						return r.Scan(st.Dest...)
					}
				}
				return nil
			}})
		}
	}
	if err := db.pipelineFresh(ctx, waits, p, stmts); err != nil {
		return err
	}
	for i, s := range all {
		s.st.RowsAffected = stmts[off+i].RowsAffected
		if !s.found && s.op.err == nil {
			s.op.err = ErrNotFound
		}
	}
	return nil
}

// manyBatch sends ops, which share their Many forms (sameForm), as one
// pipelined transaction: the first operation's Begin, then each form once,
// over the arguments of every operation in the order of ops (the order of
// their keys), bound by b. It hands each returned row to the operation
// whose place leads the row (manyRows), so that every caller reads its
// own row whatever order the rows come back in. bound, sent after Begin,
// is runBatch's server-side bound ([wire.ServerBound]), if any; then, on
// an engine that plans a statement for its values ([wire.GenericPlanner]),
// the setting that runs the forms on their generic plans.
func (db *DB) manyBatch(ctx, waits context.Context, p wire.Pipeliner, b wire.ManyBinder, bound []*wire.Statement, ops []*pending) error {
	stmts := append(append([]*wire.Statement(nil), ops[0].op.Begin...), bound...)
	if g, ok := db.engine.(wire.GenericPlanner); ok {
		stmts = append(stmts, g.GenericPlan())
	}
	forms := ops[0].op.Stmts
	found := make([][]bool, len(forms))
	for j, form := range forms {
		args, err := manyArgs(b, ops, j)
		if err != nil {
			return NotCommitted(err) // nothing sent
		}
		found[j] = make([]bool, len(ops))
		stmts = append(stmts, &wire.Statement{Query: form.Many, Args: args, Rows: func(r wire.Rows) error {
			return manyRows(r, ops, j, found[j], nil)
		}})
	}
	if err := db.pipelineFresh(ctx, waits, p, stmts); err != nil {
		return err
	}
	settleMany(ops, found)
	return nil
}

// runMany runs through run the Many forms that ops share (sameForm), each once
// over the arguments of every operation in the order of ops, bound by b,
// and hands each returned row to the operation whose place leads it
// (manyRows), as manyBatch does in a pipeline.
func (db *DB) runMany(ctx context.Context, run runner, b wire.ManyBinder, ops []*pending) error {
	forms := ops[0].op.Stmts
	found := make([][]bool, len(forms))
	for j, form := range forms {
		args, err := manyArgs(b, ops, j)
		if err != nil {
			return err
		}
		found[j] = make([]bool, len(ops))
		// Rows.Scan, database/sql's and the writer's (statement.Direct),
		// takes no nil destination: the columns after the place go to
		// sinks until the place names their operation.
		sinks := make([]any, len(form.Dest))
		for k := range sinks {
			sinks[k] = new(any)
		}
		st := &wire.Statement{Query: form.Many, Args: args, Rows: func(r wire.Rows) error {
			return manyRows(r, ops, j, found[j], sinks)
		}}
		if _, err := run(ctx, st); err != nil {
			return err
		}
	}
	settleMany(ops, found)
	return nil
}

// manyArgs binds the arguments of ops' Many form j ([wire.ManyBinder]):
// every operation's Args of its statement j, and its Key, in the order of
// ops.
func manyArgs(b wire.ManyBinder, ops []*pending, j int) ([]any, error) {
	keys := make([]string, len(ops))
	args := make([][]any, len(ops))
	for i, o := range ops {
		keys[i], args[i] = o.op.Key, o.op.Stmts[j].Args
	}
	bound, err := b.BindMany(keys, args)
	if err != nil {
		return nil, fmt.Errorf("racefree: combined statement: %w", err)
	}
	return bound, nil
}

// manyRows reads the rows of ops' Many form j: each begins with the place
// of its operation in ops (from 1), which found[place-1] records, then
// the columns the operation's Dest receives. skip receives the columns
// after the place while the place is read (nil: r skips a nil
// destination, as a pipeline's rows do); r must let a row be scanned
// again. A place out of range, or one that comes back twice, is an error
// that fails the batch: a row handed to the wrong caller would be another
// caller's outcome.
func manyRows(r wire.Rows, ops []*pending, j int, found []bool, skip []any) error {
	clear(found)
	var i int64
	if skip == nil {
		skip = make([]any, len(ops[0].op.Stmts[j].Dest))
	}
	place := append([]any{&i}, skip...)
	for r.Next() {
		if err := r.Scan(place...); err != nil {
			return err
		}
		if i < 1 || i > int64(len(ops)) || found[i-1] {
			return fmt.Errorf("racefree: combined statement returned place %d of %d operations", i, len(ops))
		}
		found[i-1] = true
		if dest := ops[i-1].op.Stmts[j].Dest; len(dest) > 0 {
			if err := r.Scan(append([]any{new(int64)}, dest...)...); err != nil {
				return err
			}
		}
	}
	return nil
}

// settleMany sets each operation's outcome once its Many forms ran, and
// marks it many: RowsAffected 1 for a statement whose row came back
// (found), 0 otherwise, and ErrNotFound for an operation whose Dest
// statement got no row, as its Query alone would report.
func settleMany(ops []*pending, found [][]bool) {
	for i, o := range ops {
		o.err, o.many = nil, true
		for j, st := range o.op.Stmts {
			st.RowsAffected = 0
			if found[j][i] {
				st.RowsAffected = 1
			} else if st.Dest != nil && o.err == nil {
				o.err = ErrNotFound
			}
		}
	}
}
