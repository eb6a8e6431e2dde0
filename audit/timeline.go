package audit

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
)

// TimelineVersion is the migration (018) from which a scope's head row
// records the PostgreSQL timeline its last entry was appended on, and
// Append records a change of it in the chain (ActionTimelineChanged).
// Before it, during a rollout, Append appends as the previous release did.
const TimelineVersion = 18

// ActionTimelineChanged is the action of the entry Append writes, on
// PostgreSQL, before the first entry appended on another timeline than the
// scope's previous entry: after a failover (a standby promoted, which
// moves the cluster to a new timeline), or a restore. Its actor is
// "racefree", its subject the new timeline in decimal and its data
// {"from": old timeline, "to": new timeline, "last_seq": n}, where n is
// the chain's last entry when the change was recorded (the entry before
// this one): the last entry of the old timeline that the new primary
// holds. It is MACed like any other entry, so none of the three can be
// changed unnoticed. A promoted asynchronous standby may lack the last
// commits of the primary it replaces: entries that primary acknowledged
// after entry n may be lost, and their numbers given to other entries
// since. Verify reports every such entry it checks (Result.PossibleLoss).
// Callers cannot append entries with this action.
const ActionTimelineChanged = "racefree.audit.timeline_changed"

// TimelineChange is an ActionTimelineChanged entry Verify checked: entry
// Seq records that the chain moved from timeline From to timeline To, and
// that its last entry then was LastSeq. Entries the old primary
// acknowledged after LastSeq may have been lost in the failover: compare
// them with checkpoints of the old timeline kept outside the database (a
// checkpoint past LastSeq, given to Verify, makes it report the chain
// RolledBack or Truncated).
type TimelineChange struct {
	Seq     int64 `json:"seq"`           // the ActionTimelineChanged entry
	From    int64 `json:"from_timeline"` // the timeline before
	To      int64 `json:"to_timeline"`   // the timeline after
	LastSeq int64 `json:"last_seq"`      // the chain's last entry on timeline From that survived
}

// Warning returns the one-line warning Verify reports for c.
func (c TimelineChange) Warning() string {
	return fmt.Sprintf("entry %d records a move from timeline %d to %d: entries acknowledged on timeline %d after entry %d may have been lost; compare them with checkpoints kept outside the database",
		c.Seq, c.From, c.To, c.From, c.LastSeq)
}

// timelineRecord is the data of an ActionTimelineChanged entry.
type timelineRecord struct {
	From    int64 `json:"from"`
	To      int64 `json:"to"`
	LastSeq int64 `json:"last_seq"`
}

// timelineEntry returns the ActionTimelineChanged entry of a move from
// timeline from to timeline to after entry last.
func timelineEntry(from, to, last int64) Entry {
	data, _ := json.Marshal(timelineRecord{From: from, To: to, LastSeq: last})
	return Entry{Actor: "racefree", Action: ActionTimelineChanged, Subject: strconv.FormatInt(to, 10), Data: data}
}

// parseTimelineEntry returns the change an ActionTimelineChanged entry
// numbered seq with subject and data records, and false when it records
// none: two different timelines from 1, its subject the new one, and an
// entry before it.
func parseTimelineEntry(seq int64, subject string, data []byte) (TimelineChange, bool) {
	var r timelineRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return TimelineChange{}, false
	}
	if r.From < 1 || r.To < 1 || r.From == r.To || r.LastSeq < 0 || r.LastSeq >= seq || subject != strconv.FormatInt(r.To, 10) {
		return TimelineChange{}, false
	}
	return TimelineChange{Seq: seq, From: r.From, To: r.To, LastSeq: r.LastSeq}, true
}

// timelines is what lock_head_timeline reads: the timeline the head row
// recorded (NULL before migration 018, or on SQLite) and the server's
// (NULL on SQLite, which has none).
type timelines struct{ head, server sql.NullInt64 }

// changed reports that the chain's last entry was appended on another
// timeline than the server's.
func (tl timelines) changed() bool {
	return tl.head.Valid && tl.server.Valid && tl.head.Int64 != tl.server.Int64
}

// unset reports that the server has a timeline and the head row records
// none yet.
func (tl timelines) unset() bool { return !tl.head.Valid && tl.server.Valid }

// setTimeline records timeline tl on the tenant's scope's head row, under
// its lock.
func (l *Log) setTimeline(ctx context.Context, tx *sql.Tx, t, scope string, tl int64) error {
	if _, err := tx.ExecContext(ctx, l.q.Get("set_timeline"), t, scope, tl); err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	return nil
}
