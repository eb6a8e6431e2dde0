package rlscheck

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/racefree/racefree/internal/ident"
)

// The commands a policy can cover, in the order findings list them.
var commands = []struct{ code, name string }{
	{"r", "SELECT"}, {"a", "INSERT"}, {"w", "UPDATE"}, {"d", "DELETE"},
}

// judge turns what the catalogue holds into findings.
func (cat *catalogue) judge(opts Options) (*Report, error) {
	rep := &Report{
		Schemas: cat.schemas, TenantColumn: opts.TenantColumn, Setting: opts.Setting, Role: opts.Role,
		Tables: []string{}, Findings: []Finding{}, Warnings: []string{},
	}
	if rep.Schemas == nil {
		rep.Schemas = []string{}
	}
	if len(cat.tables) == 0 {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("no table in schemas %s has the column %s: nothing to check", strings.Join(cat.schemas, ", "), opts.TenantColumn))
	}
	role := ""
	if opts.Role != "" {
		role = quote(opts.Role)
	}
	cat.judgeRole(rep, opts)

	byOID := map[int64]*table{}
	for _, t := range cat.tables {
		byOID[t.oid] = t
		name := quote(t.schema) + "." + quote(t.name)
		rep.Tables = append(rep.Tables, name)
		if !t.enabled {
			rep.add(RLSDisabled, name, "row-level security is not enabled: every role with SELECT sees every tenant's rows",
				fmt.Sprintf("ALTER TABLE %s ENABLE ROW LEVEL SECURITY;", name))
		}
		if !t.forced {
			rep.add(RLSNotForced, name, fmt.Sprintf("row-level security is not forced: the owner %s and roles with its privileges skip every policy", quote(t.owner)),
				fmt.Sprintf("ALTER TABLE %s FORCE ROW LEVEL SECURITY;", name))
		}
		cat.judgeOwnerPrivileges(rep, t, name, opts)
		if err := t.judgePolicies(rep, name, opts); err != nil {
			return nil, err
		}
	}

	for _, v := range cat.views {
		name := quote(v.schema) + "." + quote(v.name)
		var reads []string
		for _, oid := range v.reads {
			t := byOID[oid]
			reads = append(reads, quote(t.schema)+"."+quote(t.name))
		}
		if v.kind == "m" {
			fix := fmt.Sprintf("REVOKE ALL ON %s FROM PUBLIC;", name)
			if role != "" {
				fix = fmt.Sprintf("REVOKE ALL ON %s FROM PUBLIC, %s;", name, role)
			}
			rep.add(MaterializedView, name, fmt.Sprintf("materialized view over %s stores every tenant's rows and has no row-level security", strings.Join(reads, ", ")),
				fix+" -- or drop it, or replace it with a security_invoker view")
			continue
		}
		if !securityInvoker(v.options) {
			rep.add(ViewNotInvoker, name, fmt.Sprintf("view over %s without security_invoker reads with its owner's rights, so the owner's RLS exemption applies to every reader", strings.Join(reads, ", ")),
				fmt.Sprintf("ALTER VIEW %s SET (security_invoker = true);", name))
		}
	}

	for _, f := range cat.functions {
		var hits []string
		for _, t := range cat.tables {
			if f.reads(t) {
				hits = append(hits, quote(t.schema)+"."+quote(t.name))
			}
		}
		if len(hits) == 0 {
			continue
		}
		what := "FUNCTION"
		if f.kind == "p" {
			what = "PROCEDURE"
		}
		name := fmt.Sprintf("%s.%s(%s)", quote(f.schema), quote(f.name), f.args)
		rep.add(DefinerReadsTenantTable, name,
			fmt.Sprintf("SECURITY DEFINER %s names %s: it runs with its owner's rights, which may skip the table's RLS", strings.ToLower(what), strings.Join(hits, ", ")),
			fmt.Sprintf("ALTER %s %s SECURITY INVOKER;", what, name))
	}
	return rep, nil
}

func (t *table) judgePolicies(rep *Report, name string, opts Options) error {
	guard := guardSQL(opts, t.colType)
	covered := map[string]bool{}
	// guardedByRestrictive[cmd]: an applicable restrictive policy ANDs a
	// correct tenant guard into every statement of that command, so a
	// permissive policy on it may be as wide as it likes.
	guardedByRestrictive := map[string]bool{}
	for i := range t.policies {
		p := &t.policies[i]
		var err error
		if p.usingExpr, err = analyze(p.using, opts.Setting); err != nil {
			return fmt.Errorf("policy %s on %s: %w", quote(p.name), name, err)
		}
		if p.chkExpr, err = analyze(p.check, opts.Setting); err != nil {
			return fmt.Errorf("policy %s on %s: %w", quote(p.name), name, err)
		}
		if !p.appliesToRole {
			continue
		}
		for _, c := range commands {
			if p.cmd != c.code && p.cmd != "*" {
				continue
			}
			if p.permissive {
				covered[c.code] = true
			} else if p.usingExpr.guards() && p.chkExpr.guards() {
				guardedByRestrictive[c.code] = true
			}
		}
	}
	for _, c := range commands {
		if !covered[c.code] {
			pname := policyName(t.name, strings.ToLower(c.name))
			rep.add(PolicyMissing, name, fmt.Sprintf("no permissive policy for %s%s: every %s is refused, or the policies were left half written", c.name, forRole(opts), c.name),
				fmt.Sprintf("CREATE POLICY %s ON %s FOR %s %s;", quote(pname), name, c.name, clauses(c.code, guard)))
		}
	}
	for i := range t.policies {
		p := &t.policies[i]
		if !p.appliesToRole {
			continue
		}
		obj := "policy " + quote(p.name) + " on " + name
		fix := fmt.Sprintf("ALTER POLICY %s ON %s %s;", quote(p.name), name, clauses(p.cmd, guard))
		exempt := true // every command of the policy is guarded by a restrictive policy
		for _, c := range commands {
			if (p.cmd == c.code || p.cmd == "*") && !guardedByRestrictive[c.code] {
				exempt = false
			}
		}
		exprs := []struct {
			clause string
			f      *exprFacts
		}{{"USING", p.usingExpr}, {"WITH CHECK", p.chkExpr}}
		has := func(pred func(*exprFacts) bool) string {
			var in []string
			for _, e := range exprs {
				if e.f != nil && pred(e.f) {
					in = append(in, e.clause)
				}
			}
			return strings.Join(in, " and ")
		}
		if p.permissive && !exempt {
			if in := has(func(f *exprFacts) bool { return f.alwaysTrue }); in != "" {
				rep.add(PolicyAlwaysTrue, obj, fmt.Sprintf("permissive policy's %s is true for every row: permissive policies are ORed, so it opens the table to every tenant", in), fix)
			} else if in := has(func(f *exprFacts) bool { return f.settingRefs == 0 }); in != "" {
				rep.add(PolicyNoSetting, obj, fmt.Sprintf("permissive policy's %s never reads current_setting('%s', true), so it does not restrict rows to the current tenant", in, opts.Setting), fix)
			}
		}
		if in := has(func(f *exprFacts) bool { return f.noMissingOK }); in != "" {
			rep.add(PolicyNoMissingOK, obj, fmt.Sprintf("%s reads current_setting('%s') without missing_ok: an error on a connection that never set it, '' on one that did", in, opts.Setting), fix)
		}
		if in := has(func(f *exprFacts) bool { return f.noNullIf }); in != "" {
			rep.add(PolicyNoNullIf, obj, fmt.Sprintf("%s compares current_setting('%s') without NULLIF(…, ''): an unset tenant reads as '' or NULL instead of matching no row by construction", in, opts.Setting), fix)
		}
		if in := has(func(f *exprFacts) bool { return f.coalesced }); in != "" {
			rep.add(PolicyCoalesce, obj, fmt.Sprintf("%s wraps the setting in COALESCE: an unset tenant gets a value, and may match other tenants' rows or every row", in), fix)
		}
	}
	return nil
}

func forRole(opts Options) string {
	if opts.Role == "" {
		return ""
	}
	return " that applies to " + quote(opts.Role)
}

// guardSQL is the tenant guard a policy should hold: the column equal to the
// setting, read with missing_ok, the empty string turned into NULL so that an unset tenant
// matches no row, cast to the column's type.
func guardSQL(opts Options, colType string) string {
	return fmt.Sprintf("%s = NULLIF(current_setting(%s, true), '')::%s", quote(opts.TenantColumn), literal(opts.Setting), colType)
}

// clauses returns the USING and WITH CHECK clauses a policy for cmd takes.
func clauses(cmd, guard string) string {
	switch cmd {
	case "r", "d":
		return "USING (" + guard + ")"
	case "a":
		return "WITH CHECK (" + guard + ")"
	}
	return "USING (" + guard + ") WITH CHECK (" + guard + ")"
}

// policyName is <table>_tenant_<command>, the table part cut so that the
// whole fits PostgreSQL's 63 bytes.
func policyName(table, cmd string) string {
	suffix := "_tenant_" + cmd
	for len(table)+len(suffix) > 63 {
		_, size := lastRune(table)
		table = table[:len(table)-size]
	}
	return table + suffix
}

func lastRune(s string) (rune, int) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i]&0xC0 != 0x80 {
			return rune(s[i]), len(s) - i
		}
	}
	return 0, len(s)
}

// securityInvoker reports whether reloptions set security_invoker to a true
// value, spelled as PostgreSQL's boolean input accepts it.
func securityInvoker(options []string) bool {
	for _, o := range options {
		k, v, ok := strings.Cut(o, "=")
		if !ok || !strings.EqualFold(k, "security_invoker") {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true", "t", "tr", "tru", "yes", "y", "ye", "on", "1":
			return true
		}
		return false
	}
	return false
}

// reads reports whether f's body names t: the heuristic documented in the
// package comment.
func (f function) reads(t *table) bool {
	re := t.nameRegexps()
	if re.qualified.MatchString(f.body) {
		return true
	}
	// An unqualified name resolves through the search path: the function's
	// own SET search_path, or else (most likely) its own schema.
	if !re.bare.MatchString(f.body) {
		return false
	}
	for _, c := range f.config {
		if p, ok := strings.CutPrefix(c, "search_path="); ok {
			for _, s := range strings.Split(p, ",") {
				if strings.Trim(strings.TrimSpace(s), `"`) == t.schema {
					return true
				}
			}
			return false
		}
	}
	return f.schema == t.schema
}

// nameRegexps match t's name in SQL text, qualified by its schema or not:
// quoted exactly, or unquoted in any case when the name is a plain
// lower-case identifier (PostgreSQL folds unquoted names to lower case).
// They are compiled once per table.
func (t *table) nameRegexps() *nameRegexps {
	if t.re != nil {
		return t.re
	}
	alt := func(name string) string {
		alts := []string{regexp.QuoteMeta(quote(name))}
		if plain(name) {
			alts = append(alts, "(?i:"+regexp.QuoteMeta(name)+")")
		}
		return "(?:" + strings.Join(alts, "|") + ")"
	}
	const before, after = `(?:^|[^A-Za-z0-9_$."])`, `(?:$|[^A-Za-z0-9_$"])`
	t.re = &nameRegexps{
		qualified: regexp.MustCompile(before + alt(t.schema) + `\s*\.\s*` + alt(t.name) + after),
		bare:      regexp.MustCompile(before + alt(t.name) + after),
	}
	return t.re
}

type nameRegexps struct{ qualified, bare *regexp.Regexp }

func plain(s string) bool {
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z':
		case i > 0 && (r >= '0' && r <= '9' || r == '$'):
		default:
			return false
		}
	}
	return s != ""
}

func (r *Report) add(kind Kind, object, problem, fix string) {
	r.Findings = append(r.Findings, Finding{Kind: kind, Object: object, Problem: problem, Fix: fix})
}

// quote quotes a name read from the catalogue, which PostgreSQL keeps to
// 63 bytes without control characters.
func quote(name string) string {
	q, err := ident.Quote(name)
	if err != nil {
		return `"<invalid name>"`
	}
	return q
}

// literal quotes s as a SQL string literal.
func literal(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
