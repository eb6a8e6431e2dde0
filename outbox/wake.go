package outbox

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
)

// Channel is the PostgreSQL notification channel Enqueue notifies, with
// the tenant as payload.
const Channel = "racefree_outbox"

// hub carries in-process wake-ups from Enqueue to the relays of one
// *racefree.DB. Each wake-up goes to one relay, in turn, among those that
// serve its tenant and topic (RelayOptions.Tenants and Topics): on SQLite
// every claim takes the one write lock, so waking them all would have all
// but one claim nothing, in turn; and a relay that does not serve the
// message would claim nothing and leave it to the next poll. A relay
// keeps the tenant it was woken for pending until a claim of it comes
// back short, so one relay suffices; the others find the rest at their
// polls.
type hub struct {
	mu   sync.Mutex
	subs []*waker
	next int

	notifyMu sync.Mutex
	notified map[string]time.Time // tenant -> last NOTIFY sent
}

// notifyDue reports whether an enqueue of tenant t should NOTIFY: none was
// sent for t from this process in the last interval (negative: always).
func (h *hub) notifyDue(t string, interval time.Duration) bool {
	if interval < 0 {
		return true
	}
	now := time.Now()
	h.notifyMu.Lock()
	defer h.notifyMu.Unlock()
	if last, ok := h.notified[t]; ok && now.Sub(last) < interval {
		return false
	}
	if h.notified == nil {
		h.notified = map[string]time.Time{}
	}
	h.notified[t] = now
	return true
}

var hubs sync.Map // *racefree.DB -> *hub

func hubOf(db *racefree.DB) *hub {
	h, _ := hubs.LoadOrStore(db, &hub{})
	return h.(*hub)
}

func (h *hub) subscribe(w *waker) {
	h.mu.Lock()
	h.subs = append(h.subs, w)
	h.mu.Unlock()
}

func (h *hub) unsubscribe(w *waker) {
	h.mu.Lock()
	h.subs = slices.DeleteFunc(h.subs, func(x *waker) bool { return x == w })
	h.mu.Unlock()
}

// wake signals the next relay in turn that serves tenantID and topic
// (any topic when topic is ""), if one does.
func (h *hub) wake(tenantID, topic string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := 1; i <= len(h.subs); i++ {
		j := (h.next + i) % len(h.subs)
		if w := h.subs[j]; w.serves == nil || w.serves(tenantID, topic) {
			h.next = j
			w.wakeLocked(tenantID)
			return
		}
	}
}

// waker collects the tenants a relay was told about, and signals it.
type waker struct {
	mu        sync.Mutex
	tenants   map[string]bool // tenant -> woken by Enqueue in this process (see wakeLocked)
	all       bool
	c         chan struct{}
	followUps map[string]*time.Timer
	stopped   bool
	// serves reports whether the relay claims messages of a tenant and
	// topic (any topic when ""); nil: every message.
	serves func(tenant, topic string) bool
}

func newWaker() *waker {
	return &waker{tenants: map[string]bool{}, c: make(chan struct{}, 1), followUps: map[string]*time.Timer{}}
}

// notified wakes the relay for tenant t, and again after followUp (when
// positive), once per follow-up period however many notifications come:
// enqueues that skipped their NOTIFY (Options.NotifyInterval) and
// committed meanwhile are found then.
func (w *waker) notified(t string, followUp time.Duration) {
	w.wake(t)
	if followUp <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.followUps[t] != nil {
		return
	}
	w.followUps[t] = time.AfterFunc(followUp, func() {
		w.mu.Lock()
		delete(w.followUps, t)
		w.mu.Unlock()
		w.wake(t)
	})
}

// start allows follow-ups (again).
func (w *waker) start() {
	w.mu.Lock()
	w.stopped = false
	w.mu.Unlock()
}

// stop cancels the pending follow-ups.
func (w *waker) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	for t, tm := range w.followUps {
		tm.Stop()
		delete(w.followUps, t)
	}
}

func (w *waker) wake(tenantID string) {
	w.mu.Lock()
	if _, ok := w.tenants[tenantID]; !ok {
		w.tenants[tenantID] = false
	}
	w.mu.Unlock()
	w.signal()
}

// wakeLocked wakes the relay for a message whose transaction may still
// be open: its next claim of the tenant must take the write lock (SQLite),
// which waits for that transaction, rather than first look without it.
func (w *waker) wakeLocked(tenantID string) {
	w.mu.Lock()
	w.tenants[tenantID] = true
	w.mu.Unlock()
	w.signal()
}

func (w *waker) wakeAll() {
	w.mu.Lock()
	w.all = true
	w.mu.Unlock()
	w.signal()
}

func (w *waker) signal() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// take returns the tenants named since the last take (with whether their
// claim must take the write lock), and whether every tenant is to be
// visited.
func (w *waker) take() (tenants map[string]bool, all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	tenants = maps.Clone(w.tenants)
	clear(w.tenants)
	all, w.all = w.all, false
	return tenants, all
}

// listen holds one connection of db's pool LISTENing on Channel until ctx
// ends, and wakes w for each notification. When the connection fails it
// waits (retry, doubling up to 30s) and connects again, and wakes every
// tenant once it listens again, for the notifications it may have missed.
// The connection is discarded, never returned to the pool, when it ends.
func listen(ctx context.Context, db *racefree.DB, w *waker, followUp time.Duration, report func(error), ready func()) {
	retry := 100 * time.Millisecond
	for first := true; ctx.Err() == nil; first = false {
		err := listenOnce(ctx, db, w, followUp, func() {
			retry = 100 * time.Millisecond
			if !first {
				w.wakeAll()
			}
			if ready != nil {
				ready()
				ready = nil
			}
		})
		if ctx.Err() != nil {
			return
		}
		report(fmt.Errorf("outbox listen: %w", err))
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		retry = min(2*retry, 30*time.Second)
	}
}

var errDiscard = errors.New("discard the listening connection")

func listenOnce(ctx context.Context, db *racefree.DB, w *waker, followUp time.Duration, listening func()) error {
	conn, err := db.SQL().Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var failure error
	_ = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			failure = fmt.Errorf("the pool's connections are %T, not pgx's", dc)
			return driver.ErrBadConn
		}
		pc := sc.Conn()
		if _, err := pc.Exec(ctx, "LISTEN "+Channel); err != nil {
			failure = err
			return driver.ErrBadConn
		}
		listening()
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil {
				failure = err
				// The connection still listens: never hand it back.
				return driver.ErrBadConn
			}
			w.notified(n.Payload, followUp)
		}
	})
	if failure == nil {
		failure = errDiscard
	}
	return failure
}
