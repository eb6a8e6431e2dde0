package server_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/seq"
	"github.com/racefree/racefree/server"
)

// TestSequencesOverHTTP: POST /v1/sequences/{scope}/{name}/next hands out
// first..last, counters are apart, bad input is 400 and consumes nothing,
// an exhausted counter is 409 sequence-exhausted.
func TestSequencesOverHTTP(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		for _, step := range []struct {
			path, body  string
			first, last float64
		}{
			{"/v1/sequences/acme/invoice/next", `{}`, 1, 1},
			{"/v1/sequences/acme/invoice/next", `{"n":3}`, 2, 4},
			{"/v1/sequences/acme/ticket/next", `{"n":1}`, 1, 1},
			{"/v1/sequences/globex/invoice/next", `{"n":2}`, 1, 2},
		} {
			code, body, _ := do(t, h, "POST", step.path, step.body)
			if code != 200 || body["first"] != step.first || body["last"] != step.last {
				t.Fatalf("%s %s: %d %v; want first %v last %v", step.path, step.body, code, body, step.first, step.last)
			}
		}
		for _, bad := range []struct{ path, body string }{
			{"/v1/sequences/acme/invoice/next", `{"n":0}`},
			{"/v1/sequences/acme/invoice/next", `{"n":1000001}`},
			{"/v1/sequences/acme/invoice/next", `{"n":"1"}`},
			{"/v1/sequences/acme/invoice/next", `{"count":1}`},
			{"/v1/sequences/acme/invoice/next", ``},
			{"/v1/sequences/acme/in%00voice/next", `{}`},
			{"/v1/sequences/" + strings.Repeat("s", seq.MaxScopeBytes+1) + "/invoice/next", `{}`},
		} {
			if code, body, _ := do(t, h, "POST", bad.path, bad.body); code != 400 || body["type"] != "urn:racefree:problem:invalid-input" {
				t.Fatalf("%s %q: %d %v; want 400 invalid-input", bad.path, bad.body, code, body)
			}
		}
		if code, body, _ := do(t, h, "POST", "/v1/sequences/acme/invoice/next", `{}`); code != 200 || body["first"] != float64(5) {
			t.Fatalf("after the bad requests: %d %v; want first 5", code, body)
		}
		if _, err := db.ExecContext(context.Background(), `UPDATE racefree_sequences SET last = 9223372036854775807 WHERE name = 'ticket'`); err != nil {
			t.Fatal(err)
		}
		if code, body, _ := do(t, h, "POST", "/v1/sequences/acme/ticket/next", `{}`); code != 409 || body["type"] != "urn:racefree:problem:sequence-exhausted" {
			t.Fatalf("exhausted: %d %v; want 409 sequence-exhausted", code, body)
		}
	})
}

// TestSequenceRetryGetsTheSameNumbers: a request retried with its
// Idempotency-Key gets the numbers of the first answer back (replayed),
// and consumes none; 16 concurrent clients, each retrying its request,
// end with numbers exactly 1..N.
func TestSequenceRetryGetsTheSameNumbers(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{MaxOpenConns: 16, TxAttempts: 100}, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		_, first, _ := do(t, h, "POST", "/v1/sequences/acme/invoice/next", `{"n":2}`, "Idempotency-Key", `"inv-1"`)
		code, again, hdr := do(t, h, "POST", "/v1/sequences/acme/invoice/next", `{"n":2}`, "Idempotency-Key", `"inv-1"`)
		if code != 200 || hdr.Get("Idempotent-Replayed") != "true" || again["first"] != first["first"] || again["last"] != first["last"] || first["first"] != float64(1) {
			t.Fatalf("retry: %d %v (replayed %q); first answer %v", code, again, hdr.Get("Idempotent-Replayed"), first)
		}
		if code, body, _ := do(t, h, "POST", "/v1/sequences/acme/invoice/next", `{"n":3}`, "Idempotency-Key", `"inv-1"`); code != 422 {
			t.Fatalf("same key, another n: %d %v; want 422", code, body)
		}
		var (
			mu  sync.Mutex
			got []float64
			wg  sync.WaitGroup
		)
		for c := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf(`"client-%d"`, c)
				var answers []map[string]any
				for range 3 {
					code, body, _ := do(t, h, "POST", "/v1/sequences/acme/invoice/next", `{"n":1}`, "Idempotency-Key", key)
					switch {
					case code == 200:
						answers = append(answers, body)
					case code == 409 && body["type"] == "urn:racefree:problem:idempotency-in-progress":
					default:
						t.Errorf("client %d: %d %v", c, code, body)
						return
					}
				}
				for _, a := range answers[1:] {
					if a["first"] != answers[0]["first"] {
						t.Errorf("client %d: the retry got %v, the first answer %v", c, a["first"], answers[0]["first"])
					}
				}
				mu.Lock()
				got = append(got, answers[0]["first"].(float64))
				mu.Unlock()
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		sort.Float64s(got)
		for i, n := range got {
			if n != float64(i+3) {
				t.Fatalf("numbers %v; want 3..18, each once", got)
			}
		}
		cur, err := seq.New(db).Current(context.Background(), db, "acme", "invoice")
		if err != nil || cur != 18 {
			t.Fatalf("Current = %d, %v; want 18: a retry consumed a number", cur, err)
		}
	})
}
