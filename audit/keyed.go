package audit

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// AppendKeyed is Append for a request the caller may retry: it records
// requestKey with the entry, in the same transaction, so that a retry
// with the same key gets the same record back (replayed true) and appends
// nothing, whether or not the caller heard of the first attempt. That
// settles the one case Append cannot: a commit whose reply was lost (the
// connection broke after COMMIT was sent) appended an entry nobody was
// told of, and Append run again appends it a second time under the next
// number.
//
// The key is an idempotency record of keys, which must be a Store of the
// same database (idempotency.New(db, nil)): scope "racefree.audit" with
// the log's scope, so a key names one request to one chain, and the
// tenant's own. The record replayed is the one stored with the key (also
// once Prune deleted its entry). The same key with another entry (actor,
// action, subject or data) is [racefree.ErrMismatch] and appends nothing. A
// concurrent call with the same key waits for the first one's
// transaction and then replays what it committed, or appends itself if
// that rolled back. A key lives for keys' Retention (default 24 hours)
// and then goes with keys.Reap: a retry after that appends again, so retry
// within it.
//
// Passed the caller's *sql.Tx, the entry and the key commit or roll back
// with the caller's writes; passed anything else, AppendKeyed runs one
// transaction of its own that belongs to the context's tenant. When its
// commit's reply is lost, or ctx ends while its commit is in flight
// ([racefree.DB.InTx]), AppendKeyed returns an error matching
// [racefree.ErrUnavailable]: call it again with the same key, never Append,
// to learn the record. Input errors are Append's, and the key's are
// idempotency's; nothing is written then.
func (l *Log) AppendKeyed(ctx context.Context, exec racefree.Executor, keys *idempotency.Store, scope string, e Entry, requestKey string) (rec Record, replayed bool, err error) {
	if err := checkScope(scope); err != nil {
		return Record{}, false, err
	}
	if err := e.validate(); err != nil {
		return Record{}, false, err
	}
	if keys == nil {
		return Record{}, false, racefree.Invalid("keys", "must not be nil")
	}
	run := func(ctx context.Context, tx *sql.Tx) error {
		res, err := keys.DoTx(ctx, tx, keyScope(scope), requestKey, fingerprint(&e),
			func(ctx context.Context, tx *sql.Tx, _ *idempotency.Call) ([]byte, error) {
				r, err := l.Append(ctx, tx, scope, e)
				if err != nil {
					return nil, err
				}
				return json.Marshal(r)
			})
		if err != nil {
			return err
		}
		rec = Record{}
		if err := json.Unmarshal(res.Response, &rec); err != nil {
			return fmt.Errorf("stored record: %w", err)
		}
		replayed = res.Replayed
		return nil
	}
	if tx, ok := exec.(*sql.Tx); ok {
		err = run(ctx, tx)
	} else {
		err = tenant.InTx(ctx, l.db, tenant.From(ctx), run)
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("audit: append keyed to %s: %w", scope, wire.Of(l.db).InterpretError(err))
	}
	return rec, replayed, nil
}

// keyScope is the idempotency scope of the request keys of a log scope.
func keyScope(scope string) string { return "racefree.audit " + scope }

// fingerprint identifies an entry as a request: SHA-256 of its fields,
// each length-prefixed.
func fingerprint(e *Entry) string {
	h := sha256.New()
	for _, f := range [][]byte{[]byte(e.Actor), []byte(e.Action), []byte(e.Subject), e.Data} {
		_ = binary.Write(h, binary.BigEndian, uint64(len(f)))
		h.Write(f)
	}
	return "entry " + hex.EncodeToString(h.Sum(nil))
}
