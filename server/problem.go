package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/problem"
)

// Problem represents an RFC 9457 problem details document.
type Problem = problem.Problem

// ProblemType returns the stable type URI for name.
func ProblemType(name string) string { return problem.Type(name) }

func writeProblem(w http.ResponseWriter, p Problem) { problem.Write(w, p) }

func badRequest(w http.ResponseWriter, detail string) {
	writeProblem(w, Problem{Type: ProblemType("invalid-input"), Title: "Invalid input", Status: http.StatusBadRequest, Detail: detail})
}

// writeError turns an error from a primitive into a problem document.
// Errors the client can act on keep their message; anything else is a 500
// whose detail says nothing about internals.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ie *racefree.InputError
	if p, ok := heldProblem(err); ok {
		writeProblem(w, p)
		return
	}
	switch {
	case errors.As(err, &ie):
		badRequest(w, ie.Error())
	case errors.Is(err, racefree.ErrNotFound):
		writeProblem(w, Problem{Type: ProblemType("not-found"), Title: "Not found", Status: http.StatusNotFound})
	case errors.Is(err, racefree.ErrStaleFence):
		p := Problem{Type: ProblemType("stale-fence"), Title: "Stale fencing token", Status: http.StatusConflict, Detail: err.Error()}
		var sf *claim.StaleFenceError
		if errors.As(err, &sf) {
			p.Extra = map[string]any{"fence": sf.Fence, "current_fence": sf.Current}
		}
		writeProblem(w, p)
	case errors.Is(err, racefree.ErrNotHeld):
		writeProblem(w, Problem{Type: ProblemType("not-held"), Title: "Not held", Status: http.StatusConflict, Detail: err.Error()})
	case errors.Is(err, racefree.ErrSchemaOutdated), errors.Is(err, racefree.ErrSchemaTooNew):
		writeProblem(w, Problem{Type: ProblemType("schema"), Title: "Database schema mismatch", Status: http.StatusServiceUnavailable, Detail: err.Error()})
	default:
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeProblem(w, Problem{Type: ProblemType("internal"), Title: "Internal error", Status: http.StatusInternalServerError})
	}
}

// maxBody bounds every JSON request body.
const maxBody = 1 << 20

// decode reads a JSON body into v, rejecting unknown fields, trailing data
// and bodies over maxBody. On failure it has already written a 400.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.Decode(new(json.RawMessage)) != io.EOF {
		err = errors.New("trailing data after the JSON object")
	}
	if err != nil {
		badRequest(w, fmt.Sprintf("request body: %v", err))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
