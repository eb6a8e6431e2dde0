package rlscheck

import (
	"fmt"
	"slices"
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
		rep.add(NoTenantTable, "column "+quote(opts.TenantColumn),
			fmt.Sprintf("no table in schemas %s has the column %s: nothing was checked, so nothing is proven (a misspelt --tenant-column, or the wrong --schema?)", strings.Join(cat.schemas, ", "), quote(opts.TenantColumn)),
			"-- name the tenant column with --tenant-column and the schemas with --schema")
	}
	role := ""
	if opts.Role != "" {
		role = quote(opts.Role)
	}
	cat.judgeRole(rep, opts)

	for _, t := range cat.tables {
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

	for _, p := range cat.parents {
		cat.judgeParent(rep, p, opts)
	}
	for _, g := range cat.grants {
		name := cat.reach[g.table]
		rep.add(PrivilegeEscapesRLS, name,
			fmt.Sprintf("%s holds %s on it, which row-level security does not bind: %s", g.grantee, strings.Join(g.privileges, ", "), escapes(g.privileges)),
			fmt.Sprintf("REVOKE %s ON %s FROM %s;", strings.Join(g.privileges, ", "), name, g.grantee))
	}

	for _, v := range cat.views {
		name := quote(v.schema) + "." + quote(v.name)
		var reads []string
		for _, oid := range v.reads {
			reads = append(reads, cat.reach[oid])
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

	for _, r := range cat.rules {
		if !r.own && len(r.reads) == 0 {
			continue
		}
		table := quote(r.schema) + "." + quote(r.table)
		var reaches []string
		if r.own {
			reaches = append(reaches, "its own tenant table, which the check cannot tell apart from NEW and OLD")
		}
		for _, oid := range r.reads {
			reaches = append(reaches, cat.reach[oid])
		}
		rep.add(RuleReachesTenantTable, "rule "+quote(r.name)+" on "+table,
			fmt.Sprintf("rule reaches %s: its action runs with the table owner's rights, so the owner's RLS exemption applies to whoever fires it", strings.Join(reaches, ", ")),
			fmt.Sprintf("DROP RULE %s ON %s; -- do its work in a trigger instead, which runs with the rights of whoever writes", quote(r.name), table))
	}

	fl := newFollower(cat)
	for _, f := range cat.functions {
		if !f.definer {
			continue
		}
		r := fl.follow(f)
		if len(r.tenant) == 0 && len(r.unfollowed) == 0 {
			continue
		}
		what := "FUNCTION"
		if f.kind == "p" {
			what = "PROCEDURE"
		}
		name := fmt.Sprintf("%s.%s(%s)", quote(f.schema), quote(f.name), f.args)
		fix := fmt.Sprintf("ALTER %s %s SECURITY INVOKER;", what, name)
		if len(r.tenant) > 0 {
			rep.add(DefinerReadsTenantTable, name,
				fmt.Sprintf("SECURITY DEFINER %s reaches a tenant table (%s): it runs with its owner's rights, which may skip the table's RLS", strings.ToLower(what), strings.Join(r.tenant, "; ")), fix)
		}
		if len(r.unfollowed) > 0 {
			rep.add(DefinerNotFollowed, name,
				fmt.Sprintf("SECURITY DEFINER %s cannot be followed (%s): what it reads there runs with its owner's rights and is not proven to stay off tenant tables", strings.ToLower(what), strings.Join(r.unfollowed, "; ")), fix)
		}
	}
	return rep, nil
}

// A policy expression's two uses. read: USING filters the rows SELECT,
// UPDATE and DELETE see. write: WITH CHECK (USING where the policy has
// none, as PostgreSQL does) admits the rows INSERT and UPDATE write.
const (
	read = iota
	write
)

// aspects are the uses each command makes of its policies.
var aspects = map[string][]int{"r": {read}, "a": {write}, "w": {read, write}, "d": {read}}

// expr returns the expression PostgreSQL applies for the aspect, and its
// clause's name; nil when the policy has none for it.
func (p *policy) expr(aspect int) (*exprFacts, string) {
	if aspect == read {
		return p.usingExpr, "USING"
	}
	if p.check.Valid {
		return p.chkExpr, "WITH CHECK"
	}
	return p.usingExpr, "USING"
}

// text returns the SQL of the clause named, as pg_get_expr printed it.
func (p *policy) text(clause string) string {
	if clause == "USING" {
		return oneLine(p.using.String)
	}
	return oneLine(p.check.String)
}

func (p *policy) covers(cmd string) bool { return p.cmd == cmd || p.cmd == "*" }

// excuses reports whether the restrictive policy q ANDs a proven tenant
// guard into every statement of cmd's aspect that the permissive policy p
// lets through: q covers the command, proves the guard in the expression
// PostgreSQL applies (a restrictive policy without one restricts nothing),
// and applies to every role p applies to: q is for PUBLIC, or for every
// role p names. That holds for whichever role the statement runs as, so
// it holds with Options.Role too, where the application role may also act
// as any role it can SET ROLE to (PostgreSQL applies a policy to the roles
// that have its roles' privileges: a restrictive policy for the
// application role alone does not apply after SET ROLE to a group, while a
// permissive one for PUBLIC still does). With Options.Role q must also
// apply to that role (appliesToRole).
func excuses(q, p *policy, cmd string, aspect int) bool {
	if q.permissive || !q.appliesToRole || !q.covers(cmd) {
		return false
	}
	if e, _ := q.expr(aspect); e == nil || !e.proven {
		return false
	}
	if q.public {
		return true
	}
	if p.public {
		return false
	}
	for _, r := range p.roles {
		if !slices.Contains(q.roles, r) {
			return false
		}
	}
	return true
}

func (t *table) judgePolicies(rep *Report, name string, opts Options) error {
	guard := guardSQL(opts, t.colType)
	untrusted := t.untrustedEquality(opts)
	covered := map[string]bool{}
	for i := range t.policies {
		p := &t.policies[i]
		var err error
		if p.usingExpr, err = analyze(p.using, opts.Setting, opts.TenantColumn, t.colType); err != nil {
			return fmt.Errorf("policy %s on %s: %w", quote(p.name), name, err)
		}
		if p.chkExpr, err = analyze(p.check, opts.Setting, opts.TenantColumn, t.colType); err != nil {
			return fmt.Errorf("policy %s on %s: %w", quote(p.name), name, err)
		}
		if untrusted != "" {
			// = on this column may hold between distinct ids: no
			// expression of it is proven, permissive or restrictive.
			for _, e := range []*exprFacts{p.usingExpr, p.chkExpr} {
				if e != nil {
					e.proven = false
				}
			}
		}
		if p.appliesToRole && p.permissive {
			for _, c := range commands {
				if p.covers(c.code) {
					covered[c.code] = true
				}
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
		// open: the clauses of a permissive policy that admit rows not
		// proven to be the tenant's, in a command and use no restrictive
		// policy closes. No expression admits no row.
		var open []string
		var openFacts []*exprFacts
		if p.permissive {
			for _, c := range commands {
				if !p.covers(c.code) {
					continue
				}
				for _, a := range aspects[c.code] {
					e, clause := p.expr(a)
					if e == nil || e.proven || slices.Contains(open, clause) {
						continue
					}
					excused := false
					for j := range t.policies {
						if excuses(&t.policies[j], p, c.code, a) {
							excused = true
							break
						}
					}
					if !excused {
						open, openFacts = append(open, clause), append(openFacts, e)
					}
				}
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
		inOpen := func(pred func(*exprFacts) bool) string {
			var in []string
			for i, f := range openFacts {
				if pred(f) {
					in = append(in, open[i])
				}
			}
			return strings.Join(in, " and ")
		}
		misread := func(f *exprFacts) bool { return f.noMissingOK || f.noNullIf || f.coalesced }
		if len(open) > 0 {
			if in := inOpen(func(f *exprFacts) bool { return f.alwaysTrue }); in != "" {
				rep.add(PolicyAlwaysTrue, obj, fmt.Sprintf("permissive policy's %s is true for every row: permissive policies are ORed, so it opens the table to every tenant", in), fix)
			} else if in := inOpen(func(f *exprFacts) bool { return f.settingRefs == 0 }); in != "" {
				rep.add(PolicyNoSetting, obj, fmt.Sprintf("permissive policy's %s never reads current_setting('%s', true), so it does not restrict rows to the current tenant", in, opts.Setting), fix)
			} else if inOpen(misread) == "" {
				var what []string
				for _, clause := range open {
					what = append(what, fmt.Sprintf("%s (%s)", clause, p.text(clause)))
				}
				if untrusted != "" {
					rep.add(PolicyNotProven, obj, fmt.Sprintf("permissive policy's %s is not proven to admit only the current tenant's rows: %s", strings.Join(what, " and "), untrusted),
						fmt.Sprintf("-- give %s.%s PostgreSQL's own type (text, uuid, bigint…) with a deterministic collation (drop the policies that read it, ALTER TABLE %s ALTER COLUMN %s TYPE …, re-create them), then: %s", name, quote(opts.TenantColumn), name, quote(opts.TenantColumn), fix))
				} else {
					rep.add(PolicyNotProven, obj, fmt.Sprintf("permissive policy's %s is not proven to admit only rows where %s: every OR arm must hold that equality (= exactly, nothing around the column but a cast to text), and no restrictive policy for every role it applies to holds it", strings.Join(what, " and "), guard), fix)
				}
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

// untrustedEquality says why = on the table's tenant column does not prove
// that a row is the current tenant's ("" when it does): a nondeterministic
// collation makes = true between ids that differ (in case, in accents), and
// a type that is not PostgreSQL's own base type (an extension's citext, a
// type or domain of the user's) brings its own =, its own casts to text,
// whatever they do.
func (t *table) untrustedEquality(opts Options) string {
	col := quote(opts.TenantColumn)
	if t.collation != "" {
		return fmt.Sprintf("the column %s has the nondeterministic collation %s, under which = matches ids that differ (in case, for one), so a tenant reads and writes other tenants' rows", col, t.collation)
	}
	if !t.builtin {
		return fmt.Sprintf("the column %s is of type %s, not PostgreSQL's own, whose = and casts may match ids that differ (citext ignores case)", col, t.colType)
	}
	return ""
}

func forRole(opts Options) string {
	if opts.Role == "" {
		return ""
	}
	return " that applies to " + quote(opts.Role)
}

// guardSQL is the tenant guard a policy should hold: the column equal to the
// setting, read with missing_ok, the empty string turned into NULL so that an unset tenant
// matches no row, cast to the column's type (without its length or precision: tables.sql).
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

// escapes says what each privilege of a grant does past row-level
// security.
func escapes(privileges []string) string {
	what := map[string]string{
		"TRUNCATE":   "TRUNCATE empties every tenant's rows (no policy applies to it)",
		"TRIGGER":    "a trigger of its own runs on every tenant's rows as they are written",
		"REFERENCES": "a foreign key to the table checks every tenant's keys (it tells which exist)",
	}
	out := make([]string, len(privileges))
	for i, p := range privileges {
		out[i] = what[p]
	}
	return strings.Join(out, "; ")
}
