package uniquecheck

import (
	"strings"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/ident"
)

// Name represents a table, optionally qualified by its schema, with each
// part as the engine stores it: unquoted parts of the input are already
// folded to lower case.
type Name struct {
	Schema string // empty for the search path (PostgreSQL) or main (SQLite)
	Table  string
}

// String returns n quoted, ready to splice into SQL.
func (n Name) String() string {
	q, err := n.Quoted()
	if err != nil {
		return "<invalid name>"
	}
	return q
}

// Quoted returns n as SQL, each part quoted by quoteIdent.
func (n Name) Quoted() (string, error) {
	t, err := quoteIdent(n.Table)
	if err != nil {
		return "", err
	}
	if n.Schema == "" {
		return t, nil
	}
	s, err := quoteIdent(n.Schema)
	if err != nil {
		return "", err
	}
	return s + "." + t, nil
}

// ParseName reads a table name written as in SQL: table, schema.table, or
// either part in double quotes ("Users", "my schema"."t"). Unquoted parts
// must be plain identifiers and are folded to lower case, as both engines
// do; quoted parts are kept exactly.
func ParseName(s string) (Name, error) {
	var parts []string
	rest := strings.TrimSpace(s)
	for {
		var part string
		if strings.HasPrefix(rest, `"`) {
			end := -1
			for i := 1; i < len(rest); i++ {
				if rest[i] == '"' {
					if i+1 < len(rest) && rest[i+1] == '"' {
						i++
						continue
					}
					end = i
					break
				}
			}
			if end < 0 {
				return Name{}, racefree.Invalid("table", "%q has an unterminated quote", s)
			}
			part = strings.ReplaceAll(rest[1:end], `""`, `"`)
			rest = rest[end+1:]
		} else {
			end := strings.IndexByte(rest, '.')
			if end < 0 {
				end = len(rest)
			}
			part = rest[:end]
			if !plainIdent(part) {
				return Name{}, racefree.Invalid("table", "%q: %q is not a plain identifier; quote it as in SQL", s, part)
			}
			part = strings.ToLower(part)
			rest = rest[end:]
		}
		if _, err := quoteIdent(part); err != nil {
			return Name{}, err
		}
		parts = append(parts, part)
		if rest == "" {
			break
		}
		if rest[0] != '.' {
			return Name{}, racefree.Invalid("table", "%q: expected . after %q", s, part)
		}
		rest = rest[1:]
	}
	switch len(parts) {
	case 1:
		return Name{Table: parts[0]}, nil
	case 2:
		return Name{Schema: parts[0], Table: parts[1]}, nil
	}
	return Name{}, racefree.Invalid("table", "%q: want table or schema.table", s)
}

// plainIdent reports whether s needs no quotes: a letter or underscore,
// then letters, digits, underscores or dollar signs.
func plainIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '$'):
		default:
			return false
		}
	}
	return true
}

// quoteIdent is the one function through which every identifier that comes
// from input reaches SQL: [ident.Quote], shared with rlscheck.
func quoteIdent(name string) (string, error) { return ident.Quote(name) }

// checkExpr rejects a key expression or predicate that could end the
// statement it is spliced into. Whether it is one valid expression is then
// decided by the engine, which prepares it inside the read-only transaction.
func checkExpr(field, expr string) error {
	switch {
	case strings.TrimSpace(expr) == "":
		return racefree.Invalid(field, "empty expression")
	case strings.Contains(expr, ";"):
		return racefree.Invalid(field, "%q contains ';': give one expression, not statements", expr)
	case strings.ContainsRune(expr, 0):
		return racefree.Invalid(field, "contains a NUL byte")
	case strings.Contains(expr, "/*"), strings.Contains(expr, "*/"):
		return racefree.Invalid(field, "%q contains a /* comment */", expr)
	}
	return nil
}
