package server_test

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

var auditMAC = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{5}, 32))

func auditRing(t *testing.T, sign bool) *audit.Keyring {
	t.Helper()
	text := "mac m1 " + auditMAC + "\n"
	if sign {
		text += "sign s1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{6}, 32)) + "\n"
	}
	k, err := audit.ParseKeyring(text)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestAuditRoutes: append (idempotent with a key), list with its cursor,
// verify, checkpoint and the latest checkpoint, over HTTP.
func TestAuditRoutes(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{AuditKeys: auditRing(t, true)}).Handler()
		entry := `{"scope":"acme","actor":"alice","action":"limit.raise","subject":"account/7","data":{"to":500}}`
		code, body, _ := do(t, h, "POST", "/v1/audit", entry, "Idempotency-Key", `"k1"`)
		if code != 200 || body["seq"] != float64(1) || body["data"].(map[string]any)["to"] != float64(500) || body["key_id"] != "m1" || body["mac"] == "" {
			t.Fatalf("append: %d %v", code, body)
		}
		code, again, hdr := do(t, h, "POST", "/v1/audit", entry, "Idempotency-Key", `"k1"`)
		if code != 200 || again["seq"] != float64(1) || again["mac"] != body["mac"] || hdr.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d %v %v", code, again, hdr)
		}
		if code, body, _ := do(t, h, "POST", "/v1/audit", `{"scope":"acme","actor":"bob","action":"login"}`); code != 200 || body["seq"] != float64(2) {
			t.Fatalf("second append: %d %v", code, body)
		}
		for _, bad := range []string{`{"scope":"","actor":"a","action":"b"}`, `{"scope":"acme","actor":"a"}`, `{"scope":"acme","actor":"a","action":"b","extra":1}`,
			`{"scope":"acme","actor":"a\u0000","action":"b"}`, `{"scope":"acme","actor":"a","action":"racefree.audit.key_rotated"}`} {
			if code, body, _ := do(t, h, "POST", "/v1/audit", bad); code != 400 || body["type"] != server.ProblemType("invalid-input") {
				t.Errorf("%s: %d %v, want 400 invalid-input", bad, code, body)
			}
		}
		code, body, _ = do(t, h, "GET", "/v1/audit?scope=acme&limit=1", "")
		entries, _ := body["entries"].([]any)
		if code != 200 || len(entries) != 1 || body["next"] != "1" || entries[0].(map[string]any)["actor"] != "alice" {
			t.Fatalf("first page: %d %v", code, body)
		}
		code, body, _ = do(t, h, "GET", "/v1/audit?scope=acme&after=1", "")
		entries, _ = body["entries"].([]any)
		if code != 200 || len(entries) != 1 || body["next"] != "2" || entries[0].(map[string]any)["prev_mac"] == "" {
			t.Fatalf("second page: %d %v", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/audit?scope=acme&limit=0", ""); code != 400 {
			t.Fatalf("limit 0: %d %v", code, body)
		}
		if code, body, _ := do(t, h, "GET", "/v1/audit/checkpoints/latest?scope=acme", ""); code != 404 {
			t.Fatalf("latest before any checkpoint: %d %v", code, body)
		}
		code, cp, _ := do(t, h, "POST", "/v1/audit/checkpoints", `{"scope":"acme"}`)
		if code != 200 || cp["n"] != float64(1) || cp["seq"] != float64(2) || cp["key_id"] != "s1" {
			t.Fatalf("checkpoint: %d %v", code, cp)
		}
		if code, latest, _ := do(t, h, "GET", "/v1/audit/checkpoints/latest?scope=acme", ""); code != 200 || latest["sig"] != cp["sig"] {
			t.Fatalf("latest: %d %v", code, latest)
		}
		code, body, _ = do(t, h, "GET", "/v1/audit/verify?scope=acme", "")
		if code != 200 || body["intact"] != true || body["rows"] != float64(2) || body["anchored"] != true {
			t.Fatalf("verify: %d %v", code, body)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		metrics, _ := io.ReadAll(rec.Body)
		for _, want := range []string{`racefree_audit_operations_total{op="append",outcome="ok"} 2`, `racefree_audit_operations_total{op="append",outcome="invalid"} 4`,
			`racefree_audit_operations_total{op="verify",outcome="intact"} 1`} {
			if !strings.Contains(string(metrics), want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

// TestAuditRoutesUnconfigured: without a keyring the audit routes answer
// 404 audit-unconfigured; without a sign key, checkpoints answer 500
// audit-key-missing naming no key material.
func TestAuditRoutesUnconfigured(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		for _, r := range [][2]string{{"POST", "/v1/audit"}, {"GET", "/v1/audit?scope=a"}, {"GET", "/v1/audit/verify?scope=a"},
			{"POST", "/v1/audit/checkpoints"}, {"GET", "/v1/audit/checkpoints/latest?scope=a"}} {
			if code, body, _ := do(t, h, r[0], r[1], `{"scope":"a","actor":"b","action":"c"}`); code != 404 || body["type"] != server.ProblemType("audit-unconfigured") {
				t.Errorf("%s %s: %d %v", r[0], r[1], code, body)
			}
		}
		h = server.New(db, server.Options{AuditKeys: auditRing(t, false)}).Handler()
		if code, body, _ := do(t, h, "POST", "/v1/audit", `{"scope":"a","actor":"b","action":"c"}`); code != 200 {
			t.Fatalf("append: %d %v", code, body)
		}
		code, body, _ := do(t, h, "POST", "/v1/audit/checkpoints", `{"scope":"a"}`)
		if code != 500 || body["type"] != server.ProblemType("audit-key-missing") || strings.Contains(body["detail"].(string), auditMAC) {
			t.Fatalf("checkpoint without a sign key: %d %v", code, body)
		}
	})
}
