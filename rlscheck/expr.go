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
	proven      bool // every row it admits has the tenant column equal to the guarded setting (see proves)
}

// analyze parses a policy expression, as pg_get_expr prints it, with
// PostgreSQL's own parser and reports what it does with setting, and
// whether it proves the tenant guard on column (of type colType, as
// format_type prints it). NULL (no expression) is nil.
func analyze(expr sql.NullString, setting, column, colType string) (*exprFacts, error) {
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
	p := prover{setting: setting, column: column, intColumn: intTypes[colType]}
	f := &exprFacts{alwaysTrue: alwaysTrue(root), proven: p.proves(root)}
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
// 'on'::boolean and the other spellings PostgreSQL's boolean input accepts.
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

// isBoolCast reports whether a TypeCast is to PostgreSQL's own boolean,
// which the parser reads as pg_catalog.bool (from boolean, as pg_get_expr
// prints the type, or pg_catalog.bool). A cast printed any other way is to
// a type of the user's, even one named bool in another schema or
// "boolean": its cast to boolean may be anything, true for every row.
func isBoolCast(cast map[string]any) bool {
	tn, _ := cast["typeName"].(map[string]any)
	names, _ := tn["names"].([]any)
	if len(names) != 2 {
		return false
	}
	s, _ := stringConst(names[0])
	n, _ := stringConst(names[1])
	return s == "pg_catalog" && n == "bool"
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

// prover decides whether a policy expression admits only the current
// tenant's rows.
type prover struct {
	setting, column string
	intColumn       bool // the column is smallint, integer or bigint
}

// intTypes are the column types (as format_type prints them) whose values
// a cast to another integer type or to numeric keeps exactly (or refuses
// with an error).
var intTypes = map[string]bool{"smallint": true, "integer": true, "bigint": true}

// proves reports whether every row for which v is true has
//
//	<column> = NULLIF(current_setting('<setting>', true), '')
//
// true, so it holds one tenant's rows and, with the setting unset or
// empty, none. It reads v in disjunctive form without building it: an OR
// is proven when every arm is, an AND when one of its conjuncts is (the
// others only narrow it), which is exactly "every arm of the disjunctive
// form holds the equality as a conjunct". The equality is an = operator
// between the column (bare, or cast to text or varchar, or to another
// integer type or numeric when it is an integer column: casts that never
// make two values equal) and the guarded setting (see guardedSetting),
// either way round. Everything else is unproven: NOT, CASE, IS NOT
// DISTINCT FROM (NULL matches NULL), <>, LIKE, IN, a function around the
// column, a sub-select other than the guarded setting's own, a boolean
// column or constant. Parentheses are gone in the parse tree; casts to
// boolean are looked through, PostgreSQL's own boolean only (isBoolCast).
func (p prover) proves(v any) bool {
	for {
		typ, fields, ok := node(v)
		if !ok || typ != "TypeCast" || !isBoolCast(fields) {
			break
		}
		v = fields["arg"]
	}
	typ, fields, ok := node(v)
	if !ok {
		return false
	}
	switch typ {
	case "BoolExpr":
		args, _ := fields["args"].([]any)
		switch fields["boolop"] {
		case "AND_EXPR":
			for _, a := range args {
				if p.proves(a) {
					return true
				}
			}
		case "OR_EXPR":
			for _, a := range args {
				if !p.proves(a) {
					return false
				}
			}
			return len(args) > 0
		}
		return false
	case "A_Expr":
		if fields["kind"] != "AEXPR_OP" || !equalsOperator(fields["name"]) {
			return false
		}
		l, r := fields["lexpr"], fields["rexpr"]
		return p.isColumn(l) && p.guardedSetting(r) || p.isColumn(r) && p.guardedSetting(l)
	}
	return false
}

// equalsOperator: the name of the operator =, bare or OPERATOR(pg_catalog.=).
func equalsOperator(v any) bool {
	names, _ := v.([]any)
	switch len(names) {
	case 1:
	case 2:
		if s, _ := stringConst(names[0]); s != "pg_catalog" {
			return false
		}
	default:
		return false
	}
	op, _ := stringConst(names[len(names)-1])
	return op == "="
}

// isColumn reports whether v is the tenant column, through casts that keep
// distinct values distinct.
func (p prover) isColumn(v any) bool {
	for {
		typ, fields, ok := node(v)
		if !ok {
			return false
		}
		switch typ {
		case "TypeCast":
			name, ok := plainType(fields)
			if !ok {
				return false
			}
			switch name {
			case "text", "varchar":
			case "int2", "int4", "int8", "numeric":
				if !p.intColumn {
					return false
				}
			default:
				return false
			}
			v = fields["arg"]
		case "ColumnRef":
			names, _ := fields["fields"].([]any)
			if len(names) != 1 {
				return false
			}
			s, ok := stringConst(names[0])
			return ok && s == p.column
		default:
			return false
		}
	}
}

// guardedSetting reports whether v is NULLIF(current_setting('<setting>',
// true), ”), through casts to a type without a length or precision (which
// could cut or round one tenant's id into another's; "char" and name cut
// too) and through a sub-select of it alone, (SELECT NULLIF(…)), which
// racefree's own policies use so that it is read once per statement.
func (p prover) guardedSetting(v any) bool {
	return p.guardedSettingUnder(v, false)
}

// guardedSettingUnder is guardedSetting of v under casts that end in text
// (textOutside): a cast to another type inside them, whether before or
// inside a sub-select, could print two ids alike.
func (p prover) guardedSettingUnder(v any, textOutside bool) bool {
	v, textOutside, ok := p.throughCasts(v, textOutside)
	if !ok {
		return false
	}
	typ, fields, ok := node(v)
	if !ok {
		return false
	}
	switch typ {
	case "SubLink":
		if fields["subLinkType"] != "EXPR_SUBLINK" {
			return false
		}
		st, sel, ok := node(fields["subselect"])
		if !ok || st != "SelectStmt" || sel["op"] != "SETOP_NONE" {
			return false
		}
		for k, x := range sel {
			switch k {
			case "targetList", "op":
			case "limitOption":
				if x != "LIMIT_OPTION_DEFAULT" {
					return false
				}
			default:
				return false // FROM, WHERE, LIMIT, DISTINCT, GROUP BY…
			}
		}
		targets, _ := sel["targetList"].([]any)
		if len(targets) != 1 {
			return false
		}
		rt, res, ok := node(targets[0])
		if !ok || rt != "ResTarget" {
			return false
		}
		return p.guardedSettingUnder(res["val"], textOutside)
	case "A_Expr":
		if fields["kind"] != "AEXPR_NULLIF" || !emptyString(fields["rexpr"]) {
			return false
		}
		call, _, ok := p.throughCasts(fields["lexpr"], textOutside)
		if !ok {
			return false
		}
		ct, cf, ok := node(call)
		if !ok || ct != "FuncCall" {
			return false
		}
		for k := range cf {
			switch k {
			case "funcname", "args", "funcformat", "location":
			default:
				return false // OVER, FILTER, VARIADIC, *…
			}
		}
		args, ok := (&exprFacts{}).settingCall(cf, p.setting)
		return ok && len(args) == 2 && trueConst(args[1])
	}
	return false
}

// throughCasts unwraps casts that keep distinct text distinct: to a type
// without a length or precision, other than "char" and name, and never to
// text (or varchar) around a cast to another type, which prints the other
// type's value: '01'::integer::text and '1'::integer::text are both '1', so
// on a text column tenant 01 would read tenant 1's rows. textOutside says
// whether casts around v (outside a sub-select that holds it) already end
// in text; it returns whether the casts it unwrapped, or those, do.
func (p prover) throughCasts(v any, textOutside bool) (any, bool, bool) {
	for {
		typ, fields, ok := node(v)
		if !ok || typ != "TypeCast" {
			return v, textOutside, true
		}
		name, ok := plainType(fields)
		if !ok || name == "char" || name == "name" {
			return nil, false, false
		}
		if name == "text" || name == "varchar" {
			textOutside = true
		} else if textOutside {
			return nil, false, false
		}
		v = fields["arg"]
	}
}

// plainType returns the name of a cast's type (without pg_catalog.) when it
// has no length, precision or array bounds.
func plainType(cast map[string]any) (string, bool) {
	tn, _ := cast["typeName"].(map[string]any)
	names, _ := tn["names"].([]any)
	if len(names) == 0 || len(names) > 2 || tn["typmods"] != nil || tn["arrayBounds"] != nil || tn["setof"] != nil || tn["pct_type"] != nil {
		return "", false
	}
	if len(names) == 2 {
		if s, _ := stringConst(names[0]); s != "pg_catalog" {
			return "", false
		}
	}
	n, ok := stringConst(names[len(names)-1])
	return n, ok
}
