package seq

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// NextKeyed is NextN for a request the caller may retry: it records
// requestKey with the numbers it hands out, in the same transaction, so
// that a retry with the same key gets the same numbers back (replayed
// true) and consumes none, whether or not the caller heard of the first
// attempt. That settles the one case NextN cannot: a commit whose reply
// was lost (the connection broke after COMMIT was sent) consumed numbers
// that nobody was told of, and NextN run again hands out the next ones,
// leaving the first as a gap in what the caller recorded.
//
// The key is an idempotency record of keys, which must be a Store of the
// same database (idempotency.New(db, nil)): scope "racefree.seq" with the
// counter's scope and name, so a key names one request to one counter,
// and the tenant's own. The same key with another n is
// [racefree.ErrMismatch] and consumes nothing. A concurrent call with the
// same key waits for the first one's transaction and then replays what
// it committed, or runs itself if that rolled back. A record lives for
// keys' Retention (default 24 hours) and then goes with keys.Reap: a retry
// after that hands out new numbers, so retry within it.
//
// Passed the caller's *sql.Tx, the numbers and the key commit or roll back
// with the caller's writes (a rollback consumes nothing and records no
// key); passed the pool, NextKeyed runs one transaction of its own that
// belongs to the context's tenant. When its commit's reply is lost, or
// ctx ends while its commit is in flight ([racefree.DB.InTx]), NextKeyed
// returns an error matching [racefree.ErrUnavailable]: call it again with
// the same key, never NextN, to learn the numbers.
//
// Input errors are NextN's, and the key's are idempotency's (an empty,
// oversized or non-UTF-8 key is an *racefree.InputError); nothing is
// consumed then.
func (c *Counters) NextKeyed(ctx context.Context, exec racefree.Executor, keys *idempotency.Store, scope, name string, n int64, requestKey string) (first int64, replayed bool, err error) {
	if err := validate(scope, name); err != nil {
		return 0, false, err
	}
	if n < 1 || n > MaxN {
		return 0, false, racefree.Invalid("n", "must be between 1 and %d, got %d", MaxN, n)
	}
	if keys == nil {
		return 0, false, racefree.Invalid("keys", "must not be nil")
	}
	run := func(ctx context.Context, tx *sql.Tx) error {
		res, err := keys.DoTx(ctx, tx, keyScope(scope, name), requestKey, "n="+strconv.FormatInt(n, 10),
			func(ctx context.Context, tx *sql.Tx, _ *idempotency.Call) ([]byte, error) {
				f, err := c.NextN(ctx, tx, scope, name, n)
				if err != nil {
					return nil, err
				}
				return strconv.AppendInt(nil, f, 10), nil
			})
		if err != nil {
			return err
		}
		first, err = strconv.ParseInt(string(res.Response), 10, 64)
		if err != nil {
			return fmt.Errorf("stored numbers: %w", err)
		}
		replayed = res.Replayed
		return nil
	}
	if tx, ok := exec.(*sql.Tx); ok {
		err = run(ctx, tx)
	} else {
		err = tenant.InTx(ctx, c.db, tenant.From(ctx), run)
	}
	if err != nil {
		return 0, false, fmt.Errorf("seq next keyed %q/%q: %w", scope, name, wire.Of(c.db).InterpretError(err))
	}
	return first, replayed, nil
}

// keyScope is the idempotency scope of the keys of counter (scope, name):
// the scope's length first, so that no two counters share one.
func keyScope(scope, name string) string {
	return "racefree.seq " + strconv.Itoa(len(scope)) + ":" + scope + "/" + name
}
