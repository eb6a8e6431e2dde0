package rlscheck

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteJSON writes r as one JSON object and a newline. The fields are those
// of Report; the lists are never null.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteText writes r for a reader: one block per finding (kind and object,
// the problem, the fix), then a summary line.
func WriteText(w io.Writer, r *Report) error {
	for _, f := range r.Findings {
		if _, err := fmt.Fprintf(w, "%s %s\n  %s\n  fix: %s\n\n", f.Kind, f.Object, f.Problem, f.Fix); err != nil {
			return err
		}
	}
	for _, warn := range r.Warnings {
		if _, err := fmt.Fprintf(w, "warning: %s\n", warn); err != nil {
			return err
		}
	}
	scope := fmt.Sprintf("%d tenant tables (column %s) in %s, setting %s", len(r.Tables), r.TenantColumn, strings.Join(r.Schemas, ", "), r.Setting)
	if r.Role != "" {
		scope += ", role " + r.Role
	}
	var err error
	if len(r.Findings) == 0 {
		_, err = fmt.Fprintf(w, "no findings: %s\n", scope)
	} else {
		_, err = fmt.Fprintf(w, "%d findings: %s\n", len(r.Findings), scope)
	}
	return err
}
