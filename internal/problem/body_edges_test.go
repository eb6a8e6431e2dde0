package problem_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/racefree/racefree/internal/problem"
)

// TestEdgesTheBodyKeepsItsStandardMembers marshals problems whose
// extension members are named like the standard ones, with and without a
// detail, and one of a name not registered: the standard members are
// always the problem's own, a detail appears only when there is one, and
// an unregistered name keeps the status and title its caller gave.
func TestEdgesTheBodyKeepsItsStandardMembers(t *testing.T) {
	t.Parallel()
	body := func(p problem.Problem) map[string]any {
		t.Helper()
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	p := problem.Held.New("")
	p.Extra = map[string]any{"type": "urn:other", "title": "Other", "status": 200, "holder": "w1"}
	m := body(p)
	if m["type"] != problem.Held.Type() || m["title"] != problem.Held.Title || m["status"] != float64(http.StatusConflict) {
		t.Errorf("extensions named like the standard members: body %v, want held's type, title and 409", m)
	}
	if m["holder"] != "w1" {
		t.Errorf("the extension member holder: %v, want w1", m["holder"])
	}
	if _, ok := m["detail"]; ok {
		t.Errorf("a problem without a detail: body %v, want no detail member", m)
	}
	if got := body(problem.Held.New("key k is held"))["detail"]; got != "key k is held" {
		t.Errorf("Kind.New's detail: %v, want it in the body", got)
	}
	q := problem.New(http.StatusTeapot, "teapot", "I'm a teapot", "short and stout")
	if q.Status != http.StatusTeapot || q.Title != "I'm a teapot" || q.Type != "urn:racefree:problem:teapot" || q.Detail != "short and stout" {
		t.Errorf("New of a name not registered: %+v, want the caller's status, title and detail", q)
	}
}

// TestEdgesWriteLeavesTheCallersProblemAlone writes one problem value
// for two requests of different ids: each body carries its own request's
// id, the caller's extension map is left as it was, and every answer
// forbids caches to keep it.
func TestEdgesWriteLeavesTheCallersProblemAlone(t *testing.T) {
	t.Parallel()
	p := problem.NotHeld.New("d")
	p.Extra = map[string]any{"holder": "w1"}
	for _, id := range []string{"req-a", "req-b"} {
		rec := httptest.NewRecorder()
		rec.Header().Set(problem.RequestIDHeader, id)
		problem.Write(rec, p)
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if m["request_id"] != id || m["holder"] != "w1" {
			t.Errorf("request %s: body %v, want its own request_id and the holder", id, m)
		}
		if got := rec.Header().Get("Cache-Control"); got != "no-store" {
			t.Errorf("request %s: Cache-Control %q, want no-store", id, got)
		}
	}
	if len(p.Extra) != 1 || p.Extra["holder"] != "w1" {
		t.Errorf("the caller's Extra after two writes: %v, want only holder", p.Extra)
	}
}
