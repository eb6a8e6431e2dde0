package rlscheck

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/racefree/racefree/internal/pgparse"
)

// follower finds what SECURITY DEFINER functions reach: the functions they
// call (whatever their own security: inside a definer everything runs with
// the definer's rights), the views and materialized views they read (views
// too, security_invoker or not, run as the definer there), and what those
// call and read, at any depth, down to the tenant tables.
type follower struct {
	cat      *catalogue
	tenant   map[int64]bool
	funcs    map[int64]*function
	funcName map[string]map[string][]int64 // schema → name → every overload
	relName  map[string]map[string]int64   // schema → name → relation
	memo     map[int64]*body
}

// body is what one function's body references, or why it cannot be read.
type body struct {
	deps       []dep
	unreadable string
}

// step is a function or a relation on a path from a definer.
type step struct {
	dep
	prev *step
}

// reach is what one definer reaches: paths to tenant tables, and paths to
// the bodies it could not follow, with the reason.
type reach struct {
	tenant, unfollowed []string
}

func newFollower(cat *catalogue) *follower {
	fl := &follower{
		cat: cat, tenant: map[int64]bool{}, funcs: map[int64]*function{},
		funcName: map[string]map[string][]int64{}, relName: map[string]map[string]int64{}, memo: map[int64]*body{},
	}
	for oid := range cat.reach {
		fl.tenant[oid] = true
	}
	for _, f := range cat.functions {
		fl.funcs[f.oid] = f
		if fl.funcName[f.schema] == nil {
			fl.funcName[f.schema] = map[string][]int64{}
		}
		fl.funcName[f.schema][f.name] = append(fl.funcName[f.schema][f.name], f.oid)
	}
	for _, r := range cat.relations {
		if fl.relName[r.schema] == nil {
			fl.relName[r.schema] = map[string]int64{}
		}
		fl.relName[r.schema][r.name] = r.oid
	}
	return fl
}

// follow walks breadth-first from the definer f, so each path it reports is
// a shortest one.
func (fl *follower) follow(f *function) reach {
	var r reach
	seen := map[dep]bool{}
	start := &step{dep: dep{function: true, oid: f.oid}}
	queue := []*step{start}
	seen[start.dep] = true
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		var next []dep
		if n.function {
			b := fl.body(fl.funcs[n.oid])
			if b.unreadable != "" {
				r.unfollowed = append(r.unfollowed, fl.path(n)+": "+b.unreadable)
			}
			next = b.deps
		} else {
			rel := fl.cat.relations[n.oid]
			if fl.tenant[n.oid] {
				r.tenant = append(r.tenant, fl.path(n))
				continue
			}
			if rel != nil && (rel.kind == "v" || rel.kind == "m") {
				next = rel.deps
			}
		}
		for _, d := range next {
			if seen[d] || d.function && fl.funcs[d.oid] == nil || !d.function && fl.cat.relations[d.oid] == nil && !fl.tenant[d.oid] {
				continue // a system function or relation, or one dropped since the snapshot
			}
			seen[d] = true
			queue = append(queue, &step{dep: d, prev: n})
		}
	}
	return r
}

// path names the nodes from the definer to n: "f"() → "v" → "t".
func (fl *follower) path(n *step) string {
	var names []string
	for ; n != nil; n = n.prev {
		names = append(names, fl.name(n.dep))
	}
	for i, j := 0, len(names)-1; i < j; i, j = i+1, j-1 {
		names[i], names[j] = names[j], names[i]
	}
	return strings.Join(names, " → ")
}

func (fl *follower) name(d dep) string {
	if d.function {
		f := fl.funcs[d.oid]
		return fmt.Sprintf("%s.%s(%s)", quote(f.schema), quote(f.name), f.args)
	}
	if r := fl.cat.relations[d.oid]; r != nil {
		return quote(r.schema) + "." + quote(r.name)
	}
	return fmt.Sprintf("relation %d", d.oid)
}

// body returns what f's body references: PostgreSQL's own record of it
// for a SQL-standard body (BEGIN ATOMIC, RETURN); the names in its parse
// tree for a SQL body kept as text and for PL/pgSQL (each statement and
// expression parsed, and a statement that runs a string built at run
// time, EXECUTE, made unreadable); nothing for C and internal functions of
// an extension; unreadable for any other language.
func (fl *follower) body(f *function) *body {
	if b := fl.memo[f.oid]; b != nil {
		return b
	}
	b := &body{}
	fl.memo[f.oid] = b
	switch {
	case f.sqlBody:
		b.deps = f.deps
	case f.language == "sql":
		if err := fl.sqlRefs(f, f.body, b); err != nil {
			b.unreadable = "its SQL body does not parse: " + oneLine(err.Error())
		}
	case f.language == "plpgsql":
		fl.plpgsqlRefs(f, b)
	case f.extension && (f.language == "c" || f.language == "internal"):
		// an extension's compiled code: taken as reading no table
	default:
		b.unreadable = fmt.Sprintf("written in %s, which rls-check cannot read", f.language)
	}
	return b
}

// sqlRefs parses SQL text (one or more statements) and adds the relations
// and functions it names to b.
func (fl *follower) sqlRefs(f *function, text string, b *body) error {
	js, err := pgparse.ToJSON(text)
	if err != nil {
		return err
	}
	var tree any
	if err := json.Unmarshal([]byte(js), &tree); err != nil {
		return err
	}
	fl.collect(f, tree, b)
	return nil
}

// collect adds every RangeVar (a relation, or a CTE's name, which may then
// match a relation: reported rather than missed) and FuncCall in v to b.
// A function is followed by its name alone, every overload of it.
func (fl *follower) collect(f *function, v any, b *body) {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			fl.collect(f, e, b)
		}
	case map[string]any:
		// A RangeVar where the tree holds a relation (INSERT's, UPDATE's,
		// DELETE's, MERGE's target) comes without its type's name.
		if name, ok := v["relname"].(string); ok {
			schema, _ := v["schemaname"].(string)
			for _, s := range fl.schemasFor(f, schema) {
				if oid, ok := fl.relName[s][name]; ok {
					b.deps = append(b.deps, dep{oid: oid})
				}
			}
		}
		if typ, fields, ok := node(v); ok {
			switch typ {
			case "FuncCall":
				names, _ := fields["funcname"].([]any)
				var parts []string
				for _, n := range names {
					s, _ := stringConst(n)
					parts = append(parts, s)
				}
				if len(parts) > 0 {
					schema := ""
					if len(parts) > 1 {
						schema = parts[len(parts)-2]
					}
					for _, s := range fl.schemasFor(f, schema) {
						for _, oid := range fl.funcName[s][parts[len(parts)-1]] {
							b.deps = append(b.deps, dep{function: true, oid: oid})
						}
					}
				}
			}
		}
		for _, e := range v {
			fl.collect(f, e, b)
		}
	}
}

// schemasFor is where a name in f's body may resolve: its own schema when
// qualified; else the schemas of f's SET search_path; else (the caller's
// search path applies, which the check cannot know) every schema.
func (fl *follower) schemasFor(f *function, schema string) []string {
	if schema != "" {
		return []string{schema}
	}
	for _, c := range f.config {
		p, ok := strings.CutPrefix(c, "search_path=")
		if !ok {
			continue
		}
		var out []string
		for _, s := range strings.Split(p, ",") {
			s = strings.TrimSpace(s)
			if s == `"$user"` || s == "$user" {
				out = nil // the owner's own schema, by its name: any
				break
			}
			if u, ok := strings.CutPrefix(s, `"`); ok {
				s = strings.ReplaceAll(strings.TrimSuffix(u, `"`), `""`, `"`)
			}
			out = append(out, s)
		}
		if out != nil {
			return out
		}
	}
	var all []string
	for s := range fl.relName {
		all = append(all, s)
	}
	for s := range fl.funcName {
		if fl.relName[s] == nil {
			all = append(all, s)
		}
	}
	return all
}

// plpgsqlRefs parses a PL/pgSQL function with PostgreSQL's PL/pgSQL parser
// and each SQL statement and expression in it with the SQL parser.
func (fl *follower) plpgsqlRefs(f *function, b *body) {
	js, err := pgparse.PlPgSQLToJSON(f.body)
	if err != nil {
		b.unreadable = "its PL/pgSQL body does not parse: " + oneLine(err.Error())
		return
	}
	var tree any
	if err := json.Unmarshal([]byte(js), &tree); err != nil {
		b.unreadable = "its PL/pgSQL body does not parse: " + err.Error()
		return
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for k, e := range v {
				switch k {
				case "PLpgSQL_stmt_dynexecute", "PLpgSQL_stmt_dynfors":
					b.unreadable = "it runs SQL built at run time (EXECUTE), which rls-check cannot follow"
				case "dynquery":
					b.unreadable = "it opens or returns a query built at run time (EXECUTE), which rls-check cannot follow"
				case "PLpgSQL_expr":
					if b.unreadable == "" {
						if q, err := plpgsqlQuery(e); err != nil {
							b.unreadable = err.Error()
						} else if err := fl.sqlRefs(f, q, b); err != nil {
							b.unreadable = "a statement rls-check cannot parse: " + oneLine(err.Error())
						}
					}
				}
				walk(e)
			}
		}
	}
	walk(tree)
}

// plpgsqlQuery turns a PLpgSQL_expr into SQL the SQL parser reads: a
// statement as it is, an expression after SELECT, an assignment's right
// side after SELECT.
func plpgsqlQuery(v any) (string, error) {
	m, _ := v.(map[string]any)
	q, _ := m["query"].(string)
	mode, _ := m["parseMode"].(float64)
	switch mode {
	case 0: // RAW_PARSE_DEFAULT: a whole statement
		return q, nil
	case 2: // RAW_PARSE_PLPGSQL_EXPR
		return "SELECT " + q, nil
	case 3, 4, 5: // RAW_PARSE_PLPGSQL_ASSIGNn: target := expression
		if _, rhs, ok := strings.Cut(q, ":="); ok {
			return "SELECT " + rhs, nil
		}
		if _, rhs, ok := strings.Cut(q, "="); ok {
			return "SELECT " + rhs, nil
		}
	}
	return "", fmt.Errorf("a PL/pgSQL expression rls-check cannot read: %s", oneLine(q))
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
