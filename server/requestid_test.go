package server_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestRequestIDIsEchoedAndLogged checks the request id: a valid incoming
// X-Request-Id is kept, anything else is replaced by a new one; it is
// answered in the header, in problem bodies (request_id, also for routes
// and methods that do not exist and for refused credentials) and in the
// access log line of the request.
func TestRequestIDIsEchoedAndLogged(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	var logs bytes.Buffer
	h := server.New(db, server.Options{Token: "tok", Logger: slog.New(slog.NewJSONHandler(&logs, nil))}).Handler()
	for _, c := range []struct {
		method, path, id string
		header           []string
		keep             bool
	}{
		{"GET", "/v1/claims/none", "trace-1", []string{"Authorization", "Bearer tok"}, true},
		{"GET", "/v1/claims/none", "", []string{"Authorization", "Bearer tok"}, false},
		{"GET", "/v1/claims/none", "bad id with spaces", []string{"Authorization", "Bearer tok"}, false},
		{"GET", "/v1/claims/none", strings.Repeat("x", 129), []string{"Authorization", "Bearer tok"}, false},
		{"GET", "/v1/claims/none", strings.Repeat("y", 128), []string{"Authorization", "Bearer tok"}, true}, // at the bound
		{"GET", "/v1/nothing", "trace-2", nil, true},
		{"PUT", "/healthz", "trace-3", nil, true},
		{"GET", "/v1/claims/none", "trace-4", nil, true},
	} {
		header := c.header
		if c.id != "" {
			header = append(header, "X-Request-Id", c.id)
		}
		code, body, got := do(t, h, c.method, c.path, "", header...)
		id := got.Get("X-Request-Id")
		switch {
		case code < 400:
			t.Fatalf("%s %s: %d, want a problem", c.method, c.path, code)
		case c.keep && id != c.id, !c.keep && (id == "" || id == c.id):
			t.Errorf("%s %s with X-Request-Id %q: answered %q", c.method, c.path, c.id, id)
		case body["request_id"] != id:
			t.Errorf("%s %s: request_id %v in the body, %q in the header", c.method, c.path, body["request_id"], id)
		}
		if !c.keep {
			continue
		}
		found := false
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "request" && rec["request_id"] == c.id && rec["status"] == float64(code) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s %s: no access-log line with request_id %q and status %d:\n%s", c.method, c.path, c.id, code, logs.String())
		}
	}
}

// TestEdgesRequestIDAtItsCharactersAndRepeats tries the ids at the edges
// of what the server keeps: ! and ~, the first and last visible ASCII
// characters, are kept; DEL, past them, is replaced; two X-Request-Id
// headers are ambiguous and replaced by one of the server's own; and the
// ids the server makes up differ from request to request.
func TestEdgesRequestIDAtItsCharactersAndRepeats(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	h := server.New(db, server.Options{}).Handler()
	get := func(ids ...string) string {
		t.Helper()
		req := httptest.NewRequest("GET", "/v1/nothing", nil)
		for _, id := range ids {
			req.Header.Add("X-Request-Id", id)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Result().Header.Get("X-Request-Id")
	}
	for _, id := range []string{"!", "~", "!trace~", "a!b~c"} {
		if got := get(id); got != id {
			t.Errorf("X-Request-Id %q: answered %q, want it kept", id, got)
		}
	}
	for _, id := range []string{"trace\x7f", "\x7f", "trace\x20id"} {
		if got := get(id); got == id || got == "" {
			t.Errorf("X-Request-Id %q: answered %q, want one of the server's own", id, got)
		}
	}
	if got := get("trace-a", "trace-b"); got == "trace-a" || got == "trace-b" || got == "" {
		t.Errorf("two X-Request-Id headers: answered %q, want one of the server's own", got)
	}
	own := map[string]bool{}
	for range 3 {
		id := get()
		if len(id) != 24 || own[id] {
			t.Errorf("the server's own id %q: want 24 hex digits, new each time (so far %v)", id, own)
		}
		own[id] = true
	}
}
