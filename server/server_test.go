package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// do sends one request to h and returns the status and decoded JSON body.
func do(t *testing.T, h http.Handler, method, path, body string, header ...string) (int, map[string]any, http.Header) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	raw, _ := io.ReadAll(rec.Body)
	var out map[string]any
	if len(raw) > 0 && strings.Contains(rec.Header().Get("Content-Type"), "json") {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: body %q: %v", method, path, raw, err)
		}
	}
	return rec.Code, out, rec.Result().Header // the headers as sent, not as set after the response was written
}

func TestHealthReadyMetrics(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		if code, _, _ := do(t, h, "GET", "/healthz", ""); code != 200 {
			t.Fatalf("healthz: %d", code)
		}
		if code, body, _ := do(t, h, "GET", "/readyz", ""); code != 200 || body["engine"] != db.Engine() {
			t.Fatalf("readyz: %d %v", code, body)
		}
		req := httptest.NewRequest("GET", "/metrics", nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		for _, want := range []string{`racefree_http_requests_total{code="200",route="GET /readyz"} 1`, "racefree_http_request_duration_seconds_bucket", "go_sql_open_connections"} {
			if !strings.Contains(rec.Body.String(), want) {
				t.Errorf("metrics lack %q", want)
			}
		}
	})
}

func TestReadyzFailsOnOutdatedSchema(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		code, body, hdr := do(t, server.New(db, server.Options{}).Handler(), "GET", "/readyz", "")
		if code != 503 || hdr.Get("Content-Type") != "application/problem+json" || body["type"] != "urn:racefree:problem:not-ready" {
			t.Fatalf("readyz on an empty database: %d %v", code, body)
		}
	})
}

func TestUnknownRoutesAndMethodsAreProblems(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		code, body, hdr := do(t, h, "GET", "/v1/nowhere", "")
		if code != 404 || hdr.Get("Content-Type") != "application/problem+json" || body["type"] != "urn:racefree:problem:no-route" {
			t.Fatalf("unknown route: %d %v", code, body)
		}
		code, body, hdr = do(t, h, "DELETE", "/healthz", "")
		if code != 405 || hdr.Get("Allow") == "" || body["type"] != "urn:racefree:problem:method-not-allowed" {
			t.Fatalf("wrong method: %d %v %v", code, body, hdr)
		}
	})
}

func TestBearerTokenGuardsV1Only(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{Token: "s3cret"}).Handler()
		if code, _, _ := do(t, h, "GET", "/healthz", ""); code != 200 {
			t.Fatalf("healthz must stay open: %d", code)
		}
		code, body, hdr := do(t, h, "GET", "/v1/claims/k", "", "Authorization", "Bearer wrong")
		if code != 401 || hdr.Get("WWW-Authenticate") == "" || body["type"] != "urn:racefree:problem:unauthorized" {
			t.Fatalf("wrong token: %d %v", code, body)
		}
	})
}

func TestReapRunsOnAFreshDatabase(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		events, records, err := server.New(db, server.Options{}).Reap(t.Context())
		if err != nil || events != 0 || records != 0 {
			t.Fatalf("reap: %d, %d, %v", events, records, err)
		}
	})
}
