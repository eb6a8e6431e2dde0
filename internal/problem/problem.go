// Package problem writes RFC 9457 problem details documents, in the one
// shape every racefree HTTP handler answers errors with: a stable type
// urn:racefree:problem:<name>, a title, the status, an optional detail, and
// extension members.
package problem

import (
	"encoding/json"
	"net/http"
)

// Problem represents an RFC 9457 problem details document.
type Problem struct {
	Type   string // stable, e.g. "urn:racefree:problem:held"; see Type
	Title  string // short, the same for every instance of Type
	Status int    // the HTTP status
	Detail string // this occurrence; omitted when empty
	// Extra holds extension members, such as the live holder of a claim.
	Extra map[string]any
}

// Type returns the stable type URI for name.
func Type(name string) string { return "urn:racefree:problem:" + name }

// MarshalJSON writes the standard members followed by the extensions.
func (p Problem) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	for k, v := range p.Extra {
		m[k] = v
	}
	m["type"], m["title"], m["status"] = p.Type, p.Title, p.Status
	if p.Detail != "" {
		m["detail"] = p.Detail
	}
	return json.Marshal(m)
}

// Write answers with p as application/problem+json.
func Write(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// New returns the problem of type name.
func New(status int, name, title, detail string) Problem {
	return Problem{Type: Type(name), Title: title, Status: status, Detail: detail}
}
