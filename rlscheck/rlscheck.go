package rlscheck

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/ident"
	"github.com/racefree/racefree/postgres"
)

// Defaults of Options and Checker.
const (
	DefaultTenantColumn = "tenant_id"
	DefaultSetting      = "racefree.tenant_id"
	DefaultTimeout      = 60 * time.Second
)

// Kind names a misconfiguration. The strings are stable: scripts may match
// on them.
type Kind string

// The kinds of finding.
const (
	// RLSDisabled: a tenant table without ENABLE ROW LEVEL SECURITY; every
	// role with SELECT sees every tenant's rows.
	RLSDisabled Kind = "rls_disabled"
	// RLSNotForced: RLS is enabled but not FORCEd, so the table's owner
	// (and every role with the owner's privileges) bypasses the policies.
	RLSNotForced Kind = "rls_not_forced"
	// PolicyMissing: no permissive policy covers one of SELECT, INSERT,
	// UPDATE, DELETE (FOR ALL covers all four), so that command is refused
	// for every row, or the set of policies was left half written.
	PolicyMissing Kind = "policy_missing"
	// PolicyNoSetting: a permissive policy whose expression never reads the
	// tenant setting, so it cannot restrict rows to the current tenant.
	PolicyNoSetting Kind = "policy_without_setting"
	// PolicyNoMissingOK: current_setting('x') with one argument (or a
	// second that is not true): an error while the setting was never set in
	// the session, '' once a pooled connection set it in an earlier
	// transaction; the policy's behaviour depends on the connection's past.
	PolicyNoMissingOK Kind = "policy_setting_without_missing_ok"
	// PolicyNoNullIf: the setting is compared without NULLIF(…, ''): an
	// unset setting reads as '' or NULL, so the guard depends on how the
	// column's type and the comparison treat those.
	PolicyNoNullIf Kind = "policy_setting_without_nullif"
	// PolicyCoalesce: the setting is wrapped in COALESCE, which gives an
	// unset tenant a value: another tenant's, or one that matches every row.
	PolicyCoalesce Kind = "policy_setting_coalesced"
	// PolicyAlwaysTrue: a permissive policy whose expression is true for
	// every row (USING (true), … OR true); permissive policies are ORed,
	// so it opens the table whatever the other policies say.
	PolicyAlwaysTrue Kind = "policy_always_true"
	// RoleOwnsTable: the application role owns a tenant table or has its
	// owner's privileges: it may ALTER or DISABLE the table's RLS, and
	// skips the policies unless the table is FORCEd.
	RoleOwnsTable Kind = "role_owns_table"
	// RoleBypassesRLS: the application role is a superuser or has
	// BYPASSRLS; no policy applies to it, FORCE or not.
	RoleBypassesRLS Kind = "role_bypasses_rls"
	// ViewNotInvoker: a view over a tenant table (directly or through other
	// views) without security_invoker reads the table with its owner's
	// rights, so the owner's RLS exemption applies to whoever queries it.
	ViewNotInvoker Kind = "view_without_security_invoker"
	// MaterializedView: a materialized view over a tenant table stores
	// every tenant's rows and has no row-level security of its own.
	MaterializedView Kind = "materialized_view_over_tenant_table"
	// DefinerReadsTenantTable: a SECURITY DEFINER function whose body names
	// a tenant table runs with its owner's rights (a heuristic: see the
	// package documentation).
	DefinerReadsTenantTable Kind = "security_definer_reads_tenant_table"
)

// Options says what to check. The zero value checks the tables with a
// tenant_id column in the search path's schemas against the setting
// racefree.tenant_id, without role checks.
type Options struct {
	// TenantColumn is the column that makes a table a tenant table.
	// Defaults to DefaultTenantColumn.
	TenantColumn string
	// Setting is the custom setting the policies read the current tenant
	// from (a name with a dot, as PostgreSQL requires of custom settings).
	// Defaults to DefaultSetting.
	Setting string
	// Role is the role the application logs in as. Empty skips the role
	// checks and checks every policy; set, only the policies that apply to
	// the role are checked, as PostgreSQL applies them.
	Role string
	// Schemas are the schemas whose tables are checked. Defaults to the
	// schemas of the connection's search_path (public, unless changed).
	// Views and SECURITY DEFINER functions are looked for in every schema.
	Schemas []string
}

// Report is the verdict of one check. It is clean exactly when Findings is
// empty.
type Report struct {
	Schemas      []string  `json:"schemas"`
	TenantColumn string    `json:"tenant_column"`
	Setting      string    `json:"setting"`
	Role         string    `json:"role"`
	Tables       []string  `json:"tenant_tables"` // the tenant tables checked, quoted
	Findings     []Finding `json:"findings"`
	Warnings     []string  `json:"warnings"`
}

// Finding is one misconfiguration and the SQL that repairs it.
type Finding struct {
	Kind    Kind   `json:"kind"`
	Object  string `json:"object"`  // the table, policy, role, view or function, quoted as in SQL
	Problem string `json:"problem"` // one line
	Fix     string `json:"fix"`     // SQL that fixes it; review before running
}

//go:embed sql/postgres/schemas.sql
var schemasSQL string

//go:embed sql/postgres/tables.sql
var tablesSQL string

//go:embed sql/postgres/policies.sql
var policiesSQL string

//go:embed sql/postgres/views.sql
var viewsSQL string

//go:embed sql/postgres/functions.sql
var functionsSQL string

//go:embed sql/postgres/role.sql
var roleSQL string

// ErrNotPostgres is returned for a SQLite database: row-level security is a
// PostgreSQL feature.
var ErrNotPostgres = errors.New("rls-check: row-level security is a PostgreSQL feature; SQLite has none to check")

// Checker checks one PostgreSQL database, reading only. It is safe for
// concurrent use.
type Checker struct {
	db    *sql.DB
	owned bool
	// Timeout bounds a check, as a statement timeout and a context
	// deadline. Defaults to DefaultTimeout.
	Timeout time.Duration
}

// New returns a Checker on an existing PostgreSQL pool. It does no I/O;
// the caller keeps ownership of db.
func New(db *sql.DB) *Checker { return &Checker{db: db} }

// Open prepares a pool for url (postgres://…) without connecting. A
// sqlite: DSN is ErrNotPostgres.
func Open(url string) (*Checker, error) {
	if strings.HasPrefix(url, racefree.SQLite+":") {
		return nil, ErrNotPostgres
	}
	e, err := postgres.NewEngine(url)
	if err != nil {
		return nil, err
	}
	return &Checker{db: e.SQL(), owned: true}, nil
}

// Close closes the pool if Open made it.
func (c *Checker) Close() error {
	if c.owned {
		return c.db.Close()
	}
	return nil
}

// Check runs the check on db, which must be PostgreSQL (ErrNotPostgres
// otherwise).
func Check(ctx context.Context, db *racefree.DB, opts Options) (*Report, error) {
	if db.Engine() != racefree.Postgres {
		return nil, ErrNotPostgres
	}
	return New(db.SQL()).Check(ctx, opts)
}

// Check reads the catalogue and reports every misconfiguration of row-level
// security on the tenant tables of opts.Schemas. It runs catalogue queries
// only, in one READ ONLY transaction (one snapshot) with SET LOCAL
// statement_timeout, bounded by c.Timeout. Invalid options, a role or a
// schema that does not exist are an *racefree.InputError; a policy
// expression the parser cannot read is an error.
func (c *Checker) Check(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var cat *catalogue
	err := c.readOnly(ctx, timeout, func(tx *sql.Tx) (err error) {
		cat, err = readCatalogue(ctx, tx, opts)
		return err
	})
	if err != nil {
		var ie *racefree.InputError
		if errors.As(err, &ie) {
			return nil, err
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("rls-check: timed out after %s: %w", timeout, err)
		}
		return nil, fmt.Errorf("rls-check: %w", err)
	}
	return cat.judge(opts)
}

// readOnly runs fn in BEGIN READ ONLY at REPEATABLE READ (one snapshot for
// every catalogue query) with statement_timeout set for the transaction
// only (set_config(…, true) is SET LOCAL), and rolls back.
func (c *Checker) readOnly(ctx context.Context, timeout time.Duration, fn func(*sql.Tx) error) error {
	tx, err := c.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return fmt.Errorf("begin read only: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT set_config('statement_timeout', $1, true)`, fmt.Sprintf("%dms", timeout.Milliseconds())); err != nil {
		return fmt.Errorf("statement timeout: %w", err)
	}
	return fn(tx)
}

func (o *Options) normalize() error {
	if o.TenantColumn == "" {
		o.TenantColumn = DefaultTenantColumn
	}
	if o.Setting == "" {
		o.Setting = DefaultSetting
	}
	if err := checkName("tenant-column", o.TenantColumn); err != nil {
		return err
	}
	if err := racefree.CheckText("setting", o.Setting, 200); err != nil {
		return err
	}
	if i := strings.IndexByte(o.Setting, '.'); i <= 0 || i == len(o.Setting)-1 {
		return racefree.Invalid("setting", "%q: a custom setting is prefix.name, as in racefree.tenant_id", o.Setting)
	}
	if o.Role != "" {
		if err := checkName("role", o.Role); err != nil {
			return err
		}
	}
	for _, s := range o.Schemas {
		if err := checkName("schema", s); err != nil {
			return err
		}
	}
	return nil
}

// checkName accepts a name PostgreSQL can store: 1 to 63 bytes of valid
// UTF-8 without NUL or control characters.
func checkName(field, s string) error {
	if err := racefree.CheckText(field, s, 63); err != nil {
		return err
	}
	if _, err := ident.Quote(s); err != nil {
		return racefree.Invalid(field, "%q contains a control character", s)
	}
	return nil
}

type table struct {
	oid                    int64
	schema, name           string
	enabled, forced        bool
	colType, owner         string
	roleHasOwnerPrivileges bool
	policies               []policy
}

type policy struct {
	relid              int64
	name, cmd          string
	permissive         bool
	using, check       sql.NullString
	appliesToRole      bool
	usingExpr, chkExpr *exprFacts
}

type view struct {
	oid          int64
	schema, name string
	kind         string
	options      []string
	reads        []int64
}

type function struct {
	schema, name, args, kind, body string
	config                         []string
}

type catalogue struct {
	schemas    []string
	tables     []*table
	roleSuper  bool
	roleBypass bool
	views      []*view
	functions  []function
}

func readCatalogue(ctx context.Context, tx *sql.Tx, opts Options) (*catalogue, error) {
	cat := &catalogue{}
	rows, err := tx.QueryContext(ctx, schemasSQL, nonNil(opts.Schemas))
	if err != nil {
		return nil, fmt.Errorf("schemas: %w", err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return nil, err
		}
		cat.schemas = append(cat.schemas, s)
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("schemas: %w", err)
	}
	for _, s := range opts.Schemas {
		if !slices.Contains(cat.schemas, s) {
			return nil, racefree.Invalid("schema", "%q does not exist", s)
		}
	}

	if opts.Role != "" {
		err := tx.QueryRowContext(ctx, roleSQL, opts.Role).Scan(&cat.roleSuper, &cat.roleBypass)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, racefree.Invalid("role", "%q does not exist", opts.Role)
		}
		if err != nil {
			return nil, fmt.Errorf("role: %w", err)
		}
	}

	rows, err = tx.QueryContext(ctx, tablesSQL, nonNil(cat.schemas), opts.TenantColumn, opts.Role)
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	byOID := map[int64]*table{}
	for rows.Next() {
		t := &table{}
		if err := rows.Scan(&t.oid, &t.schema, &t.name, &t.enabled, &t.forced, &t.colType, &t.owner, &t.roleHasOwnerPrivileges); err != nil {
			rows.Close()
			return nil, err
		}
		cat.tables = append(cat.tables, t)
		byOID[t.oid] = t
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}

	rows, err = tx.QueryContext(ctx, policiesSQL, nonNil(cat.schemas), opts.Role)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	for rows.Next() {
		var p policy
		if err := rows.Scan(&p.relid, &p.name, &p.cmd, &p.permissive, &p.using, &p.check, &p.appliesToRole); err != nil {
			rows.Close()
			return nil, err
		}
		if t := byOID[p.relid]; t != nil {
			t.policies = append(t.policies, p)
		}
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}

	rows, err = tx.QueryContext(ctx, viewsSQL)
	if err != nil {
		return nil, fmt.Errorf("views: %w", err)
	}
	var last *view
	for rows.Next() {
		var v view
		var rel int64
		var options string
		if err := rows.Scan(&v.oid, &v.schema, &v.name, &v.kind, &options, &rel); err != nil {
			rows.Close()
			return nil, err
		}
		if err := json.Unmarshal([]byte(options), &v.options); err != nil {
			rows.Close()
			return nil, fmt.Errorf("view %s options: %w", v.name, err)
		}
		if byOID[rel] == nil {
			continue
		}
		if last == nil || last.oid != v.oid {
			last = &v
			cat.views = append(cat.views, last)
		}
		last.reads = append(last.reads, rel)
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("views: %w", err)
	}

	rows, err = tx.QueryContext(ctx, functionsSQL)
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	for rows.Next() {
		var f function
		var oid int64
		var args, body sql.NullString
		var config string
		if err := rows.Scan(&oid, &f.schema, &f.name, &args, &f.kind, &body, &config); err != nil {
			rows.Close()
			return nil, err
		}
		if !args.Valid {
			continue // dropped since the snapshot: catalogue functions read the latest catalogue
		}
		f.args, f.body = args.String, body.String
		if err := json.Unmarshal([]byte(config), &f.config); err != nil {
			rows.Close()
			return nil, fmt.Errorf("function %s config: %w", f.name, err)
		}
		f.body = body.String
		cat.functions = append(cat.functions, f)
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	return cat, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func closeRows(rows *sql.Rows) error {
	err := rows.Err()
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	return err
}

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
	if opts.Role != "" && (cat.roleSuper || cat.roleBypass) {
		var what, fix []string
		if cat.roleSuper {
			what, fix = append(what, "a superuser"), append(fix, "NOSUPERUSER")
		}
		if cat.roleBypass {
			what, fix = append(what, "BYPASSRLS"), append(fix, "NOBYPASSRLS")
		}
		rep.add(RoleBypassesRLS, "role "+role,
			fmt.Sprintf("the application role is %s: no policy applies to it, so it sees and changes every tenant's rows", strings.Join(what, " and ")),
			fmt.Sprintf("ALTER ROLE %s %s;", role, strings.Join(fix, " ")))
	}

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
		if t.roleHasOwnerPrivileges {
			if t.owner == opts.Role {
				rep.add(RoleOwnsTable, name, fmt.Sprintf("the application role %s owns the table: it can disable its RLS, and skips the policies unless RLS is forced", role),
					fmt.Sprintf("ALTER TABLE %s OWNER TO migration_owner; -- a role the application does not log in as", name))
			} else {
				rep.add(RoleOwnsTable, name, fmt.Sprintf("the application role %s has the privileges of the owner %s: it can disable the table's RLS, and skips the policies unless RLS is forced", role, quote(t.owner)),
					fmt.Sprintf("REVOKE %s FROM %s;", quote(t.owner), role))
			}
		}
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
	name := regexp.QuoteMeta(t.name)
	quoted := regexp.QuoteMeta(quote(t.name))
	schema := "(?:" + regexp.QuoteMeta(t.schema) + "|" + regexp.QuoteMeta(quote(t.schema)) + `)\s*\.\s*`
	var bare string
	if t.name == strings.ToLower(t.name) && plain(t.name) {
		bare = "(?i:" + name + ")"
	}
	alts := []string{quoted}
	if bare != "" {
		alts = append(alts, bare)
	}
	tbl := "(?:" + strings.Join(alts, "|") + ")"
	const before, after = `(?:^|[^A-Za-z0-9_$."])`, `(?:$|[^A-Za-z0-9_$"])`
	if regexp.MustCompile(before + schema + tbl + after).MatchString(f.body) {
		return true
	}
	// An unqualified name resolves through the search path: the function's
	// own SET search_path, or else (most likely) its own schema.
	if !regexp.MustCompile(before + tbl + after).MatchString(f.body) {
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
