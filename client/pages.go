package client

import (
	"context"
	"fmt"
	"iter"

	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/outbox"
)

// AllDead yields the key's tenant's dead messages above after, by id,
// filtered by f's Topic and Key, as [Client.Dead] returns them, reading
// [outbox.MaxPage] at a time and paging on from the last id until a page
// is empty: a page that stops at the server's byte bound is not taken for
// the end. An error (of a page, or a page whose ids do not go past the
// last one) is yielded once, with a nil record, and ends the listing;
// breaking out of the loop sends no further request. A message that dies
// while the listing runs is yielded if its id is above the page read last.
func (c *Client) AllDead(ctx context.Context, f outbox.Filter, after int64) iter.Seq2[*outbox.Record, error] {
	return pages(after, func(after int64) ([]*outbox.Record, error) {
		return c.Dead(ctx, f, after, outbox.MaxPage)
	}, func(r *outbox.Record) int64 { return r.ID })
}

// AllInboxEvents yields the deliveries of source the key's tenant
// received above after, oldest first, as [Client.InboxEvents] returns
// them, reading [inbox.MaxListLimit] at a time and paging on from the last
// Seq until a page is empty; errors and breaking out are as for
// [Client.AllDead].
func (c *Client) AllInboxEvents(ctx context.Context, source string, after int64) iter.Seq2[inbox.Event, error] {
	return pages(after, func(after int64) ([]inbox.Event, error) {
		return c.InboxEvents(ctx, source, after, inbox.MaxListLimit)
	}, func(e inbox.Event) int64 { return e.Seq })
}

// AllEntries yields the entries of scope of the key's tenant numbered
// above after, oldest first, as [Client.Entries] returns them, reading
// [audit.MaxListLimit] at a time and paging on from the last Seq until a
// page is empty; errors and breaking out are as for [Client.AllDead].
// Listing is not verifying: [Client.Verify] checks the chain.
func (c *Client) AllEntries(ctx context.Context, scope string, after int64) iter.Seq2[audit.Record, error] {
	return pages(after, func(after int64) ([]audit.Record, error) {
		return c.Entries(ctx, scope, after, audit.MaxListLimit)
	}, func(r audit.Record) int64 { return r.Seq })
}

// pages yields the items of the pages read(after) returns, after set to
// the cursor of the last item yielded, until a page is empty. A page's
// error, or an item whose cursor is not past the one before it (a server
// that does not page on would be read for ever, its items yielded again),
// is yielded once with the zero item and ends it.
func pages[T any](after int64, read func(after int64) ([]T, error), cursor func(T) int64) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		for {
			items, err := read(after)
			if err != nil {
				yield(zero, err)
				return
			}
			if len(items) == 0 {
				return
			}
			for _, it := range items {
				next := cursor(it)
				if next <= after {
					yield(zero, fmt.Errorf("client: a page read after %d holds %d: the server does not page on", after, next))
					return
				}
				if !yield(it, nil) {
					return
				}
				after = next
			}
		}
	}
}
