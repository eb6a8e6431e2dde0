package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/tenant"
)

// Kind says how a chain is broken.
type Kind string

// The kinds of break Verify reports.
const (
	// Modified: an entry's MAC does not match its content, its stored
	// prev_mac is not its predecessor's MAC, or it was spliced in from
	// another scope or another tenant.
	Modified Kind = "modified"
	// Missing: a number is absent from the middle of the chain (a gap).
	Missing Kind = "missing"
	// Reordered: an entry's content and MAC are valid at another position
	// of the chain than the one it sits at.
	Reordered Kind = "reordered"
	// UnknownKey: an entry names a mac key id the keyring does not hold.
	UnknownKey Kind = "unknown_key"
	// KeyOutsideEpoch: an entry is under a key other than its epoch's (a
	// retired key after the rotation entry, or the next key before it).
	KeyOutsideEpoch Kind = "key_outside_epoch"
	// Truncated: the chain ends before a checkpoint's entry, or before the
	// last number its head row counts.
	Truncated Kind = "truncated"
	// RolledBack: the log, its checkpoints included, is older than a
	// checkpoint, or differs from it at the checkpoint's entry: an older
	// copy of the log was restored.
	RolledBack Kind = "rolled_back"
	// BadCheckpoint: a checkpoint given to Verify has a bad signature, an
	// unknown signing key, another tenant or scope, or does not chain to
	// the checkpoint before it.
	BadCheckpoint Kind = "bad_checkpoint"
)

// Break represents the first break Verify found in a chain.
type Break struct {
	Kind   Kind   `json:"kind"`
	Seq    int64  `json:"seq"`    // the entry (or checkpoint's entry) where the chain breaks
	Detail string `json:"detail"` // what was expected there, without key material
}

func (b *Break) Error() string {
	return fmt.Sprintf("audit chain broken at %d: %s: %s", b.Seq, b.Kind, b.Detail)
}

// Position is a verified place in a scope's chain: entry Seq with MAC MAC
// under key epoch KeyID. Pass Result.Verified as VerifyOptions.After to
// verify only what was appended since.
type Position struct {
	Seq   int64  `json:"seq"`
	MAC   []byte `json:"mac"`
	KeyID string `json:"key_id"`
}

// VerifyOptions configures Verify. A nil *VerifyOptions verifies the whole
// chain without checkpoints.
type VerifyOptions struct {
	// After resumes from a position a previous Verify reported, trusting
	// the entries up to it. Defaults to the beginning.
	After *Position
	// Checkpoints are the tenant's scope's checkpoints kept outside the
	// database, oldest first and consecutive. Verify checks their tenant,
	// scope, signatures and chain, and that the log still holds the last
	// one's entry with its MAC. Without any, a cut tail and a restored
	// older copy go unnoticed (Result.Anchored is false).
	Checkpoints []Checkpoint
	// Progress, when set, is called with the number of entries checked so
	// far, every 10,000 entries and at the end.
	Progress func(rows int64)
}

// Result represents what Verify found in one scope of one tenant.
type Result struct {
	Tenant   string   `json:"tenant"`
	Scope    string   `json:"scope"`
	Rows     int64    `json:"rows"`     // entries checked
	Verified Position `json:"verified"` // the last entry verified intact
	Break    *Break   `json:"break,omitempty"`
	// Anchored reports that a checkpoint vouched for the chain up to its
	// entry, so a cut tail or a rollback before it would have been found.
	Anchored bool `json:"anchored"`
}

// Intact reports that no break was found.
func (r *Result) Intact() bool { return r.Break == nil }

// reorderWindow is how far around a broken entry Verify looks for the
// position its MAC is valid at.
const reorderWindow = 16

// Verify streams the chain of the context's tenant's scope (tenant.From)
// in number order and reports the first break in Result.Break, with its
// kind; a nil Break means intact. The error is for what kept Verify from
// deciding (I/O, bad input), never for a break.
//
// Each entry must carry the next number, be under a key of the keyring and
// of its epoch (the scope's first entry opens the first epoch; an
// ActionKeyRotated entry closes it and opens the next), chain to its
// predecessor's MAC and have a valid MAC, which covers the tenant (unless
// it is the default): an entry copied from another tenant's chain is
// Modified. The chain must end at the head row's last number. A bare chain
// cannot tell a cut tail, with the head row cut to match, or a restored
// older copy of the whole log, from an intact log: only a checkpoint kept
// elsewhere can (VerifyOptions.Checkpoints), and only one of the same
// tenant and scope.
//
// A scope pruned by Prune starts at its retention floor (or at
// VerifyOptions.After, when that is past it), and is intact only if its
// chain holds the ActionPruned entry that names that floor's number, MAC
// and key epoch: a prefix gone without one is Missing at the floor.
//
// Verify reads the head row before the entries, so appends that commit
// while it runs never look like a break.
func (l *Log) Verify(ctx context.Context, scope string, opts *VerifyOptions) (Result, error) {
	if err := checkScope(scope); err != nil {
		return Result{}, err
	}
	var o VerifyOptions
	if opts != nil {
		o = *opts
	}
	t := tenant.From(ctx)
	res := Result{Tenant: t, Scope: scope}
	if o.After != nil {
		res.Verified = *o.After
	}
	anchor, brk := l.checkCheckpoints(t, scope, o.Checkpoints)
	if brk != nil {
		res.Break = brk
		return res, nil
	}
	head, err := l.head(ctx, t, scope)
	if err != nil {
		return Result{}, fmt.Errorf("audit: verify %s: %w", scope, err)
	}
	// A pruned scope starts at its retention floor, provided the chain
	// holds the pruned entry that records it (stream sets floorSeen).
	var floor *Position
	if head.floor.Seq > res.Verified.Seq {
		floor = &head.floor
		res.Verified = head.floor
	}
	start := res
	var floorSeen bool
	err = l.read(ctx, func(exec racefree.Executor) error {
		res = start // a retried transaction starts over
		floorSeen, err = l.stream(ctx, exec, t, scope, &o, anchor, floor, &res)
		return err
	})
	if err != nil {
		return Result{}, fmt.Errorf("audit: verify %s: %w", scope, l.db.InterpretError(err))
	}
	if o.Progress != nil {
		o.Progress(res.Rows)
	}
	if res.Break != nil {
		return res, nil
	}
	last := res.Verified.Seq
	switch {
	case floor != nil && !floorSeen:
		res.Break = &Break{Missing, floor.Seq, fmt.Sprintf("entries through %d are gone and no %s entry in the chain records it", floor.Seq, ActionPruned)}
	case anchor != nil && head.checkpoints < anchor.N:
		res.Break = &Break{RolledBack, last, fmt.Sprintf("checkpoint %d exists; the log, its checkpoints included, counts %d", anchor.N, head.checkpoints)}
	case anchor != nil && anchor.Seq > last:
		res.Break = &Break{Truncated, last + 1, fmt.Sprintf("checkpoint %d vouches for entry %d; the chain ends at %d", anchor.N, anchor.Seq, last)}
	case head.seq > last:
		res.Break = &Break{Truncated, last + 1, fmt.Sprintf("the head counts %d entries; the chain ends at %d", head.seq, last)}
	case anchor != nil && anchor.Seq == start.Verified.Seq && start.Verified.Seq > 0 && !hmac.Equal(anchor.MAC, start.Verified.MAC):
		res.Break = &Break{RolledBack, anchor.Seq, fmt.Sprintf("checkpoint %d vouches for another entry %d", anchor.N, anchor.Seq)}
	case anchor != nil:
		res.Anchored = true
	}
	return res, nil
}

// stream checks the entries after res.Verified, advancing it, and sets
// res.Break at the first break. floorSeen reports that an ActionPruned
// entry names floor, when not nil, as its anchor.
//
// It reads verify_entries, whose columns carry the texts joined by NUL
// bytes and the stored prev_mac and MAC in one: fewer columns cost the
// driver fewer calls per row, the loop's main cost. Per row it allocates
// only what the driver does.
func (l *Log) stream(ctx context.Context, exec racefree.Executor, t, scope string, o *VerifyOptions, anchor *Checkpoint, floor *Position, res *Result) (floorSeen bool, err error) {
	rows, err := exec.QueryContext(ctx, l.q.Get("verify_entries"), t, scope, res.Verified.Seq)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	var (
		epoch  = res.Verified.KeyID
		last   = res.Verified.Seq
		prev   = append([]byte{}, res.Verified.MAC...)
		spare  = make([]byte, 0, sha256.Size) // prev's buffer, swapped each row
		macers = map[string]*macer{}
		m      *macer
		mKey   string
		in     entryInput
		texts  string       // actor NUL action NUL subject NUL key_id
		data   sql.RawBytes // RawBytes: valid until the next row, never copied
		macs   sql.RawBytes // the stored prev_mac, then the 32-byte MAC
		keyID  string
		rest   string
		ok     bool
		ok2    bool
		ok3    bool
		brk    = func(k Kind, seq int64, format string, args ...any) {
			res.Break = &Break{k, seq, fmt.Sprintf(format, args...)}
		}
	)
	// res.Verified follows the loop only here, where the MAC is copied
	// out of the loop's buffers.
	defer func() {
		res.Verified = Position{Seq: last, MAC: bytes.Clone(prev), KeyID: epoch}
	}()
	in.tenant = t
	in.scope = scope
	for rows.Next() {
		if err := rows.Scan(&in.seq, &in.at, &texts, &data, &macs); err != nil {
			return floorSeen, err
		}
		in.data = data
		want := last + 1
		if in.seq != want {
			brk(Missing, want, "entry %d is absent; the next is %d", want, in.seq)
			return floorSeen, nil
		}
		in.actor, rest, ok = strings.Cut(texts, "\x00")
		in.action, rest, ok2 = strings.Cut(rest, "\x00")
		in.subject, keyID, ok3 = strings.Cut(rest, "\x00")
		if !ok || !ok2 || !ok3 || strings.IndexByte(keyID, 0) >= 0 {
			brk(Modified, in.seq, "a text field holds a NUL byte")
			return floorSeen, nil
		}
		if len(macs) < sha256.Size {
			brk(Modified, in.seq, "the stored MAC is not %d bytes long", sha256.Size)
			return floorSeen, nil
		}
		stored, mac := macs[:len(macs)-sha256.Size], macs[len(macs)-sha256.Size:]
		if m == nil || keyID != mKey {
			if m, ok = macers[keyID]; !ok {
				key, ok := l.ring.scopeKey(keyID, scope)
				if !ok {
					brk(UnknownKey, in.seq, "key id %q is not in the keyring", keyID)
					return floorSeen, nil
				}
				m = newMacer(key)
				macers[keyID] = m
			}
			mKey = keyID
		}
		if epoch != "" && keyID != epoch {
			brk(KeyOutsideEpoch, in.seq, "entry under key %q in the epoch of key %q", keyID, epoch)
			return floorSeen, nil
		}
		in.prev = prev
		if !hmac.Equal(m.sum(&in), mac) {
			if at, ok := reorderedAt(m, &in, stored, mac); ok {
				brk(Reordered, in.seq, "the entry at %d belongs at %d", in.seq, at)
			} else {
				brk(Modified, in.seq, "the MAC does not match the entry")
			}
			return floorSeen, nil
		}
		if !bytes.Equal(stored, in.prev) {
			brk(Modified, in.seq, "the stored prev_mac is not entry %d's MAC", in.seq-1)
			return floorSeen, nil
		}
		if anchor != nil && in.seq == anchor.Seq && !hmac.Equal(mac, anchor.MAC) {
			brk(RolledBack, in.seq, "checkpoint %d vouches for another entry %d", anchor.N, anchor.Seq)
			return floorSeen, nil
		}
		epoch = keyID
		switch in.action {
		case ActionKeyRotated:
			var link struct{ From, To string }
			if err := json.Unmarshal(in.data, &link); err != nil || link.From != keyID || link.To == "" {
				brk(Modified, in.seq, "a rotation entry that does not link key %q to the next", keyID)
				return floorSeen, nil
			}
			epoch = link.To
		case ActionPruned:
			var p pruneRecord
			if err := json.Unmarshal(in.data, &p); err != nil || p.Through < 1 || p.Through >= in.seq {
				brk(Modified, in.seq, "a pruned entry that does not name an anchor before it")
				return floorSeen, nil
			}
			floorSeen = floorSeen || floor != nil && p.Through == floor.Seq && hmac.Equal(p.MAC, floor.MAC) && p.KeyID == floor.KeyID
		}
		prev, spare = append(spare[:0], mac...), prev
		last = in.seq
		res.Rows++
		if o.Progress != nil && res.Rows%10_000 == 0 {
			o.Progress(res.Rows)
		}
	}
	return floorSeen, rows.Err()
}

// reorderedAt reports the number near in.seq at which the entry's content
// and stored prev_mac give its MAC, if any: an entry moved from there.
func reorderedAt(m *macer, in *entryInput, storedPrev, mac []byte) (int64, bool) {
	moved := *in
	moved.prev = storedPrev
	for d := int64(-reorderWindow); d <= reorderWindow; d++ {
		moved.seq = in.seq + d
		if d == 0 || moved.seq < 1 {
			continue
		}
		if hmac.Equal(m.sum(&moved), mac) {
			return moved.seq, true
		}
	}
	return 0, false
}

// checkCheckpoints checks the tenant, scope, signatures and chain of cs
// and returns the last one, the anchor, or a break.
func (l *Log) checkCheckpoints(t, scope string, cs []Checkpoint) (*Checkpoint, *Break) {
	for i := range cs {
		c := &cs[i]
		if c.tenant() != t {
			return nil, &Break{BadCheckpoint, c.Seq, fmt.Sprintf("checkpoint %d is of tenant %q", c.N, c.tenant())}
		}
		if c.Scope != scope {
			return nil, &Break{BadCheckpoint, c.Seq, fmt.Sprintf("checkpoint %d is of scope %q", c.N, c.Scope)}
		}
		pub, ok := l.ring.publics[c.KeyID]
		if !ok {
			return nil, &Break{BadCheckpoint, c.Seq, fmt.Sprintf("checkpoint %d is signed by key %q, not in the keyring", c.N, c.KeyID)}
		}
		if !ed25519.Verify(pub, c.signed(), c.Sig) {
			return nil, &Break{BadCheckpoint, c.Seq, fmt.Sprintf("checkpoint %d has a bad signature", c.N)}
		}
		if i == 0 {
			continue
		}
		p := &cs[i-1]
		if c.N != p.N+1 || !bytes.Equal(c.Prev, p.Hash()) || c.Seq < p.Seq {
			return nil, &Break{BadCheckpoint, c.Seq, fmt.Sprintf("checkpoint %d does not follow checkpoint %d", c.N, p.N)}
		}
	}
	if len(cs) == 0 {
		return nil, nil
	}
	return &cs[len(cs)-1], nil
}

// VerifyAll verifies every scope of the context's tenant with entries, and
// every scope in checkpoints (the tenant's checkpoints by scope), parallel
// at a time (at least 1), each as Verify against its checkpoints. It
// returns one Result per scope.
func (l *Log) VerifyAll(ctx context.Context, parallel int, checkpoints map[string][]Checkpoint) ([]Result, error) {
	scopes, err := l.Scopes(ctx)
	if err != nil {
		return nil, err
	}
	for s := range checkpoints {
		found := false
		for _, t := range scopes {
			found = found || t == s
		}
		if !found { // a scope whose whole log is gone still has a checkpoint
			scopes = append(scopes, s)
		}
	}
	out := make([]Result, len(scopes))
	errs := make([]error, len(scopes))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i, s := range scopes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i], errs[i] = l.Verify(ctx, s, &VerifyOptions{Checkpoints: checkpoints[s]})
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}
