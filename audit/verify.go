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
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
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
	// last number its head row counts, or the scope has entries and no head
	// row (deleted: whether the chain was cut short cannot be told).
	Truncated Kind = "truncated"
	// RolledBack: the log, its checkpoints included, is older than a
	// checkpoint, or differs from it (or from the position Verify resumes
	// from) at its entry: an older copy of the log was restored.
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
// under key epoch KeyID. Pass Result.Verified as [VerifyOptions.After] to
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
	// the entries up to it, once the log still holds its entry with its
	// MAC (else the break is Truncated, Missing or RolledBack at it,
	// unless Prune deleted it since). Defaults to the beginning.
	After *Position
	// Checkpoints are the tenant's scope's checkpoints kept outside the
	// database, oldest first and consecutive. Verify checks their tenant,
	// scope, signatures and chain, and that the log still holds the last
	// one's entry with its MAC. Without any, a cut tail and a restored
	// older copy go unnoticed (Result.Anchored is false).
	Checkpoints []Checkpoint
	// Progress, when set, is called with the number of entries checked so
	// far, every 10,000 entries and at the end; never by two goroutines
	// at once.
	Progress func(rows int64)
	// Streams is how many connections Verify reads a long chain on at
	// once, each streaming a contiguous part of at least 25,000 entries;
	// what it reports is the same as from one stream. Defaults to
	// GOMAXPROCS, at most 8; 1 reads the chain in one stream.
	Streams int

	minSpan int64 // entries in a part at least; tests lower it. Defaults to 25,000.
	every   int64 // entries between two Progress calls; tests lower it. Defaults to 10,000.
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
	// PossibleLoss lists the ActionTimelineChanged entries among those
	// checked, in order: the chain moved to another PostgreSQL timeline (a
	// failover) there, and entries acknowledged on the old timeline after
	// each one's LastSeq may have been lost. The chain is still intact
	// (Break nil): the chain the new primary holds is whole, and only
	// checkpoints kept outside the database can tell whether it lost
	// entries the old one acknowledged.
	PossibleLoss []TimelineChange `json:"possible_loss,omitempty"`
	// Warnings has one line for each of PossibleLoss (its Warning).
	Warnings []string `json:"warnings,omitempty"`
}

// Intact reports that no break was found.
func (r *Result) Intact() bool { return r.Break == nil }

// reorderWindow is how far around a broken entry Verify looks for the
// position its MAC is valid at.
const reorderWindow = 16

// Verify streams the chain of the context's tenant's scope ([tenant.From])
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
// elsewhere can ([VerifyOptions.Checkpoints]), and only one of the same
// tenant and scope.
//
// A scope pruned by Prune starts at its retention floor (or at
// [VerifyOptions.After], when that is past it), and is intact only if its
// chain holds the ActionPruned entry that names that floor's number, MAC
// and key epoch: a prefix gone without one is Missing at the floor.
//
// A chain that moved to another PostgreSQL timeline (a failover) holds an
// ActionTimelineChanged entry there, which must name two different
// timelines and an entry before it. Verify reports each one it checks in
// Result.PossibleLoss and Result.Warnings, and the chain intact: entries
// the old primary acknowledged after the entry it names may have been
// lost, which only checkpoints of the old timeline kept outside the
// database can reveal. Entries before [VerifyOptions.After], or pruned, are
// not checked, and their timeline entries not reported.
//
// Verify reads the head row before the entries, so appends that commit
// while it runs never look like a break.
//
// A chain with at least 50,000 entries to check is read in contiguous
// parts, [VerifyOptions.Streams] at once, each on its own connection (on
// SQLite in WAL mode readers do not wait for each other): every entry's
// checks need only its predecessor's MAC and key epoch, so each part
// checks its first entry against its own stored prev_mac and key, and the
// boundaries are checked when the parts are joined: the part before must
// end at the boundary, and the next part's first entry must chain to that
// part's last MAC under its key epoch. The result is what one stream
// reports: the lowest break, with the rows and position verified before
// it.
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
	// A resumed verification trusts the entries up to its position, but
	// the log must still hold that entry with that MAC: a tail cut since,
	// or the log restored and appended to again, would otherwise go
	// unnoticed. A position pruned since is not there to compare.
	if o.After != nil && o.After.Seq > head.floor.Seq {
		brk, err := l.stillHolds(ctx, scope, *o.After)
		if err != nil {
			return Result{}, fmt.Errorf("audit: verify %s: %w", scope, err)
		}
		if brk != nil {
			res.Break = brk
			return res, nil
		}
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
	if k := o.streams(head.seq - start.Verified.Seq); k > 1 {
		floorSeen, err = l.streamSpans(ctx, t, scope, &o, anchor, floor, &res, head.seq, k)
	} else {
		err = l.read(ctx, func(exec racefree.Executor) error {
			res = start // a retried transaction starts over
			var (
				r    spanResult
				err  error
				tick func()
			)
			if o.Progress != nil {
				var ticks int64
				tick = func() { ticks++; o.Progress(ticks * o.progressStep()) }
			}
			r, err = l.stream(ctx, exec, t, scope, span{from: start.Verified, through: math.MaxInt64}, anchor, floor, o.progressStep(), tick)
			res.Rows, res.Verified, res.Break, floorSeen, res.PossibleLoss = r.rows, r.verified, r.brk, r.floorSeen, r.timelines
			return err
		})
	}
	if err != nil {
		return Result{}, fmt.Errorf("audit: verify %s: %w", scope, wire.Of(l.db).InterpretError(err))
	}
	if o.Progress != nil {
		o.Progress(res.Rows)
	}
	for _, c := range res.PossibleLoss {
		res.Warnings = append(res.Warnings, c.Warning())
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
	if res.Break == nil && !head.found && last > 0 {
		// Entries with no head row: either the scope's first append
		// committed after the head was read (read it again), or the head
		// row, which counts the entries, was deleted and a chain cut short
		// can no longer be detected. The head read again only says which:
		// its count may include entries appended since.
		again, err := l.head(ctx, t, scope)
		if err != nil {
			return Result{}, fmt.Errorf("audit: verify %s: %w", scope, err)
		}
		if !again.found {
			res.Break = &Break{Truncated, last + 1, fmt.Sprintf("the chain holds entries through %d but the scope has no head row to count them", last)}
			return res, nil
		}
	}
	return res, nil
}

// stillHolds returns the break, if any, between position p, where a
// previous Verify ended, and the log: the chain ends before p's entry
// (Truncated), the entry is absent (Missing), or another entry sits at its
// number (RolledBack).
func (l *Log) stillHolds(ctx context.Context, scope string, p Position) (*Break, error) {
	rs, err := l.List(ctx, scope, p.Seq-1, 1)
	switch {
	case err != nil:
		return nil, err
	case len(rs) == 0:
		return &Break{Truncated, p.Seq, fmt.Sprintf("the chain ends before entry %d, verified before", p.Seq)}, nil
	case rs[0].Seq != p.Seq:
		return &Break{Missing, p.Seq, fmt.Sprintf("entry %d, verified before, is absent; the next is %d", p.Seq, rs[0].Seq)}, nil
	case !hmac.Equal(rs[0].MAC, p.MAC):
		return &Break{RolledBack, p.Seq, fmt.Sprintf("entry %d is not the entry verified before", p.Seq)}, nil
	}
	return nil, nil
}

// progressEvery is how many entries Verify checks between two calls of
// [VerifyOptions.Progress].
const progressEvery = 10_000

// progressStep returns how many entries Verify checks between two calls
// of Progress.
func (o *VerifyOptions) progressStep() int64 {
	if o.every > 0 {
		return o.every
	}
	return progressEvery
}

// span is a contiguous part of a chain that one stream checks: the entries
// numbered after from.Seq through through.
type span struct {
	from    Position
	through int64 // math.MaxInt64: to the end of the chain, appends included
	// open: from.MAC and from.KeyID are unknown (the span starts in the
	// middle of the chain, where another stream checks the entries before
	// it). Its first entry's stored prev_mac and key id stand in for them,
	// and streamSpans checks that entry against the real predecessor.
	open bool
}

// spanResult is what stream found in a span.
type spanResult struct {
	rows      int64            // entries verified intact
	verified  Position         // the last of them (from, when none)
	brk       *Break           // the first break in the span, if any
	floorSeen bool             // an ActionPruned entry names the floor as its anchor
	timelines []TimelineChange // the ActionTimelineChanged entries verified
	firstSeq  int64            // the number of the first entry read (0: none)
	// first is an open span's first entry, once it passed the checks
	// that need no predecessor (number, text fields, MAC length, key).
	first *firstEntry
}

// firstEntry is an open span's first entry, copied out of the driver's
// buffers.
type firstEntry struct {
	in     entryInput
	keyID  string
	stored []byte // the stored prev_mac
	mac    []byte
}

// stream checks the entries of sp, in number order, and returns what it
// found: the first break, or the last entry verified intact. tick, when
// not nil, is called after every every entries verified.
//
// It reads verify_entries, whose columns carry the texts joined by NUL
// bytes and the stored prev_mac and MAC in one: fewer columns cost the
// driver fewer calls per row, the loop's main cost. Per row it allocates
// only what the driver does.
func (l *Log) stream(ctx context.Context, exec racefree.Executor, t, scope string, sp span, anchor *Checkpoint, floor *Position, every int64, tick func()) (r spanResult, err error) {
	rows, err := exec.QueryContext(ctx, l.q.Get("verify_entries"), t, scope, sp.from.Seq, sp.through)
	if err != nil {
		return r, err
	}
	defer rows.Close()
	var (
		epoch  = sp.from.KeyID
		last   = sp.from.Seq
		prev   = append([]byte{}, sp.from.MAC...)
		spare  = make([]byte, 0, sha256.Size) // prev's buffer, swapped each row
		open   = sp.open
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
			r.brk = &Break{k, seq, fmt.Sprintf(format, args...)}
		}
	)
	// r.verified follows the loop only here, where the MAC is copied out
	// of the loop's buffers.
	defer func() {
		r.verified = Position{Seq: last, MAC: bytes.Clone(prev), KeyID: epoch}
	}()
	in.tenant = t
	in.scope = scope
	for rows.Next() {
		if err := rows.Scan(&in.seq, &in.at, &texts, &data, &macs); err != nil {
			return r, err
		}
		in.data = data
		if r.firstSeq == 0 {
			r.firstSeq = in.seq
		}
		want := last + 1
		if in.seq != want {
			brk(Missing, want, "entry %d is absent; the next is %d", want, in.seq)
			return r, nil
		}
		in.actor, rest, ok = strings.Cut(texts, "\x00")
		in.action, rest, ok2 = strings.Cut(rest, "\x00")
		in.subject, keyID, ok3 = strings.Cut(rest, "\x00")
		if !ok || !ok2 || !ok3 || strings.IndexByte(keyID, 0) >= 0 {
			brk(Modified, in.seq, "a text field holds a NUL byte")
			return r, nil
		}
		if len(macs) < sha256.Size {
			brk(Modified, in.seq, "the stored MAC is not %d bytes long", sha256.Size)
			return r, nil
		}
		stored, mac := macs[:len(macs)-sha256.Size], macs[len(macs)-sha256.Size:]
		if m == nil || keyID != mKey {
			if m, ok = macers[keyID]; !ok {
				key, ok := l.ring.scopeKey(keyID, scope)
				if !ok {
					brk(UnknownKey, in.seq, "key id %q is not in the keyring", keyID)
					return r, nil
				}
				m = newMacer(key)
				macers[keyID] = m
			}
			mKey = keyID
		}
		if open {
			// The predecessor is in another span: this entry's stored
			// prev_mac and key stand in for it, and streamSpans checks
			// them against that span's end.
			open = false
			in.data = bytes.Clone(data)
			r.first = &firstEntry{in: in, keyID: keyID, stored: bytes.Clone(stored), mac: bytes.Clone(mac)}
			prev, epoch = append(prev[:0], stored...), keyID
		}
		in.prev = prev
		if b := chains(m, &in, keyID, epoch, stored, mac); b != nil {
			r.brk = b
			return r, nil
		}
		if anchor != nil && in.seq == anchor.Seq && !hmac.Equal(mac, anchor.MAC) {
			brk(RolledBack, in.seq, "checkpoint %d vouches for another entry %d", anchor.N, anchor.Seq)
			return r, nil
		}
		epoch = keyID
		switch in.action {
		case ActionKeyRotated:
			var link struct{ From, To string }
			if err := json.Unmarshal(in.data, &link); err != nil || link.From != keyID || link.To == "" {
				brk(Modified, in.seq, "a rotation entry that does not link key %q to the next", keyID)
				return r, nil
			}
			epoch = link.To
		case ActionPruned:
			var p pruneRecord
			if err := json.Unmarshal(in.data, &p); err != nil || p.Through < 1 || p.Through >= in.seq {
				brk(Modified, in.seq, "a pruned entry that does not name an anchor before it")
				return r, nil
			}
			r.floorSeen = r.floorSeen || floor != nil && p.Through == floor.Seq && hmac.Equal(p.MAC, floor.MAC) && p.KeyID == floor.KeyID
		case ActionTimelineChanged:
			c, ok := parseTimelineEntry(in.seq, in.subject, in.data)
			if !ok {
				brk(Modified, in.seq, "a timeline entry that does not name two timelines and an entry before it")
				return r, nil
			}
			r.timelines = append(r.timelines, c)
		}
		prev, spare = append(spare[:0], mac...), prev
		last = in.seq
		r.rows++
		if tick != nil && r.rows%every == 0 {
			tick()
		}
	}
	return r, rows.Err()
}

// chains checks what ties an entry (whose in.prev is its predecessor's
// MAC) to the chain before it: a key of its epoch, a MAC valid over that
// predecessor, and that predecessor's MAC as its stored prev_mac. It
// returns the break, or nil.
func chains(m *macer, in *entryInput, keyID, epoch string, stored, mac []byte) *Break {
	if epoch != "" && keyID != epoch {
		return &Break{KeyOutsideEpoch, in.seq, fmt.Sprintf("entry under key %q in the epoch of key %q", keyID, epoch)}
	}
	if !hmac.Equal(m.sum(in), mac) {
		if at, ok := reorderedAt(m, in, stored, mac); ok {
			return &Break{Reordered, in.seq, fmt.Sprintf("the entry at %d belongs at %d", in.seq, at)}
		}
		return &Break{Modified, in.seq, "the MAC does not match the entry"}
	}
	if !bytes.Equal(stored, in.prev) {
		return &Break{Modified, in.seq, fmt.Sprintf("the stored prev_mac is not entry %d's MAC", in.seq-1)}
	}
	return nil
}

// Parallel verification: a chain of at least twice minSpan entries after
// the verified position is split into contiguous spans, streamed at once.
const (
	maxStreams = 8      // VerifyOptions.Streams' default is GOMAXPROCS, at most this
	minSpan    = 25_000 // entries in a span at least
)

// streams returns how many spans to stream n entries in.
func (o *VerifyOptions) streams(n int64) int64 {
	k := int64(o.Streams)
	if k <= 0 {
		k = int64(min(runtime.GOMAXPROCS(0), maxStreams))
	}
	least := o.minSpan
	if least <= 0 {
		least = minSpan
	}
	return min(k, n/least)
}

// streamSpans checks the chain after res.Verified, whose head counts
// through, in k contiguous spans streamed at once, each on a connection
// (and, on PostgreSQL, in a transaction) of its own, and stitches their
// results into what one stream would have found: the lowest break, the
// rows verified before it and the last entry verified intact.
//
// At each boundary it checks that the span before ended at the boundary
// (entries missing there, where that span ends short, are Missing, as one
// stream reports them) and re-checks the next span's first entry against
// the real predecessor: its key epoch, its MAC over that predecessor's
// MAC and its stored prev_mac. Entries appended while it runs are checked
// by the last span, which runs to the end.
func (l *Log) streamSpans(ctx context.Context, t, scope string, o *VerifyOptions, anchor *Checkpoint, floor *Position, res *Result, through, k int64) (floorSeen bool, err error) {
	from := res.Verified
	n := through - from.Seq
	spans := make([]span, k)
	for i := range spans {
		lo := from.Seq + n*int64(i)/k
		spans[i] = span{from: Position{Seq: lo}, through: from.Seq + n*int64(i+1)/k, open: i > 0}
	}
	spans[0].from = from
	spans[k-1].through = math.MaxInt64
	var (
		results = make([]spanResult, k)
		errs    = make([]error, k)
		cancels = make([]context.CancelFunc, k)
		ctxs    = make([]context.Context, k)
		wg      sync.WaitGroup
		mu      sync.Mutex // serialises Progress
		checked int64
		tick    func()
	)
	if o.Progress != nil {
		tick = func() {
			mu.Lock()
			defer mu.Unlock()
			checked += o.progressStep()
			o.Progress(checked)
		}
	}
	for i := range spans {
		ctxs[i], cancels[i] = context.WithCancel(ctx)
		defer cancels[i]()
	}
	for i := range spans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.read(ctxs[i], func(exec racefree.Executor) error {
				var err error
				results[i], err = l.stream(ctxs[i], exec, t, scope, spans[i], anchor, floor, o.progressStep(), tick)
				return err
			})
			if errs[i] == nil && results[i].brk != nil {
				for _, cancel := range cancels[i+1:] { // their findings come after this break
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	st := spanResult{verified: from}
	for i := range spans {
		if errs[i] != nil {
			return false, errs[i]
		}
		r := &results[i]
		if i > 0 && st.verified.Seq != spans[i].from.Seq {
			// The span before ended short of the boundary without a
			// break: the entries after its last are gone, and one stream
			// would name the next entry there is.
			for j := i; j < len(spans); j++ {
				if errs[j] != nil {
					return false, errs[j]
				}
				if next := results[j].firstSeq; next != 0 {
					st.brk = &Break{Missing, st.verified.Seq + 1, fmt.Sprintf("entry %d is absent; the next is %d", st.verified.Seq+1, next)}
					break
				}
			}
			break
		}
		if r.first != nil {
			if st.brk = l.relink(scope, r.first, st.verified); st.brk != nil {
				break
			}
		}
		st.rows += r.rows
		st.floorSeen = st.floorSeen || r.floorSeen
		st.timelines = append(st.timelines, r.timelines...)
		if i == 0 || r.rows > 0 { // an open span's start is not its own
			st.verified = r.verified
		}
		if r.brk != nil {
			st.brk = r.brk
			break
		}
	}
	res.Rows, res.Verified, res.Break, res.PossibleLoss = st.rows, st.verified, st.brk, st.timelines
	return st.floorSeen, nil
}

// relink checks an open span's first entry against its real predecessor
// p, as one stream would have: its key epoch, its MAC over p's MAC and its
// stored prev_mac.
func (l *Log) relink(scope string, f *firstEntry, p Position) *Break {
	key, _ := l.ring.scopeKey(f.keyID, scope) // the span found it
	in := f.in
	in.prev = p.MAC
	return chains(newMacer(key), &in, f.keyID, p.KeyID, f.stored, f.mac)
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
