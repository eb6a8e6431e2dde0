package outbox

import (
	"context"
	"time"

	"github.com/racefree/racefree"
)

// dialect is everything the outbox does differently on each engine: how
// its statements bind lists, how a claim, a discard and a reap are
// sequenced, and how relays learn of a new message. New chooses it once,
// by the engine's name (dialects); the rest of the package never asks
// which engine it runs on. The two implementations are postgresDialect
// (postgres.go) and sqliteDialect (sqlite.go).
type dialect interface {
	// idsArg binds a list of ids (nil: none), topicsArg a list of topics,
	// tenuresArgs the (id, fence) pairs of ds.
	idsArg(ids []int64) any
	topicsArg(topics []string) any
	tenuresArgs(ds []*Delivery) []any

	// notifies reports whether an Enqueue can NOTIFY relays that LISTEN,
	// with its commit.
	notifies() bool
	// wakesBeforeCommit reports whether a write in the caller's open
	// transaction wakes the process's relays at once: their claim waits
	// for the write lock that transaction holds, so it sees the message
	// the moment the transaction commits. Otherwise the relays learn of it
	// from the NOTIFY sent with the commit.
	wakesBeforeCommit() bool
	// lockKey makes an ordered enqueue wait for the other open
	// transactions enqueueing for the same (tenant, topic, key), so that
	// its id follows theirs.
	lockKey(ctx context.Context, o *Outbox, exec racefree.Executor, id, topic, key string) error

	// mayBeDue reports whether a claim of tenant id can find a message,
	// looking, when the engine's claim would hold up writers, outside any
	// transaction first.
	mayBeDue(ctx context.Context, o *Outbox, id string, topics []string) (bool, error)
	// claimTogether completes done and claims in one round trip when it
	// can (together); when it cannot, the claim runs in a transaction
	// (claim). Its errors are the claim's, wrapped.
	claimTogether(ctx context.Context, o *Outbox, id, worker string, n int, lease time.Duration, topics []string, done []*Delivery) (out []*Delivery, completed []tenure, together bool, err error)
	// claim leases up to n due messages in exec, a transaction, and
	// returns them with the lapsed leases it took over that are still to
	// be recorded.
	claim(ctx context.Context, o *Outbox, exec racefree.Executor, id, worker string, n int, lease time.Duration, topics []string) ([]*Delivery, []lapse, error)
	// discardHistory deletes the history of the dead messages f matches,
	// before Discard deletes the messages.
	discardHistory(ctx context.Context, o *Outbox, exec racefree.Executor, t string, f Filter) error
	// reap deletes, in exec, up to size messages of tenant t delivered at
	// least Options.Retention ago, with their history, and returns how
	// many.
	reap(ctx context.Context, o *Outbox, exec racefree.Executor, t string, size int) (int64, error)
}

// dialects are the dialects by engine name.
var dialects = map[string]dialect{
	racefree.SQLite:   sqliteDialect{},
	racefree.Postgres: postgresDialect{},
}
