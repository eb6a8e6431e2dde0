package uniquecheck

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Mask returns a stable stand-in for a key value, "sha256:<12 hex digits>
// len=<bytes>": the same value always masks the same way, so groups can be
// compared across runs without printing personal data. It is
// pseudonymisation, not encryption: a guessable value can be confirmed.
func Mask(v string) string {
	sum := sha256.Sum256([]byte(v))
	return fmt.Sprintf("sha256:%s len=%d", hex.EncodeToString(sum[:6]), len(v))
}

// Masked returns a copy of r whose key values are replaced by Mask.
func (r *Report) Masked() *Report {
	out := *r
	out.Groups = make([]Group, len(r.Groups))
	for i, g := range r.Groups {
		g.Values = append([]*string(nil), g.Values...)
		for j, v := range g.Values {
			if v != nil {
				m := Mask(*v)
				g.Values[j] = &m
			}
		}
		out.Groups[i] = g
	}
	return &out
}

// WriteJSON writes each report as one JSON object per line (JSON Lines).
// The fields are those of Report; groups and warnings are never null.
func WriteJSON(w io.Writer, reps []*Report) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, r := range reps {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// WriteText writes each report as a heading, a table of its listed groups,
// and its warnings.
func WriteText(w io.Writer, reps []*Report) error {
	for i, r := range reps {
		if i > 0 {
			fmt.Fprintln(w)
		}
		head := r.Table + " (" + strings.Join(r.Keys, ", ") + ")"
		if r.NullsNotDistinct {
			head += " NULLS NOT DISTINCT"
		}
		if r.NotNull {
			head += " NOT NULL"
		}
		if r.Where != "" {
			head += " WHERE " + r.Where
		}
		if r.Source != "" {
			head = r.Source + ": " + head
		}
		fmt.Fprintln(w, head)
		if r.NullRows > 0 {
			fmt.Fprintf(w, "  %d rows with a NULL key: NOT NULL fails the migration on each; fill or remove them first\n", r.NullRows)
		}
		switch {
		case r.Builds():
			fmt.Fprintf(w, "  no duplicates: the unique index will build on the current data\n")
		case r.DuplicateGroups == 0:
			fmt.Fprintf(w, "  no duplicates\n")
		default:
			fmt.Fprintf(w, "  %d duplicate groups, %d surplus rows to remove before the unique index can build\n", r.DuplicateGroups, r.SurplusRows)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "  ROWS\tKEY\t%s\n", strings.ToUpper(strings.Join(r.PrimaryKey, ", ")))
			for _, g := range r.Groups {
				vals := make([]string, len(g.Values))
				for j, v := range g.Values {
					vals[j] = "NULL"
					if v != nil {
						vals[j] = *v
					}
				}
				pks := make([]string, len(g.PrimaryKeys))
				for j, pk := range g.PrimaryKeys {
					pks[j] = string(pk)
				}
				more := ""
				if n := g.Count - int64(len(pks)); n > 0 {
					more = fmt.Sprintf(" … %d more (--max-keys)", n)
				}
				fmt.Fprintf(tw, "  %d\t%s\t%s%s\n", g.Count, strings.Join(vals, " | "), strings.Join(pks, " "), more)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if n := int64(len(r.Groups)); n < r.DuplicateGroups {
				fmt.Fprintf(w, "  … %d more groups (--limit)\n", r.DuplicateGroups-n)
			}
		}
		for _, warn := range r.Warnings {
			fmt.Fprintf(w, "  warning: %s\n", warn)
		}
	}
	return nil
}
