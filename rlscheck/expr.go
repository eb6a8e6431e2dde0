package rlscheck

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/racefree/racefree/internal/pgparse"
)

// exprFacts is what one policy expression does with the tenant setting.
type exprFacts struct {
	settingRefs int  // calls of current_setting(<the setting>, …)
	noMissingOK bool // some call lacks a second argument of true
	noNullIf    bool // some call is not the first argument of NULLIF(…, '')
	coalesced   bool // some call sits inside a COALESCE
	alwaysTrue  bool // the expression is true whatever the row
}

// guards reports whether the expression, if any, holds a correct tenant
// guard: it reads the setting, only in the guarded form, and is not true
// for every row. No expression (nil) guards nothing but breaks nothing.
func (f *exprFacts) guards() bool {
	return f == nil || f.settingRefs > 0 && !f.noMissingOK && !f.noNullIf && !f.coalesced && !f.alwaysTrue
}

// analyze parses a policy expression, as pg_get_expr prints it, with
// PostgreSQL's own parser and reports what it does with setting. NULL (no
// expression) is nil.
func analyze(expr sql.NullString, setting string) (*exprFacts, error) {
	if !expr.Valid {
		return nil, nil
	}
	js, err := pgparse.ToJSON("SELECT " + expr.String)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", expr.String, err)
	}
	var tree struct {
		Stmts []struct {
			Stmt struct {
				SelectStmt struct {
					TargetList []struct {
						ResTarget struct {
							Val any `json:"val"`
						}
					} `json:"targetList"`
				}
			} `json:"stmt"`
		} `json:"stmts"`
	}
	if err := json.Unmarshal([]byte(js), &tree); err != nil {
		return nil, fmt.Errorf("parse %q: %w", expr.String, err)
	}
	if len(tree.Stmts) != 1 || len(tree.Stmts[0].Stmt.SelectStmt.TargetList) != 1 {
		return nil, fmt.Errorf("parse %q: not one expression", expr.String)
	}
	root := tree.Stmts[0].Stmt.SelectStmt.TargetList[0].ResTarget.Val
	f := &exprFacts{alwaysTrue: alwaysTrue(root)}
	f.walk(root, setting, false, false)
	return f, nil
}

// walk visits every node below v. guarded is true while v is the first
// argument of NULLIF(…, <empty string>), through type casts only; coalesced is true
// below a COALESCE.
func (f *exprFacts) walk(v any, setting string, guarded, coalesced bool) {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			f.walk(e, setting, false, coalesced)
		}
	case map[string]any:
		if typ, fields, ok := node(v); ok {
			switch typ {
			case "TypeCast":
				f.walk(fields["arg"], setting, guarded, coalesced)
				return
			case "A_Expr":
				if fields["kind"] == "AEXPR_NULLIF" && emptyString(fields["rexpr"]) {
					f.walk(fields["lexpr"], setting, true, coalesced)
					f.walk(fields["rexpr"], setting, false, coalesced)
					return
				}
			case "CoalesceExpr":
				f.walk(fields["args"], setting, false, true)
				return
			case "FuncCall":
				if args, ok := f.settingCall(fields, setting); ok {
					f.settingRefs++
					if len(args) != 2 || !trueConst(args[1]) {
						f.noMissingOK = true
					}
					if !guarded {
						f.noNullIf = true
					}
					if coalesced {
						f.coalesced = true
					}
				}
			}
			f.walk(fields, setting, false, coalesced)
			return
		}
		for _, e := range v {
			f.walk(e, setting, false, coalesced)
		}
	}
}

// settingCall reports whether a FuncCall's fields are a call of
// [pg_catalog.]current_setting whose first argument is the constant setting
// (custom setting names are case-insensitive), and returns its arguments.
func (f *exprFacts) settingCall(fields map[string]any, setting string) ([]any, bool) {
	names, _ := fields["funcname"].([]any)
	if len(names) == 0 {
		return nil, false
	}
	if n, ok := stringConst(names[len(names)-1]); !ok || !strings.EqualFold(n, "current_setting") {
		return nil, false
	}
	if len(names) == 2 {
		if s, ok := stringConst(names[0]); !ok || !strings.EqualFold(s, "pg_catalog") {
			return nil, false
		}
	}
	args, _ := fields["args"].([]any)
	if len(args) == 0 {
		return nil, false
	}
	s, ok := constString(args[0])
	if !ok || !strings.EqualFold(s, setting) {
		return nil, false
	}
	return args, true
}

// alwaysTrue reports whether v is true for every row: the constant true, an
// equality of two equal constants (1 = 1), an OR with such an arm, an AND
// of such arms. It is deliberately narrow: what it cannot decide is left to
// the other checks.
func alwaysTrue(v any) bool {
	typ, fields, ok := node(v)
	if !ok {
		return false
	}
	switch typ {
	case "A_Const", "TypeCast":
		return trueConst(v)
	case "BoolExpr":
		args, _ := fields["args"].([]any)
		switch fields["boolop"] {
		case "OR_EXPR":
			for _, a := range args {
				if alwaysTrue(a) {
					return true
				}
			}
		case "AND_EXPR":
			for _, a := range args {
				if !alwaysTrue(a) {
					return false
				}
			}
			return len(args) > 0
		}
	case "A_Expr":
		if fields["kind"] != "AEXPR_OP" {
			return false
		}
		names, _ := fields["name"].([]any)
		if len(names) != 1 {
			return false
		}
		if op, _ := stringConst(names[0]); op != "=" {
			return false
		}
		l, r := unwrapCasts(fields["lexpr"]), unwrapCasts(fields["rexpr"])
		lt, lf, lok := node(l)
		rt, rf, rok := node(r)
		return lok && rok && lt == "A_Const" && rt == "A_Const" && reflect.DeepEqual(withoutLocation(lf), withoutLocation(rf))
	}
	return false
}

// node splits a parse-tree node, {"Type": {fields}}, into its type and
// fields.
func node(v any) (string, map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return "", nil, false
	}
	for k, f := range m {
		fields, ok := f.(map[string]any)
		if !ok || k == "" || k[0] < 'A' || k[0] > 'Z' {
			return "", nil, false
		}
		return k, fields, true
	}
	return "", nil, false
}

func unwrapCasts(v any) any {
	for {
		typ, fields, ok := node(v)
		if !ok || typ != "TypeCast" {
			return v
		}
		v = fields["arg"]
	}
}

// constString returns the value of a string constant ('x' or 'x'::text).
func constString(v any) (string, bool) {
	typ, fields, ok := node(unwrapCasts(v))
	if !ok || typ != "A_Const" {
		return "", false
	}
	sval, ok := fields["sval"].(map[string]any)
	if !ok {
		return "", false
	}
	s, _ := sval["sval"].(string) // the parser leaves out an empty string
	return s, true
}

// stringConst returns the value of a String node (a name part).
func stringConst(v any) (string, bool) {
	typ, fields, ok := node(v)
	if !ok || typ != "String" {
		return "", false
	}
	s, ok := fields["sval"].(string)
	return s, ok
}

func emptyString(v any) bool {
	s, ok := constString(v)
	return ok && s == ""
}

// trueConst reports whether v is the constant true: true, 't'::boolean,
// 'on'::bool and the other spellings PostgreSQL's boolean input accepts.
func trueConst(v any) bool {
	typ, fields, ok := node(unwrapCasts(v))
	if !ok || typ != "A_Const" {
		return false
	}
	if b, ok := fields["boolval"].(map[string]any); ok {
		t, _ := b["boolval"].(bool)
		return t
	}
	if _, cast, ok := node(v); ok && isBoolCast(cast) {
		s, _ := constString(v)
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true", "t", "tr", "tru", "yes", "y", "ye", "on", "1":
			return true
		}
	}
	return false
}

func isBoolCast(cast map[string]any) bool {
	tn, _ := cast["typeName"].(map[string]any)
	names, _ := tn["names"].([]any)
	if len(names) == 0 {
		return false
	}
	n, _ := stringConst(names[len(names)-1])
	return n == "bool" || n == "boolean"
}

func withoutLocation(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != "location" {
			out[k] = v
		}
	}
	return out
}
