package racefree

import (
	"sync"
	"time"
)

// Clock represents the source of "now" for every time-based decision (TTLs,
// expiries, retention).
//
// Production code leaves Config.Clock nil: each statement then reads the
// engine's own clock inside the statement — clock_timestamp() on PostgreSQL,
// so that every instance sharing the database agrees, and the process clock
// on SQLite, which runs in-process. A timestamp sent by a client is never a
// clock. Tests set a *ManualClock to move time by hand.
type Clock interface {
	Now() time.Time
}

// ManualClock represents a clock that moves only when told. It is safe for
// concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a ManualClock reading t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{now: t} }

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Millis converts t to the storage unit of every racefree time column:
// Unix milliseconds, UTC.
func Millis(t time.Time) int64 { return t.UnixMilli() }

// FromMillis converts a stored time column back to a time.Time in UTC.
func FromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
