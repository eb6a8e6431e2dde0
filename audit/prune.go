package audit

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/schema"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// ActionPruned is the action of the entry Prune appends: its actor is the
// caller's, its subject empty and its data the anchor the chain restarts
// from, {"through": seq, "mac": base64, "key_id": epoch}. Verify accepts a
// scope whose entries 1 through seq are gone only when it finds this entry,
// MACed under the scope's key, naming exactly the anchor the head row
// keeps. Callers cannot append entries with this action.
const ActionPruned = "racefree.audit.pruned"

// RetentionVersion is the migration that Prune needs (the retention
// floor and the delete trigger that lets a pruning through). Before it,
// Prune fails with [racefree.ErrSchemaOutdated], and everything else works
// as before: nothing can have been pruned.
const RetentionVersion = 14

// pruneRecord is the data of an ActionPruned entry.
type pruneRecord struct {
	Through int64  `json:"through"`
	MAC     []byte `json:"mac"`
	KeyID   string `json:"key_id"`
}

// Pruning reports what Prune did.
type Pruning struct {
	// Anchor is where the chain now starts: the last entry deleted, its
	// MAC and the key epoch after it. Verify starts from it.
	Anchor Position `json:"anchor"`
	// Deleted counts the entries deleted (those between an earlier
	// pruning's anchor and this one).
	Deleted int64 `json:"deleted"`
	// Entry is the ActionPruned entry that records the pruning in the
	// chain.
	Entry Record `json:"entry"`
	// Checkpoint signs the head after Entry; export it with the others.
	Checkpoint Checkpoint `json:"checkpoint"`
}

// Prune deletes the entries of the context's tenant's scope numbered 1
// through through (those left after earlier prunings) and re-anchors the
// chain at entry through: retention, as an explicit, audited operation.
// In one transaction, under the head row's lock (so appends and
// checkpoints of the scope wait, and numbering stays gapless), it appends
// an ActionPruned entry by actor that records the anchor (number, MAC, key
// epoch), raises the head's retention floor to it, deletes the entries at
// or below it and signs a checkpoint of the new head, which it returns
// for export. Afterwards Verify starts at the anchor and reports the
// scope intact only if it finds that entry; entries deleted any other way
// are still Missing, and a floor raised by hand without the key to MAC the
// entry too.
//
// Prune does not verify what it deletes: verify the scope first (the CLI
// does). The delete trigger refuses every DELETE of an entry but this
// one's. On PostgreSQL the application role has no DELETE privilege
// ([tenant.Grant]), so run Prune as the tables' owner; as the application
// role it fails, permission denied, and changes nothing. Deleting many
// entries holds the scope's lock for as long as it takes.
//
// Like Checkpoint, it runs in exec when exec is a *sql.Tx and in a
// transaction of its own otherwise. Errors: *racefree.InputError, changing
// nothing, for a bad scope or actor or when through is not between the
// floor and the scope's last entry; ErrNoSigner when the keyring cannot
// sign checkpoints; [racefree.ErrNotFound] for a scope without entries.
func (l *Log) Prune(ctx context.Context, exec racefree.Executor, scope string, through int64, actor string) (Pruning, error) {
	if err := checkScope(scope); err != nil {
		return Pruning{}, err
	}
	if err := racefree.CheckText("actor", actor, MaxActorLen); err != nil {
		return Pruning{}, err
	}
	if through < 1 {
		return Pruning{}, racefree.Invalid("through", "must be at least 1, got %d", through)
	}
	if _, ok := l.ring.signers[l.ring.signer]; !ok {
		return Pruning{}, ErrNoSigner
	}
	t := tenant.From(ctx)
	var p Pruning
	err := l.inTx(ctx, exec, func(tx *sql.Tx) error {
		p = Pruning{}
		if err := schema.Need(ctx, l.db, tx, RetentionVersion); err != nil {
			return err
		}
		var last, floor int64
		err := tx.QueryRowContext(ctx, l.q.Get("prune_head"), t, scope).Scan(&last, &floor)
		if errors.Is(err, sql.ErrNoRows) {
			return racefree.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("head: %w", err)
		}
		if through <= floor {
			return racefree.Invalid("through", "entries 1 through %d are pruned already; got %d", floor, through)
		}
		if through > last {
			return racefree.Invalid("through", "the scope's last entry is %d; got %d", last, through)
		}
		var action, subject string
		p.Anchor.Seq = through
		if err := tx.QueryRowContext(ctx, l.q.Get("anchor"), t, scope, through).Scan(&p.Anchor.MAC, &p.Anchor.KeyID, &action, &subject); err != nil {
			return fmt.Errorf("anchor entry %d: %w", through, err)
		}
		if action == ActionKeyRotated { // the epoch after a rotation entry is the new key's
			p.Anchor.KeyID = subject
		}
		data, _ := json.Marshal(pruneRecord{Through: through, MAC: p.Anchor.MAC, KeyID: p.Anchor.KeyID})
		if p.Entry, err = l.append(ctx, tx, t, scope, Entry{Actor: actor, Action: ActionPruned, Data: data}); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, l.q.Get("set_floor"), t, scope, through, p.Anchor.MAC, p.Anchor.KeyID); err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		res, err := tx.ExecContext(ctx, l.q.Get("prune"), t, scope, through)
		if err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		if p.Deleted, err = res.RowsAffected(); err != nil {
			return err
		}
		p.Checkpoint, err = l.checkpoint(ctx, tx, t, scope)
		return err
	})
	if err != nil {
		return Pruning{}, fmt.Errorf("audit: prune %s through %d: %w", scope, through, wire.Of(l.db).InterpretError(err))
	}
	return p, nil
}
