package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

var refreshSecret = []byte("0123456789abcdef0123456789abcdef")

func TestTokensOverHTTP(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		code, body, hdr := do(t, h, "POST", "/v1/tokens", `{"purpose":"password-reset","subject":"user-42","ttl_ms":900000}`)
		if code != 200 || len(body["token"].(string)) != 43 || body["kind"] != "code" || hdr.Get("Cache-Control") != "no-store" {
			t.Fatalf("issue: %d %v %v", code, body, hdr)
		}
		consume := fmt.Sprintf(`{"purpose":"password-reset","token":%q}`, body["token"])
		code, body, _ = do(t, h, "POST", "/v1/tokens/consume", consume)
		if code != 200 || body["outcome"] != "consumed" || body["subject"] != "user-42" {
			t.Fatalf("consume: %d %v", code, body)
		}
		code, body, _ = do(t, h, "POST", "/v1/tokens/consume", consume)
		if code != 409 || body["type"] != "urn:racefree:problem:token-used" || body["outcome"] != "already_used" {
			t.Fatalf("consume again: %d %v", code, body)
		}
		code, body, _ = do(t, h, "POST", "/v1/tokens/consume", `{"purpose":"password-reset","token":"nope"}`)
		if code != 404 || body["type"] != "urn:racefree:problem:token-unknown" {
			t.Fatalf("unknown: %d %v", code, body)
		}

		// Refresh: rotate, then reuse the first token: the family is revoked,
		// and the revocation commits although the answer is a 409.
		code, body, _ = do(t, h, "POST", "/v1/tokens", `{"kind":"refresh","subject":"user-42","ttl_ms":86400000}`)
		if code != 200 || body["generation"] != 1.0 {
			t.Fatalf("issue refresh: %d %v", code, body)
		}
		first := body["token"].(string)
		code, body, hdr = do(t, h, "POST", "/v1/tokens/rotate", fmt.Sprintf(`{"token":%q}`, first))
		if code != 200 || body["outcome"] != "rotated" || body["generation"] != 2.0 || body["token"] == first || hdr.Get("Cache-Control") != "no-store" {
			t.Fatalf("rotate: %d %v", code, body)
		}
		second := body["token"].(string)
		code, body, _ = do(t, h, "POST", "/v1/tokens/rotate", fmt.Sprintf(`{"token":%q}`, first))
		if code != 409 || body["type"] != "urn:racefree:problem:token-reused" {
			t.Fatalf("reuse: %d %v", code, body)
		}
		code, body, _ = do(t, h, "POST", "/v1/tokens/rotate", fmt.Sprintf(`{"token":%q}`, second))
		if code != 409 || body["type"] != "urn:racefree:problem:token-revoked" {
			t.Fatalf("successor after reuse: %d %v", code, body)
		}
		if m := scrape(t, h); !strings.Contains(m, `racefree_token_operations_total{op="rotate",outcome="reused"} 1`+"\n") {
			t.Errorf("the reuse is not counted")
		}
	})
}

func TestTokenRoutesThatAnswerATokenRefuseIdempotencyKeys(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		code, body, _ := do(t, h, "POST", "/v1/tokens", `{"purpose":"p","subject":"s","ttl_ms":60000}`, "Idempotency-Key", `"k1"`)
		if code != 400 || body["type"] != "urn:racefree:problem:invalid-input" {
			t.Fatalf("issue with a key: %d %v", code, body)
		}
		code, body, _ = do(t, h, "POST", "/v1/tokens/rotate", `{"token":"t"}`, "Idempotency-Key", `"k2"`)
		if code != 400 {
			t.Fatalf("rotate with a key: %d %v", code, body)
		}
		// Consume's answer holds no token: a retry with the key replays it.
		_, issued, _ := do(t, h, "POST", "/v1/tokens", `{"purpose":"p","subject":"s","ttl_ms":60000}`)
		consume := fmt.Sprintf(`{"purpose":"p","token":%q}`, issued["token"])
		for i, want := range []string{"", "true"} {
			code, body, hdr := do(t, h, "POST", "/v1/tokens/consume", consume, "Idempotency-Key", `"k3"`)
			if code != 200 || body["outcome"] != "consumed" || hdr.Get("Idempotent-Replayed") != want {
				t.Fatalf("consume %d with a key: %d %v %v", i, code, body, hdr)
			}
		}
		// A refusal is an outcome: stored and replayed too.
		for i, want := range []string{"", "true"} {
			code, body, hdr := do(t, h, "POST", "/v1/tokens/consume", consume, "Idempotency-Key", `"k4"`)
			if code != 409 || body["type"] != "urn:racefree:problem:token-used" || hdr.Get("Idempotent-Replayed") != want {
				t.Fatalf("refused consume %d with a key: %d %v %v", i, code, body, hdr)
			}
		}
		for table, want := range map[string]int{"racefree_onetime_codes": 1, "racefree_idempotency": 2} {
			var n int
			if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != want {
				t.Fatalf("%s: %d rows, %v; want %d", table, n, err, want)
			}
		}
	})
}

func TestOneWinnerAmongConcurrentHTTPRedemptions(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		_, issued, _ := do(t, h, "POST", "/v1/tokens", `{"purpose":"login","subject":"s","ttl_ms":60000}`)
		consume := fmt.Sprintf(`{"purpose":"login","token":%q}`, issued["token"])
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			codes = map[int]int{}
		)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, _, _ := do(t, h, "POST", "/v1/tokens/consume", consume)
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		if codes[http.StatusOK] != 1 || codes[http.StatusConflict] != 63 {
			t.Fatalf("statuses %v, want one 200 and 63 409", codes)
		}
	})
}

func TestRotationRetriedInTheGraceWindowOverHTTP(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{RefreshGrace: time.Minute, RefreshSecret: refreshSecret}).Handler()
		_, issued, _ := do(t, h, "POST", "/v1/tokens", `{"kind":"refresh","subject":"s","ttl_ms":60000}`)
		rotate := fmt.Sprintf(`{"token":%q}`, issued["token"])
		_, first, _ := do(t, h, "POST", "/v1/tokens/rotate", rotate)
		code, retry, _ := do(t, h, "POST", "/v1/tokens/rotate", rotate)
		if code != 200 || retry["outcome"] != "replayed" || retry["token"] != first["token"] {
			t.Fatalf("retry: %d %v, want the successor %v", code, retry, first["token"])
		}
		if code, body, _ := do(t, h, "POST", "/v1/tokens", `{"kind":"refresh","subject":"s","ttl_ms":60000}`); code != 200 {
			t.Fatalf("issue: %d %v", code, body)
		}
		// A grace window without a secret is a configuration error.
		h = server.New(db, server.Options{RefreshGrace: time.Minute}).Handler()
		if code, body, _ := do(t, h, "POST", "/v1/tokens/rotate", rotate); code != 500 {
			t.Fatalf("grace without a secret: %d %v", code, body)
		}
	})
}

func TestTokenBadInputIs400AndChangesNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		for _, c := range []struct{ path, body string }{
			{"/v1/tokens", `{"purpose":"p","subject":"s"}`},
			{"/v1/tokens", `{"purpose":"p","subject":"s","ttl_ms":0}`},
			{"/v1/tokens", `{"purpose":"","subject":"s","ttl_ms":1000}`},
			{"/v1/tokens", `{"purpose":"p","subject":"s\u0000","ttl_ms":1000}`},
			{"/v1/tokens", `{"kind":"other","subject":"s","ttl_ms":1000}`},
			{"/v1/tokens", `{"kind":"refresh","purpose":"p","subject":"s","ttl_ms":1000}`},
			{"/v1/tokens", `{"purpose":"p","subject":"s","ttl_ms":1000,"token":"mine"}`},
			{"/v1/tokens/consume", `{"purpose":"p","token":""}`},
			{"/v1/tokens/rotate", `{"token":"a\u0000b"}`},
		} {
			if code, body, _ := do(t, h, "POST", c.path, c.body); code != 400 || body["type"] != "urn:racefree:problem:invalid-input" {
				t.Errorf("%s %s: %d %v, want 400", c.path, c.body, code, body)
			}
		}
		for _, table := range []string{"racefree_onetime_codes", "racefree_refresh_families"} {
			var n int
			if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != 0 {
				t.Errorf("%s: %d rows after bad input, %v", table, n, err)
			}
		}
	})
}
