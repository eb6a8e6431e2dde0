package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
)

// sqliteDialect is the dialect of SQLite.
type sqliteDialect struct{}

// idsArg, topicsArg: JSON arrays.
func (sqliteDialect) idsArg(ids []int64) any { return jsonArray(ids) }

func (sqliteDialect) topicsArg(topics []string) any { return jsonArray(topics) }

func jsonArray[T any](v []T) string {
	if v == nil {
		v = []T{}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// tenuresArgs: one JSON array of [id, fence] pairs.
func (sqliteDialect) tenuresArgs(ds []*Delivery) []any {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range ds {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("[" + strconv.FormatInt(d.ID, 10) + "," + strconv.FormatInt(d.Fence, 10) + "]")
	}
	b.WriteByte(']')
	return []any{b.String()}
}

// notifies: SQLite relays are woken in-process.
func (sqliteDialect) notifies() bool { return false }

func (sqliteDialect) wakesBeforeCommit() bool { return true }

// lockKey: enqueues take the write lock one at a time, so ids already
// follow the commits.
func (sqliteDialect) lockKey(context.Context, *Outbox, racefree.Executor, string, string, string) error {
	return nil
}

// mayBeDue looks outside any transaction, before the claim takes the
// write lock: an idle relay's polls are then reads, which never hold up
// the writers. The claim itself looks again under the write lock.
func (d sqliteDialect) mayBeDue(ctx context.Context, o *Outbox, id string, topics []string) (bool, error) {
	var due bool
	err := o.run(ctx, o.db, func(exec racefree.Executor) error {
		rows, err := exec.QueryContext(ctx, o.q.Get("claim_due"), id, d.topicsArg(topics), 1, o.sqliteNow())
		if err != nil {
			return err
		}
		defer rows.Close()
		due = rows.Next()
		return rows.Err()
	})
	if err != nil {
		return false, fmt.Errorf("outbox claim: %w", wire.Of(o.db).InterpretError(err))
	}
	return due, nil
}

// claimTogether: never; the claim is one IMMEDIATE transaction.
func (sqliteDialect) claimTogether(context.Context, *Outbox, string, string, int, time.Duration, []string, []*Delivery) ([]*Delivery, []tenure, bool, error) {
	return nil, nil, false, nil
}

// claim reads the due messages, then takes them, and returns the lapsed
// leases among them for the caller to record.
func (s sqliteDialect) claim(ctx context.Context, o *Outbox, exec racefree.Executor, id, worker string, n int, lease time.Duration, topics []string) ([]*Delivery, []lapse, error) {
	now := o.sqliteNow()
	rows, err := exec.QueryContext(ctx, o.q.Get("claim_due"), id, s.topicsArg(topics), n, now)
	if err != nil {
		return nil, nil, err
	}
	var ids []int64
	was := map[int64][2]string{}
	for rows.Next() {
		var mid int64
		var state, by string
		if err := rows.Scan(&mid, &state, &by); err != nil {
			rows.Close()
			return nil, nil, err
		}
		ids = append(ids, mid)
		was[mid] = [2]string{state, by}
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return nil, nil, err
	}
	rows, err = exec.QueryContext(ctx, o.q.Get("claim_take"), id, s.idsArg(ids), now, lease.Milliseconds(), worker)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var out []*Delivery
	var lapsed []lapse
	for rows.Next() {
		d := &Delivery{Tenant: id, Worker: worker}
		var headers string
		var created, expires int64
		if err := rows.Scan(&d.ID, &d.Topic, &d.Key, &d.Ordered, &d.Payload, &headers, &created, &d.Attempt, &d.MaxAttempts,
			&d.Fence, &expires); err != nil {
			return nil, nil, err
		}
		d.Headers, d.CreatedAt, d.LeaseExpiresAt = decodeHeaders(headers), racefree.FromMillis(created), racefree.FromMillis(expires)
		out = append(out, d)
		if w := was[d.ID]; w[0] == string(Leased) {
			lapsed = append(lapsed, lapse{id: d.ID, fence: d.Fence - 1, attempt: d.Attempt - 1, worker: w[1], at: now})
		}
	}
	return out, lapsed, rows.Err()
}

// discardHistory: a statement of its own, before the messages'.
func (d sqliteDialect) discardHistory(ctx context.Context, o *Outbox, exec racefree.Executor, t string, f Filter) error {
	_, err := exec.ExecContext(ctx, o.q.Get("discard_history"), t, d.idsArg(f.IDs), f.Topic, f.Key)
	return err
}

// reap: the history, then the messages, delivered before a cutoff read
// from the configured clock or the process's.
func (sqliteDialect) reap(ctx context.Context, o *Outbox, exec racefree.Executor, t string, size int) (int64, error) {
	cutoff := o.sqliteNow() - o.opts.Retention.Milliseconds()
	if _, err := exec.ExecContext(ctx, o.q.Get("reap_history"), t, cutoff, size); err != nil {
		return 0, err
	}
	res, err := exec.ExecContext(ctx, o.q.Get("reap"), t, cutoff, size)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
