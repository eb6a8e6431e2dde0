package server

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// MaxPageBytes bounds the JSON of one page of a list route (GET
// /v1/outbox/dead, GET /v1/inbox/{source}, GET /v1/audit), 4 MiB, so that
// a page of large items (dead letters' payloads, webhook bodies, audit
// data) stays a reply a client can read. A page holds at most limit items
// and stops before the item that would take its JSON over this budget.
// The first item of a page always fits, however large (a webhook body of
// MaxInboxBody written as an escaped JSON string is several times the
// budget), so a page always makes progress. next is the cursor of the
// last item served, from which the next page resumes: no item is skipped
// and none repeated. A page that holds fewer than limit items is
// therefore not the end: page on until a page comes back empty, with next
// unchanged.
const MaxPageBytes = 4 << 20

// MaxInboxBody bounds Options.InboxMaxBody (serve --inbox-max-body),
// 8 MiB: a webhook body is listed whole, alone on its page if need be, by
// GET /v1/inbox/{source}, and its JSON (a body that is not JSON becomes a
// string, each byte at most six when escaped) must fit a reply the clients
// read (the Go client reads up to 64 MiB).
const MaxInboxBody = 8 << 20

// pageBytes counts the bytes of one page's JSON against MaxPageBytes.
type pageBytes struct {
	used  int  // the page's JSON so far, the envelope's reserve included
	items int  // items admitted
	full  bool // an item was refused: so is every later one
}

// fits reports whether an item whose JSON is size bytes joins the page,
// and counts it when it does: the page's first item always, any other
// while the page's JSON, with the comma before it, stays within
// MaxPageBytes. Once an item is refused the page is full, and every later
// item is refused too, a smaller one included, so that the page ends
// right before the first item it did not serve.
func (p *pageBytes) fits(size int) bool {
	if p.full {
		return false
	}
	if p.items > 0 {
		size++ // the comma
		if p.used+size > MaxPageBytes {
			p.full = true
			return false
		}
	}
	p.used += size
	p.items++
	return true
}

// jsonPage is one page of a list route, written as
// {"<member>":[item,…],"next":"<cursor>"} and a newline, byte for byte
// as encoding/json writes a struct of those two members: each item is
// marshalled once, measured, and kept while the page fits (pageBytes).
type jsonPage struct {
	member string
	items  [][]byte
	next   int64
	size   pageBytes
}

// pageEnvelope is what a page's JSON holds besides its items and their
// commas, at most: {"":[],"next":""}, the longest cursor (an int64) and
// the newline writeJSON ends it with.
const pageEnvelope = len(`{"":[],"next":""}`) + len("9223372036854775807") + len("\n")

// newJSONPage starts the page of the items after the cursor after, in
// the array member: with no item served, next stays after.
func newJSONPage(member string, after int64) *jsonPage {
	return &jsonPage{member: member, next: after, size: pageBytes{used: pageEnvelope + len(member)}}
}

// add marshals v, the item at cursor, and appends it to the page when it
// fits, next becoming cursor; it reports false, leaving next alone, when
// the page is full (the item is the next page's first).
func (p *jsonPage) add(v any, cursor int64) (bool, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return false, fmt.Errorf("page item %d: %w", cursor, err)
	}
	if !p.size.fits(len(b)) {
		return false, nil
	}
	p.items = append(p.items, b)
	p.next = cursor
	return true, nil
}

func (p *jsonPage) appendJSON(b []byte) []byte {
	b = slices.Grow(b, p.size.used)
	b = append(b, `{"`...)
	b = append(b, p.member...)
	b = append(b, `":[`...)
	for i, item := range p.items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, item...)
	}
	b = append(b, `],"next":"`...)
	b = strconv.AppendInt(b, p.next, 10)
	return append(b, `"}`...)
}
