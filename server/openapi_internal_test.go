package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/problem"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestOpenAPIDescribesEveryRouteAndProblem walks the router and the
// document both ways: every registered route is described (or listed in
// outsideAPI), every described operation reaches a handler of the router,
// the problem an empty request gets from the real handler is among those
// its operation lists, and every problem kind has its description.
func TestOpenAPIDescribesEveryRouteAndProblem(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	s := New(db, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	h := s.Handler()

	// Router → document.
	for _, p := range s.patterns {
		if _, ok := apiRoutes[p]; !ok && !slices.Contains(outsideAPI, p) {
			t.Errorf("route %q is registered but neither described in apiRoutes nor listed in outsideAPI", p)
		}
	}
	for _, p := range outsideAPI {
		if !slices.Contains(s.patterns, p) {
			t.Errorf("outsideAPI lists %q, which is not a route", p)
		}
	}

	// The document, as served.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/openapi.json", nil))
	var doc struct {
		OpenAPI  string                                `json:"openapi"`
		Paths    map[string]map[string]json.RawMessage `json:"paths"`
		Problems []struct {
			Type string `json:"type"`
			When string `json:"when"`
		} `json:"x-problems"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); rec.Code != 200 || err != nil || doc.OpenAPI != "3.1.0" {
		t.Fatalf("GET /openapi.json: %d, %v, openapi %q", rec.Code, err, doc.OpenAPI)
	}

	// Document → router, and the real handlers' problems → the document.
	operations := 0
	for path, item := range doc.Paths {
		for method, raw := range item {
			operations++
			pattern := strings.ToUpper(method) + " " + path
			if !slices.Contains(s.patterns, pattern) {
				t.Errorf("%s is described but not registered", pattern)
			}
			var op struct {
				Responses map[string]struct {
					Problems []string `json:"x-problems"`
				} `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			target := path
			for _, name := range pathParams(path) {
				target = strings.Replace(target, "{"+name+"}", "x", 1)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(strings.ToUpper(method), target, strings.NewReader("")))
			if rec.Code < 400 {
				continue
			}
			var got struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &got)
			name := strings.TrimPrefix(got.Type, "urn:racefree:problem:")
			if name == problem.NoRoute.Name || name == problem.MethodNotAllowed.Name {
				t.Errorf("%s %s (described) reached no handler: %s", method, target, got.Type)
				continue
			}
			if !slices.Contains(op.Responses[strconv.Itoa(rec.Code)].Problems, name) {
				t.Errorf("%s %s answered %d %s, which its description does not list", method, target, rec.Code, name)
			}
		}
	}
	if operations != len(s.patterns)-len(outsideAPI) {
		t.Errorf("the document has %d operations, the router %d routes outside outsideAPI", operations, len(s.patterns)-len(outsideAPI))
	}

	// Every problem kind is described, and every description is a kind.
	for _, k := range problem.Kinds() {
		if problemDocs[k.Name] == "" {
			t.Errorf("problem %q has no description in problemDocs", k.Name)
		}
	}
	for name := range problemDocs {
		if _, ok := problem.Lookup(name); !ok {
			t.Errorf("problemDocs describes %q, which is not a problem kind", name)
		}
	}
	if len(doc.Problems) != len(problem.Kinds()) {
		t.Errorf("x-problems lists %d kinds, want %d", len(doc.Problems), len(problem.Kinds()))
	}
}
