package audit

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// Checkpoint represents a signed statement of a tenant's scope's chain
// head: entry Seq has MAC MAC. Kept outside the database (a file, another
// database, stdout), it lets Verify detect what a bare MAC chain cannot: a
// tail cut off the log and the restore of an older copy. Checkpoints of a
// scope are numbered from 1 and chained: Prev is the Hash of checkpoint
// N-1 (empty for the first).
//
// The signature covers the tenant (for a tenant other than the default,
// like an entry's MAC), so a checkpoint relabelled with another tenant
// fails it. An empty Tenant, as in checkpoints exported before tenancy,
// means [tenant.Default].
type Checkpoint struct {
	Tenant string    `json:"tenant,omitempty"`
	Scope  string    `json:"scope"`
	N      int64     `json:"n"`
	Seq    int64     `json:"seq"`
	MAC    []byte    `json:"mac"`
	At     time.Time `json:"at"`
	Prev   []byte    `json:"prev"`
	KeyID  string    `json:"key_id"` // the Ed25519 key that signed it
	Sig    []byte    `json:"sig"`
}

// tenant returns the checkpoint's tenant; empty means the default.
func (c *Checkpoint) tenant() string {
	if c.Tenant == "" {
		return tenant.Default
	}
	return c.Tenant
}

// signed returns the bytes the signature covers, length-prefixed like an
// entry's MAC input, the tenant included unless it is the default.
func (c *Checkpoint) signed() []byte {
	buf := appendVersion([]byte("racefree audit checkpoint"), c.tenant())
	buf = appendField(buf, []byte(c.Scope))
	buf = binary.BigEndian.AppendUint64(buf, uint64(c.N))
	buf = binary.BigEndian.AppendUint64(buf, uint64(c.Seq))
	buf = appendField(buf, c.MAC)
	buf = binary.BigEndian.AppendUint64(buf, uint64(c.At.UnixMilli()))
	buf = appendField(buf, c.Prev)
	buf = appendField(buf, []byte(c.KeyID))
	return buf
}

// Hash returns the SHA-256 of the checkpoint and its signature: the Prev of
// the scope's next checkpoint.
func (c *Checkpoint) Hash() []byte {
	h := sha256.Sum256(appendField(c.signed(), c.Sig))
	return h[:]
}

// Checkpoint signs the current head of the context's tenant's scope with
// the keyring's sign key, chains it to the scope's previous checkpoint,
// stores it and returns it for export. It locks the head row for as long
// as it takes to sign, so the head it signs is committed and two
// checkpoints of a scope are chained in order. Like Append, it runs in
// exec when exec is a *sql.Tx (and commits or rolls back with it), and in
// a transaction of its own otherwise. ErrNoSigner: the keyring has no sign
// key; [racefree.ErrNotFound]: the scope has no entry.
func (l *Log) Checkpoint(ctx context.Context, exec racefree.Executor, scope string) (Checkpoint, error) {
	if err := checkScope(scope); err != nil {
		return Checkpoint{}, err
	}
	if _, ok := l.ring.signers[l.ring.signer]; !ok {
		return Checkpoint{}, ErrNoSigner
	}
	t := tenant.From(ctx)
	var c Checkpoint
	err := l.inTx(ctx, exec, func(tx *sql.Tx) error {
		var err error
		c, err = l.checkpoint(ctx, tx, t, scope)
		return err
	})
	if err != nil {
		return Checkpoint{}, fmt.Errorf("audit: checkpoint %s: %w", scope, wire.Of(l.db).InterpretError(err))
	}
	return c, nil
}

// checkpoint signs, stores and chains a checkpoint of the head of tenant
// t's scope in tx, under the head row's lock.
func (l *Log) checkpoint(ctx context.Context, tx *sql.Tx, t, scope string) (Checkpoint, error) {
	priv, ok := l.ring.signers[l.ring.signer]
	if !ok {
		return Checkpoint{}, ErrNoSigner
	}
	c := Checkpoint{Tenant: t, Scope: scope, KeyID: l.ring.signer}
	var at int64
	err := tx.QueryRowContext(ctx, l.q.Get("checkpoint_head"), t, scope, wire.Of(l.db).ClockArg()).Scan(&c.Seq, &c.MAC, &c.N, &c.Prev, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return Checkpoint{}, racefree.ErrNotFound
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("head: %w", err)
	}
	c.Prev = notNil(c.Prev)
	c.At = racefree.FromMillis(at)
	c.Sig = ed25519.Sign(priv, c.signed())
	if _, err := tx.ExecContext(ctx, l.q.Get("set_checkpoint"), t, scope, c.N, c.Seq, c.MAC, at, c.Prev, c.KeyID, c.Sig); err != nil {
		return Checkpoint{}, fmt.Errorf("store: %w", err)
	}
	if _, err := tx.ExecContext(ctx, l.q.Get("set_checkpoint_hash"), t, scope, c.N, c.Hash()); err != nil {
		return Checkpoint{}, fmt.Errorf("chain: %w", err)
	}
	return c, nil
}

// Checkpoints returns the tenant's scope's stored checkpoints numbered
// after after, oldest first.
func (l *Log) Checkpoints(ctx context.Context, scope string, after int64) ([]Checkpoint, error) {
	return l.checkpoints(ctx, scope, after, false)
}

// LatestCheckpoint returns the tenant's scope's latest stored checkpoint,
// or [racefree.ErrNotFound].
func (l *Log) LatestCheckpoint(ctx context.Context, scope string) (Checkpoint, error) {
	cs, err := l.checkpoints(ctx, scope, 0, true)
	if err != nil {
		return Checkpoint{}, err
	}
	if len(cs) == 0 {
		return Checkpoint{}, fmt.Errorf("audit: latest checkpoint of %s: %w", scope, racefree.ErrNotFound)
	}
	return cs[0], nil
}

func (l *Log) checkpoints(ctx context.Context, scope string, after int64, latest bool) ([]Checkpoint, error) {
	if err := checkScope(scope); err != nil {
		return nil, err
	}
	only := 0
	if latest {
		only = 1
	}
	t := tenant.From(ctx)
	var out []Checkpoint
	err := l.read(ctx, func(exec racefree.Executor) error {
		out = nil
		rows, err := exec.QueryContext(ctx, l.q.Get("checkpoints"), t, scope, after, only)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			c := Checkpoint{Tenant: t, Scope: scope}
			var at int64
			if err := rows.Scan(&c.N, &c.Seq, &c.MAC, &at, &c.Prev, &c.KeyID, &c.Sig); err != nil {
				return err
			}
			c.Prev = notNil(c.Prev) // the first's, as Checkpoint made it
			c.At = racefree.FromMillis(at)
			out = append(out, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("audit: checkpoints of %s: %w", scope, wire.Of(l.db).InterpretError(err))
	}
	return out, nil
}

// WriteCheckpoints writes cs as JSON lines, the export format that
// ReadCheckpoints reads.
func WriteCheckpoints(w io.Writer, cs ...Checkpoint) error {
	enc := json.NewEncoder(w)
	for i := range cs {
		if err := enc.Encode(&cs[i]); err != nil {
			return fmt.Errorf("audit: write checkpoint: %w", err)
		}
	}
	return nil
}

// ReadCheckpoints reads checkpoints written by WriteCheckpoints.
func ReadCheckpoints(r io.Reader) ([]Checkpoint, error) {
	var out []Checkpoint
	dec := json.NewDecoder(bufio.NewReader(r))
	for {
		var c Checkpoint
		err := dec.Decode(&c)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("audit: read checkpoint %d: %w", len(out)+1, err)
		}
		out = append(out, c)
	}
}

// ErrNoSigner means the keyring has no sign key, so it cannot make
// checkpoints.
var ErrNoSigner = errors.New("audit: keyring has no sign key")
