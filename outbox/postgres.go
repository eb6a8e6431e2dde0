package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/wire"
)

// postgresDialect is the dialect of PostgreSQL.
type postgresDialect struct{}

// idsArg, topicsArg: arrays.
func (postgresDialect) idsArg(ids []int64) any {
	if ids == nil {
		ids = []int64{}
	}
	return ids
}

func (postgresDialect) topicsArg(topics []string) any {
	if topics == nil {
		topics = []string{}
	}
	return topics
}

// tenuresArgs: two arrays, the ids and the fences.
func (postgresDialect) tenuresArgs(ds []*Delivery) []any {
	ids := make([]int64, len(ds))
	fences := make([]int64, len(ds))
	for i, d := range ds {
		ids[i], fences[i] = d.ID, d.Fence
	}
	return []any{ids, fences}
}

func (postgresDialect) notifies() bool { return true }

// wakesBeforeCommit: a claim does not see an uncommitted message, and
// skips the rows its transaction holds locked rather than wait for them.
func (postgresDialect) wakesBeforeCommit() bool { return false }

// lockKey: a transaction-scoped advisory lock on the key.
func (postgresDialect) lockKey(ctx context.Context, o *Outbox, exec racefree.Executor, id, topic, key string) error {
	_, err := exec.ExecContext(ctx, o.q.Get("lock_key"), id, topic, key)
	return err
}

// mayBeDue: the claim skips locked rows and holds up no writer, so there
// is nothing to gain by looking first.
func (postgresDialect) mayBeDue(context.Context, *Outbox, string, []string) (bool, error) {
	return true, nil
}

// claimTogether: on the pool, once the tenant is registered, the tenant,
// the completion and the claim are sent together ([send.Do]); the claim
// records the lapses it finds itself, so nothing in it waits for an
// earlier statement's rows.
func (p postgresDialect) claimTogether(ctx context.Context, o *Outbox, id, worker string, n int, lease time.Duration, topics []string, done []*Delivery) ([]*Delivery, []tenure, bool, error) {
	var out []*Delivery
	var completed []tenure
	if err := o.needSchema(ctx, o.db); err != nil {
		return nil, nil, false, fmt.Errorf("outbox claim: %w", wire.Of(o.db).InterpretError(err))
	}
	var stmts []*wire.Statement
	if len(done) > 0 {
		stmts = append(stmts, o.completeStatement(id, done, &completed))
	}
	stmts = append(stmts, p.claimStatement(o, id, worker, n, lease, topics, &out))
	way, err := send.Do(ctx, o.db, o.db, &send.Op{Stmts: stmts, Pipeline: true})
	if err != nil {
		return nil, nil, false, fmt.Errorf("outbox claim: %w", err)
	}
	return out, completed, way == send.Together, nil
}

// claim: one statement, which records the lapses it takes over itself.
func (p postgresDialect) claim(ctx context.Context, o *Outbox, exec racefree.Executor, id, worker string, n int, lease time.Duration, topics []string) ([]*Delivery, []lapse, error) {
	var out []*Delivery
	err := queryRows(ctx, exec, p.claimStatement(o, id, worker, n, lease, topics, &out))
	return out, nil, err
}

// claimStatement is the claim; it reads the deliveries into *into.
func (p postgresDialect) claimStatement(o *Outbox, id, worker string, n int, lease time.Duration, topics []string, into *[]*Delivery) *wire.Statement {
	return &wire.Statement{
		Query: o.q.Get("claim"),
		Args:  []any{id, p.topicsArg(topics), n, lease.Milliseconds(), worker, wire.Of(o.db).ClockArg(), o.opts.History},
		Rows: func(rows wire.Rows) error {
			*into = (*into)[:0]
			for rows.Next() {
				d := &Delivery{Tenant: id, Worker: worker}
				var headers string
				var created, expires int64
				if err := rows.Scan(&d.ID, &d.Topic, &d.Key, &d.Ordered, &d.Payload, &headers, &created, &d.Attempt, &d.MaxAttempts,
					&d.Fence, &expires); err != nil {
					return err
				}
				d.Headers, d.CreatedAt, d.LeaseExpiresAt = decodeHeaders(headers), racefree.FromMillis(created), racefree.FromMillis(expires)
				*into = append(*into, d)
			}
			return nil
		},
	}
}

// discardHistory: discard.sql deletes the history in the same statement.
func (postgresDialect) discardHistory(context.Context, *Outbox, racefree.Executor, string, Filter) error {
	return nil
}

// reap: one statement, which reads the database clock, skips the rows
// other transactions hold locked, and deletes the history with the
// messages.
func (postgresDialect) reap(ctx context.Context, o *Outbox, exec racefree.Executor, t string, size int) (int64, error) {
	var n int64
	err := exec.QueryRowContext(ctx, o.q.Get("reap"), t, o.opts.Retention.Milliseconds(), size, wire.Of(o.db).ClockArg()).Scan(&n)
	return n, err
}
