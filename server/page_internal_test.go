package server

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
)

// stringOf is an item whose JSON is exactly n bytes: a string of n-2
// plain letters between its quotes.
func stringOf(n int) string { return strings.Repeat("x", n-2) }

// TestPageBytesAtItsBound: a page takes an item while its JSON, the
// envelope and the comma before the item counted, stays within
// MaxPageBytes, exactly at it included, and refuses the item one byte
// larger; after a refusal it refuses every later item, a small one too,
// so it ends right before the first item it did not serve, next the last
// one it did; its first item is taken whatever its size; and what it
// writes is byte for byte what encoding/json writes, never longer than
// it counted.
func TestPageBytesAtItsBound(t *testing.T) {
	t.Parallel()
	envelope := pageEnvelope + len("items")
	first := 1 << 20
	last := MaxPageBytes - envelope - first - 1 // fills the page exactly, with its comma

	p := newJSONPage("items", 7)
	for _, c := range []struct {
		size   int
		cursor int64
		want   bool
	}{{first, 8, true}, {last, 9, true}, {2, 10, false}} {
		if ok, err := p.add(stringOf(c.size), c.cursor); ok != c.want || err != nil {
			t.Fatalf("an item of %d bytes after %d: %v, %v; want %v", c.size, p.size.used, ok, err, c.want)
		}
	}
	if p.size.used != MaxPageBytes || p.next != 9 || len(p.items) != 2 {
		t.Fatalf("a page filled exactly: %d bytes counted, next %d, %d items; want %d, 9, 2", p.size.used, p.next, len(p.items), MaxPageBytes)
	}

	p = newJSONPage("items", 7)
	for _, c := range []struct {
		size   int
		cursor int64
		want   bool
	}{{first, 8, true}, {last + 1, 9, false}, {2, 10, false}} {
		if ok, err := p.add(stringOf(c.size), c.cursor); ok != c.want || err != nil {
			t.Fatalf("an item of %d bytes after %d: %v, %v; want %v", c.size, p.size.used, ok, err, c.want)
		}
	}
	if p.next != 8 || len(p.items) != 1 {
		t.Fatalf("a page one byte short: next %d, %d items; want 8 and the first alone", p.next, len(p.items))
	}

	p = newJSONPage("items", 0)
	if ok, err := p.add(stringOf(2*MaxPageBytes), 1); !ok || err != nil || p.next != 1 {
		t.Fatalf("a first item twice the budget: %v, %v, next %d; want it taken", ok, err, p.next)
	}
	if ok, _ := p.add(stringOf(2), 2); ok {
		t.Fatal("a second item after a first over the budget was taken")
	}

	// What it writes: encoding/json's bytes, within what it counted, the
	// longest cursor included.
	type item struct {
		S string `json:"s"`
		H string `json:"h"`
	}
	p = newJSONPage("items", 3)
	want := struct {
		Items []item `json:"items"`
		Next  string `json:"next"`
	}{Items: []item{}, Next: "3"}
	check := func() {
		t.Helper()
		var b bytes.Buffer
		_ = json.NewEncoder(&b).Encode(want)
		got := append(p.appendJSON(nil), '\n')
		if !bytes.Equal(got, b.Bytes()) {
			t.Fatalf("the page writes %.200q, encoding/json %.200q", got, b.Bytes())
		}
		if len(got) > p.size.used {
			t.Fatalf("the page writes %d bytes, more than the %d it counted", len(got), p.size.used)
		}
	}
	check()
	for i, it := range []item{{"a", "<b>&\u2028"}, {"\x01", "é"}} {
		cursor := math.MaxInt64 - int64(1-i)
		if ok, err := p.add(it, cursor); !ok || err != nil {
			t.Fatalf("item %d: %v, %v", i, ok, err)
		}
		want.Items = append(want.Items, it)
		want.Next = strconv.FormatInt(cursor, 10)
		check()
	}
	if _, err := p.add(json.RawMessage("{"), 1); err == nil {
		t.Fatal("an item that does not marshal was taken")
	}
}
