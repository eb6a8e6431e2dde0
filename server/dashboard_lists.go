package server

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/racefree/racefree"
)

// A dashboard list (the live claims, the quota counters, ...) is filtered
// and paged by its own query parameters, named after the list
// ("claims.key", "claims.after"), so that every list pages on its own:
// a GET form per list sends its filter, and its "next" link sends the
// filter with the last row's sort key (after=, once per part of the key:
// keyset paging, so a page costs what it shows whatever the table holds,
// and the row at a page's boundary shows exactly once).

// listSpec describes one list's parameters.
type listSpec struct {
	name   string      // the list's name in the page's ids: "claims"
	prefix string      // the parameters' prefix, "claims."; "" for the dead letters, as they always were
	anchor string      // the section's id, where the next link lands
	what   string      // what the list shows, for the form's label and the next link: "live claims"
	fields []fieldSpec // the filter's fields, in the form's order
	cursor []cursorKind
	limit  int // rows a page
}

// fieldSpec is one filter field: its parameter (without the prefix), its
// label on the form and its bound in bytes. A check field is a checkbox:
// "on", or absent.
type fieldSpec struct {
	name, label string
	max         int
	check       bool
}

// cursorKind is the kind of one part of a list's sort key.
type cursorKind int

const (
	cursorInt  cursorKind = iota // a whole number, 0 or more
	cursorText                   // text, bounded by dashTextMax
)

// dashTextMax bounds a text part of a cursor (the longest key a list shows).
const dashTextMax = 1024

// dashList is one list's filter and page as a request asked for them, and
// the next page's link once the page is read.
type dashList struct {
	spec   *listSpec
	Fields []dashField
	after  []string // the sort key after which the page starts; empty: the first page
	// Next is the next page's address (the filter and the last row's sort
	// key), empty when this page is the last.
	Next string
}

// dashField is one filter field of a list's form.
type dashField struct {
	Name, ID, Label, Value string
	Check                  bool // a checkbox, checked when Value is "on"
}

// Name names the list in the page's ids (its form's fields, its next link).
func (l *dashList) Name() string { return l.spec.name }

// Anchor is the section the list is in.
func (l *dashList) Anchor() string { return l.spec.anchor }

// Active reports whether the list is filtered or shows a page other than
// the first: the form offers to clear it.
func (l *dashList) Active() bool {
	for _, f := range l.Fields {
		if f.Value != "" {
			return true
		}
	}
	return len(l.after) > 0
}

// What says what the list shows.
func (l *dashList) What() string { return l.spec.what }

// Limit is the list's page size.
func (l *dashList) Limit() int { return l.spec.limit }

// parseList reads spec's list from the request's query q. A filter value
// or a sort key that is not valid is [racefree.ErrInvalidInput], its
// message naming the parameter.
func parseList(q url.Values, spec *listSpec) (*dashList, error) {
	l := &dashList{spec: spec}
	for _, f := range spec.fields {
		name := spec.prefix + f.name
		v := q.Get(name)
		switch {
		case f.check:
			if v != "" && v != "on" {
				return nil, racefree.Invalid(name, `must be "on" or absent`)
			}
		case v != "":
			if err := racefree.CheckText(name, v, f.max); err != nil {
				return nil, err
			}
		}
		l.Fields = append(l.Fields, dashField{Name: name, ID: spec.name + "-" + f.name + "-filter", Label: f.label, Value: v, Check: f.check})
	}
	after := q[spec.prefix+"after"]
	if len(after) == 0 {
		return l, nil
	}
	if len(after) != len(spec.cursor) {
		return nil, racefree.Invalid(spec.prefix+"after", "must be given %d times (the last row's sort key), got %d", len(spec.cursor), len(after))
	}
	for i, v := range after {
		switch spec.cursor[i] {
		case cursorInt:
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
				return nil, racefree.Invalid(spec.prefix+"after", "part %d must be a whole number, 0 or more", i+1)
			}
		case cursorText:
			// Empty is a sort key too: the default limiter's scope.
			if len(v) > dashTextMax || !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
				return nil, racefree.Invalid(spec.prefix+"after", "part %d must be UTF-8 text of at most %d bytes, without NUL", i+1, dashTextMax)
			}
		}
	}
	l.after = after
	return l, nil
}

// limiter is the quota list's limiter filter as its query's argument:
// nil for any limiter, "" for the default limiter (the scope of quotas
// charged over HTTP, and of limiters that name none), or the scope named.
// parseLists refused a name together with the default.
func (l *dashList) limiter() any {
	switch {
	case l.value("default") == "on":
		return ""
	case l.value("limiter") == "":
		return nil
	}
	return l.value("limiter")
}

// value is the filter field name's value ("" for any).
func (l *dashList) value(name string) string {
	for _, f := range l.Fields {
		if f.Name == l.spec.prefix+name {
			return f.Value
		}
	}
	panic("dashboard: no filter field " + name)
}

// afterArgs are the sort key's parts as query arguments: whole numbers as
// int64, text as string, and on the first page one nil for each part.
func (l *dashList) afterArgs() []any {
	out := make([]any, len(l.spec.cursor))
	if len(l.after) == 0 {
		return out
	}
	for i, v := range l.after {
		if l.spec.cursor[i] == cursorInt {
			n, _ := strconv.ParseInt(v, 10, 64) // parseList checked it
			out[i] = n
		} else {
			out[i] = v
		}
	}
	return out
}

// afterInt is the sort key of a list keyed by one whole number, 0 on the
// first page.
func (l *dashList) afterInt() int64 {
	if len(l.after) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(l.after[0], 10, 64)
	return n
}

// paged keeps the first spec.limit of rows, read with a limit of one more
// than a page, and, when there was one more, sets l.Next to the next
// page's address: the filter and the sort key (key) of the page's last
// row, from which the next page starts.
func paged[T any](l *dashList, rows []T, key func(T) []any) []T {
	l.Next = ""
	if len(rows) <= l.spec.limit {
		return rows
	}
	rows = rows[:l.spec.limit]
	q := url.Values{}
	for _, f := range l.Fields {
		if f.Value != "" {
			q.Set(f.Name, f.Value)
		}
	}
	for _, part := range key(rows[len(rows)-1]) {
		q.Add(l.spec.prefix+"after", fmt.Sprint(part))
	}
	l.Next = "/?" + q.Encode() + "#" + l.spec.anchor
	return rows
}
