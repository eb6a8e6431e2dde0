package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/server"
)

// routePage is one page of a list route, as it came: its JSON's size, its
// items' JSON each, and next.
type routePage struct {
	size  int
	items []json.RawMessage
	next  string
}

// pageThrough reads every page of the list route path (its items in
// member) from the start, ?limit=1000 so that only the byte budget can
// cut a page short, passing each page's next as the following one's after,
// until a page comes back empty. It fails after most pages: a route that
// never ends its pages (an empty page whose next moved on, or a page stuck
// at one cursor) must fail the test, not hang it. The last, empty, page is
// not returned; its next must be the after it was given.
func pageThrough(t *testing.T, h http.Handler, path, member string, most int, header ...string) []routePage {
	t.Helper()
	var pages []routePage
	after := "0"
	for range most + 1 {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		req := httptest.NewRequest("GET", path+sep+"limit=1000&after="+after, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		raw, _ := io.ReadAll(rec.Body)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s after=%s: %d %.300s", path, after, rec.Code, raw)
		}
		var out map[string]json.RawMessage
		var p routePage
		if err := json.Unmarshal(raw, &out); err != nil || json.Unmarshal(out[member], &p.items) != nil || json.Unmarshal(out["next"], &p.next) != nil {
			t.Fatalf("%s after=%s: %.300s is not a page of %s: %v", path, after, raw, member, err)
		}
		p.size = len(raw)
		if len(p.items) == 0 {
			if p.next != after {
				t.Fatalf("%s after=%s: an empty page whose next is %s; want it unchanged", path, after, p.next)
			}
			return pages
		}
		pages = append(pages, p)
		after = p.next
	}
	t.Fatalf("%s: still not at its end after %d pages: %d items so far", path, most, len(pages))
	return nil
}

// checkRoutePages fails unless pages hold exactly the items of cursor want, in
// order, each once, every page's next the cursor of its last item (cursor
// reads an item's cursor), every page within server.MaxPageBytes unless it
// holds one item alone, and every page but the last full: the next page's
// first item would have taken it over the budget (within the bytes the
// budget reserves for the envelope), so it is the budget that cut it, not
// a page that stops early.
func checkRoutePages(t *testing.T, pages []routePage, want []int64, cursor func(json.RawMessage) int64) {
	t.Helper()
	var got []int64
	for i, p := range pages {
		for _, it := range p.items {
			got = append(got, cursor(it))
		}
		if last := strconv.FormatInt(cursor(p.items[len(p.items)-1]), 10); p.next != last {
			t.Errorf("page %d: next %s, want %s, its last item's", i+1, p.next, last)
		}
		if p.size > server.MaxPageBytes && len(p.items) > 1 {
			t.Errorf("page %d: %d bytes of JSON in %d items, over MaxPageBytes (%d)", i+1, p.size, len(p.items), server.MaxPageBytes)
		}
		if i+1 < len(pages) && p.size+1+len(pages[i+1].items[0]) <= server.MaxPageBytes-64 {
			t.Errorf("page %d: %d bytes stopped before an item of %d that fitted", i+1, p.size, len(pages[i+1].items[0]))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the pages hold %v, want %v: each once, in order", got, want)
	}
}

// pageSizes are the pages' item counts.
func pageSizes(pages []routePage) []int {
	var out []int
	for _, p := range pages {
		out = append(out, len(p.items))
	}
	return out
}

// TestDeadLetterPagesAreBoundedByBytes: GET /v1/outbox/dead stops a page
// at server.MaxPageBytes of JSON, whatever its limit: four dead letters of
// a 1 MiB payload that is not JSON (base64: 1.33 MiB each) come two to a
// page, each page's next the last id served, so paging on by next lists
// each once, in order, and ends with an empty page.
func TestDeadLetterPagesAreBoundedByBytes(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s, o := outboxServer(t, db)
		ctx := context.Background()
		var ids []int64
		for i := range 4 {
			ids = append(ids, killWith(t, o, ctx, "mail", bytes.Repeat([]byte{0xf0 + byte(i)}, outbox.MaxPayloadBytes), nil))
		}
		pages := pageThrough(t, s.Handler(), "/v1/outbox/dead", "messages", 6, "Authorization", "Bearer tok")
		checkRoutePages(t, pages, ids, func(m json.RawMessage) int64 {
			var v struct {
				ID      int64  `json:"id"`
				Payload string `json:"payload_base64"`
			}
			if err := json.Unmarshal(m, &v); err != nil || len(v.Payload) != (outbox.MaxPayloadBytes+2)/3*4 {
				t.Fatalf("a dead letter of %d bytes: %v, a payload of %d", len(m), err, len(v.Payload))
			}
			return v.ID
		})
		if got := fmt.Sprint(pageSizes(pages)); got != "[2 2]" {
			t.Fatalf("pages of %s dead letters, want [2 2]", got)
		}
	})
}

// TestInboxPagesAreBoundedByJSONBytes: GET /v1/inbox/{source} bounds a
// page by the bytes of its JSON, not only by the payload bytes the inbox
// reads (inbox.MaxListBytes): a body that is not JSON is listed as a
// string, each control byte six bytes escaped, so bodies of 1.7 MiB in all
// make 10 MiB of JSON. Four of 256 KiB (1.5 MiB of JSON each) come two to
// a page at most; one of 720 KiB (4.2 MiB of JSON, over the budget alone)
// is served alone on its page, never refused, so paging by next reaches
// every event once, in order, and ends.
func TestInboxPagesAreBoundedByJSONBytes(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{Token: "tok", InboxSecrets: map[string][]string{"stripe": {secret}}}).Handler()
		in, err := inbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		bodies := map[int64]int{}
		for i, n := range []int{256 << 10, 256 << 10, 256 << 10, 720 << 10, 256 << 10} {
			if _, err := in.Receive(context.Background(), "stripe", fmt.Sprintf("e%d", i), bytes.Repeat([]byte{1 + byte(i)}, n), nil); err != nil {
				t.Fatal(err)
			}
			bodies[int64(i+1)] = n
		}
		pages := pageThrough(t, h, "/v1/inbox/stripe", "events", 7, "Authorization", "Bearer tok")
		checkRoutePages(t, pages, []int64{1, 2, 3, 4, 5}, func(m json.RawMessage) int64 {
			var v struct {
				Seq     int64  `json:"seq"`
				Payload string `json:"payload"`
			}
			if err := json.Unmarshal(m, &v); err != nil || len(v.Payload) != bodies[v.Seq] {
				t.Fatalf("an event of %d bytes of JSON: %v, a payload of %d bytes", len(m), err, len(v.Payload))
			}
			return v.Seq
		})
		if got := fmt.Sprint(pageSizes(pages)); got != "[2 1 1 1]" {
			t.Fatalf("pages of %s events, want [2 1 1 1]: the large one alone", got)
		}
		if pages[2].size <= server.MaxPageBytes {
			t.Fatalf("the page of the large event is %d bytes, want it over the budget, alone", pages[2].size)
		}
	})
}

// TestAuditPagesAreBoundedByBytes: GET /v1/audit stops a page at
// server.MaxPageBytes of JSON: 50 entries of 64 KiB of data that is not
// JSON (base64: 87 KiB each, 4.3 MiB in all) do not fit one page of
// limit 1000; paging by next lists each once, in order, and ends.
func TestAuditPagesAreBoundedByBytes(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		keys := auditRing(t, false)
		h := server.New(db, server.Options{AuditKeys: keys}).Handler()
		log, err := audit.New(db, keys)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var want []int64
		for i := range 50 {
			rec, err := log.Append(ctx, db, "big", audit.Entry{Actor: "a", Action: "put", Data: bytes.Repeat([]byte{0xf0 + byte(i%8)}, audit.MaxDataLen)})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, rec.Seq)
		}
		pages := pageThrough(t, h, "/v1/audit?scope=big", "entries", 4)
		checkRoutePages(t, pages, want, func(m json.RawMessage) int64 {
			var v struct {
				Seq  int64  `json:"seq"`
				Data []byte `json:"data_base64"`
			}
			if err := json.Unmarshal(m, &v); err != nil || len(v.Data) != audit.MaxDataLen {
				t.Fatalf("an entry of %d bytes of JSON: %v, data of %d bytes", len(m), err, len(v.Data))
			}
			return v.Seq
		})
		if len(pages) != 2 {
			t.Fatalf("pages of %v entries, want two", pageSizes(pages))
		}
	})
}

// TestInboxMaxBodyAboveItsCapIsRefused: server.New with an InboxMaxBody
// over server.MaxInboxBody serves no inbox: a signed delivery and a
// listing are 500 and nothing is stored; at exactly MaxInboxBody a
// delivery is received and listed.
func TestInboxMaxBodyAboveItsCapIsRefused(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		auth := []string{"Authorization", "Bearer tok"}
		for _, c := range []struct {
			max  int64
			post int
			list int
		}{{server.MaxInboxBody + 1, 500, 500}, {server.MaxInboxBody, 204, 200}} {
			h := server.New(db, server.Options{Token: "tok", InboxMaxBody: c.max, InboxSecrets: map[string][]string{"stripe": {secret}}}).Handler()
			id := fmt.Sprintf("evt_%d", c.max)
			if code, body, _ := do(t, h, "POST", "/v1/inbox/stripe", `{}`, webhook(t, secret, id, time.Now(), `{}`)...); code != c.post {
				t.Errorf("InboxMaxBody %d: a delivery answered %d %v, want %d", c.max, code, body, c.post)
			}
			if code, body, _ := do(t, h, "GET", "/v1/inbox/stripe", "", auth...); code != c.list {
				t.Errorf("InboxMaxBody %d: the listing answered %d %v, want %d", c.max, code, body, c.list)
			}
		}
		in, err := inbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := in.List(context.Background(), "stripe", 0, 10)
		if err != nil || len(evs) != 1 || evs[0].ID != fmt.Sprintf("evt_%d", server.MaxInboxBody) {
			t.Fatalf("stored: %+v, %v; want the one delivery taken at the cap", evs, err)
		}
	})
}

// TestDeadLetterPagesReadInChunks: GET /v1/outbox/dead reads its rows a
// few at a time (so that it holds few payloads beside the page), yet a
// page of small dead letters holds limit of them, across the reads, in id
// order, next the last; the page after it holds the rest and the one after
// that none; a limit out of range is refused whole (400), not read as
// chunks of a valid size.
func TestDeadLetterPagesReadInChunks(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s, o := outboxServer(t, db)
		ctx := context.Background()
		var ids []int64
		for i := range 40 {
			id, err := o.Enqueue(ctx, o.DB(), outbox.Message{Topic: "mail", Key: "k", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		ds, err := o.Claim(ctx, "w", 40, time.Minute, "mail")
		if err != nil || len(ds) != 40 {
			t.Fatalf("claim: %d, %v", len(ds), err)
		}
		for _, d := range ds {
			if _, err := o.Fail(ctx, d, outbox.Permanent(fmt.Errorf("gone"))); err != nil {
				t.Fatal(err)
			}
		}
		get := func(query string) (int, []int64, string) {
			t.Helper()
			req := httptest.NewRequest("GET", "/v1/outbox/dead?"+query, nil)
			req.Header.Set("Authorization", "Bearer tok")
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			var out struct {
				Messages []struct {
					ID int64 `json:"id"`
				} `json:"messages"`
				Next string `json:"next"`
			}
			if rec.Code == http.StatusOK {
				if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
					t.Fatal(err)
				}
			}
			var got []int64
			for _, m := range out.Messages {
				got = append(got, m.ID)
			}
			return rec.Code, got, out.Next
		}
		code, got, next := get("limit=30")
		if code != 200 || !slices.Equal(got, ids[:30]) || next != strconv.FormatInt(ids[29], 10) {
			t.Fatalf("first page: %d %v next %s; want the first 30 ids, next the 30th", code, got, next)
		}
		code, got, next = get("limit=30&after=" + next)
		if code != 200 || !slices.Equal(got, ids[30:]) || next != strconv.FormatInt(ids[39], 10) {
			t.Fatalf("second page: %d %v next %s; want the last 10 ids", code, got, next)
		}
		if code, got, last := get("limit=30&after=" + next); code != 200 || len(got) != 0 || last != next {
			t.Fatalf("third page: %d %v next %s; want none, next unchanged", code, got, last)
		}
		for _, q := range []string{"limit=0", "limit=1001", "limit=-16"} {
			if code, _, _ := get(q); code != http.StatusBadRequest {
				t.Fatalf("%s: %d, want 400", q, code)
			}
		}
	})
}

// outboxServer is a server with the bearer token "tok" and its outbox.
func outboxServer(t *testing.T, db *racefree.DB) (*server.Server, *outbox.Outbox) {
	t.Helper()
	s := server.New(db, server.Options{Token: "tok"})
	o, err := s.Outbox()
	if err != nil {
		t.Fatal(err)
	}
	return s, o
}
