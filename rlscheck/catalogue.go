package rlscheck

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/roles"
	"github.com/racefree/racefree/internal/statement"
)

//go:embed sql/postgres/schemas.sql
var schemasSQL string

//go:embed sql/postgres/pin_search_path.sql
var pinSearchPathSQL string

//go:embed sql/postgres/tables.sql
var tablesSQL string

//go:embed sql/postgres/parents.sql
var parentsSQL string

//go:embed sql/postgres/privileges.sql
var privilegesSQL string

//go:embed sql/postgres/policies.sql
var policiesSQL string

//go:embed sql/postgres/views.sql
var viewsSQL string

//go:embed sql/postgres/rules.sql
var rulesSQL string

//go:embed sql/postgres/functions.sql
var functionsSQL string

//go:embed sql/postgres/policy_roles.sql
var policyRolesSQL string

//go:embed sql/postgres/function_deps.sql
var functionDepsSQL string

//go:embed sql/postgres/relations.sql
var relationsSQL string

//go:embed sql/postgres/view_deps.sql
var viewDepsSQL string

func init() {
	for _, q := range []*string{&schemasSQL, &pinSearchPathSQL, &tablesSQL, &parentsSQL, &privilegesSQL, &policiesSQL, &viewsSQL, &rulesSQL, &functionsSQL, &policyRolesSQL, &functionDepsSQL, &relationsSQL, &viewDepsSQL} {
		*q = query.Embedded(*q)
	}
}

type table struct {
	oid             int64
	schema, name    string
	enabled, forced bool
	colType, owner  string
	// builtin: the tenant column's type is PostgreSQL's own base type;
	// collation: its collation when nondeterministic, else "".
	builtin   bool
	collation string
	policies  []policy
}

// parent is a table that a tenant table inherits from (INHERITS, or a
// partition's parent), at any depth, and that is not itself a tenant
// table of the checked schemas: a query on it reads the children's rows
// under its own policies alone, so it must deny them every row.
type parent struct {
	table
	children []int64 // the tenant tables below it
}

// grant is one grantee's privileges on a tenant table or a parent that
// row-level security does not bind (privileges.sql).
type grant struct {
	table      int64
	grantee    string   // quoted, or PUBLIC
	privileges []string // TRUNCATE, TRIGGER, REFERENCES, in that order
}

type policy struct {
	relid              int64
	name, cmd          string
	permissive         bool
	using, check       sql.NullString
	appliesToRole      bool
	usingExpr, chkExpr *exprFacts
	public             bool    // the policy is for PUBLIC
	roles              []int64 // the other roles it is for, sorted
}

type view struct {
	oid          int64
	schema, name string
	kind         string
	options      []string
	reads        []int64
}

// rule is a rewrite rule on a table (not a view's query): its action runs
// with the table owner's rights.
type rule struct {
	oid                 int64
	schema, table, name string
	own                 bool    // the rule is on a tenant table
	reads               []int64 // the tenant tables its action reaches
}

type function struct {
	oid                            int64
	schema, name, args, kind, body string
	definer, sqlBody, extension    bool
	language                       string
	config                         []string
	deps                           []dep // from pg_depend, for a SQL-standard body
}

// dep is one reference of a function body or a view's query.
type dep struct {
	function bool // oid is a function, else a relation
	oid      int64
}

// relation is a table, view, materialized view or foreign table.
type relation struct {
	oid          int64
	schema, name string
	kind         string
	deps         []dep // a view's or materialized view's references
}

type catalogue struct {
	schemas []string
	tables  []*table
	parents []*parent
	grants  []*grant
	// reach names every tenant table and parent: what a view, a rule or a
	// definer must not reach with its owner's rights.
	reach     map[int64]string
	role      []roles.Finding // how Options.Role escapes row-level security (internal/roles)
	views     []*view
	rules     []*rule
	functions []*function
	relations map[int64]*relation
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
	if err := statement.CloseRows(rows); err != nil {
		return nil, fmt.Errorf("schemas: %w", err)
	}
	for _, s := range opts.Schemas {
		if !slices.Contains(cat.schemas, s) {
			return nil, racefree.Invalid("schema", "%q does not exist", s)
		}
	}

	// Every read from here on prints names with search_path pinned to
	// pg_catalog, so that what is not PostgreSQL's own is qualified
	// whatever the caller's search path.
	if _, err := tx.ExecContext(ctx, pinSearchPathSQL); err != nil {
		return nil, fmt.Errorf("pin search_path: %w", err)
	}
	rows, err = tx.QueryContext(ctx, tablesSQL, nonNil(cat.schemas), opts.TenantColumn)
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	byOID := map[int64]*table{}
	for rows.Next() {
		t := &table{}
		if err := rows.Scan(&t.oid, &t.schema, &t.name, &t.enabled, &t.forced, &t.colType, &t.owner, &t.builtin, &t.collation); err != nil {
			rows.Close()
			return nil, err
		}
		cat.tables = append(cat.tables, t)
		byOID[t.oid] = t
	}
	if err := statement.CloseRows(rows); err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	if err := cat.readParents(ctx, tx, byOID); err != nil {
		return nil, fmt.Errorf("parents: %w", err)
	}
	cat.reach = map[int64]string{}
	var parentOIDs []int64
	for _, t := range cat.tables {
		cat.reach[t.oid] = quote(t.schema) + "." + quote(t.name)
	}
	for _, p := range cat.parents {
		cat.reach[p.oid] = quote(p.schema) + "." + quote(p.name)
		parentOIDs = append(parentOIDs, p.oid)
	}
	policyOf := maps.Clone(byOID)
	for _, p := range cat.parents {
		policyOf[p.oid] = &p.table
	}

	// The role, judged by every role it can become: the tenant tables'
	// owners are the roles it must not be, become or inherit from.
	if opts.Role != "" {
		var owners []string
		for _, t := range cat.tables {
			if !slices.Contains(owners, t.owner) {
				owners = append(owners, t.owner)
			}
		}
		for _, p := range cat.parents {
			if !slices.Contains(owners, p.owner) {
				owners = append(owners, p.owner)
			}
		}
		cat.role, err = roles.Judge(ctx, tx, opts.Role, owners)
		if errors.Is(err, roles.ErrNoRole) {
			return nil, racefree.Invalid("role", "%q does not exist", opts.Role)
		}
		if err != nil {
			return nil, fmt.Errorf("role: %w", err)
		}
	}

	if err := cat.readGrants(ctx, tx, opts.Role); err != nil {
		return nil, fmt.Errorf("privileges: %w", err)
	}

	rows, err = tx.QueryContext(ctx, policiesSQL, nonNil(cat.schemas), opts.Role, nonNil(parentOIDs))
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	for rows.Next() {
		var p policy
		if err := rows.Scan(&p.relid, &p.name, &p.cmd, &p.permissive, &p.using, &p.check, &p.appliesToRole); err != nil {
			rows.Close()
			return nil, err
		}
		if t := policyOf[p.relid]; t != nil {
			t.policies = append(t.policies, p)
		}
	}
	if err := statement.CloseRows(rows); err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}

	rows, err = tx.QueryContext(ctx, policyRolesSQL, nonNil(cat.schemas))
	if err != nil {
		return nil, fmt.Errorf("policy roles: %w", err)
	}
	for rows.Next() {
		var relid int64
		var name, roles string
		var public bool
		if err := rows.Scan(&relid, &name, &public, &roles); err != nil {
			rows.Close()
			return nil, err
		}
		t := byOID[relid]
		if t == nil {
			continue
		}
		for i := range t.policies {
			if p := &t.policies[i]; p.name == name {
				p.public = public
				if err := json.Unmarshal([]byte(roles), &p.roles); err != nil {
					rows.Close()
					return nil, fmt.Errorf("policy %s roles: %w", name, err)
				}
			}
		}
	}
	if err := statement.CloseRows(rows); err != nil {
		return nil, fmt.Errorf("policy roles: %w", err)
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
		if cat.reach[rel] == "" {
			continue
		}
		if last == nil || last.oid != v.oid {
			last = &v
			cat.views = append(cat.views, last)
		}
		last.reads = append(last.reads, rel)
	}
	if err := statement.CloseRows(rows); err != nil {
		return nil, fmt.Errorf("views: %w", err)
	}

	rows, err = tx.QueryContext(ctx, rulesSQL)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	var lastRule *rule
	for rows.Next() {
		var r rule
		var table, rel int64
		if err := rows.Scan(&r.oid, &r.schema, &r.table, &r.name, &table, &rel); err != nil {
			rows.Close()
			return nil, err
		}
		if lastRule == nil || lastRule.oid != r.oid {
			lastRule = &r
			lastRule.own = cat.reach[table] != ""
			cat.rules = append(cat.rules, lastRule)
		}
		if rel != table && cat.reach[rel] != "" && !slices.Contains(lastRule.reads, rel) {
			lastRule.reads = append(lastRule.reads, rel)
		}
	}
	if err := statement.CloseRows(rows); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}

	rows, err = tx.QueryContext(ctx, functionsSQL)
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	byFunc := map[int64]*function{}
	for rows.Next() {
		f := &function{}
		var args, body sql.NullString
		var config string
		if err := rows.Scan(&f.oid, &f.schema, &f.name, &args, &f.kind, &f.definer, &f.language, &f.sqlBody, &body, &config, &f.extension); err != nil {
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
		cat.functions = append(cat.functions, f)
		byFunc[f.oid] = f
	}
	if err := statement.CloseRows(rows); err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}

	err = scanDeps(ctx, tx, functionDepsSQL, func(oid int64, d dep) {
		if f := byFunc[oid]; f != nil {
			f.deps = append(f.deps, d)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("function dependencies: %w", err)
	}

	rows, err = tx.QueryContext(ctx, relationsSQL)
	if err != nil {
		return nil, fmt.Errorf("relations: %w", err)
	}
	cat.relations = map[int64]*relation{}
	for rows.Next() {
		r := &relation{}
		if err := rows.Scan(&r.oid, &r.schema, &r.name, &r.kind); err != nil {
			rows.Close()
			return nil, err
		}
		cat.relations[r.oid] = r
	}
	if err := statement.CloseRows(rows); err != nil {
		return nil, fmt.Errorf("relations: %w", err)
	}
	err = scanDeps(ctx, tx, viewDepsSQL, func(oid int64, d dep) {
		if r := cat.relations[oid]; r != nil {
			r.deps = append(r.deps, d)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("view dependencies: %w", err)
	}
	return cat, nil
}

// readParents reads the parents of the tenant tables (byOID) that are not
// tenant tables themselves, each once, with the tenant tables below it.
func (cat *catalogue) readParents(ctx context.Context, tx *sql.Tx, byOID map[int64]*table) error {
	tenants := make([]int64, 0, len(cat.tables))
	for _, t := range cat.tables {
		tenants = append(tenants, t.oid)
	}
	rows, err := tx.QueryContext(ctx, parentsSQL, tenants)
	if err != nil {
		return err
	}
	var last *parent
	for rows.Next() {
		p := &parent{}
		var child int64
		if err := rows.Scan(&p.oid, &p.schema, &p.name, &p.enabled, &p.forced, &p.owner, &child); err != nil {
			rows.Close()
			return err
		}
		if byOID[p.oid] != nil {
			continue // a tenant table itself, judged as one
		}
		if last == nil || last.oid != p.oid {
			last = p
			cat.parents = append(cat.parents, last)
		}
		last.children = append(last.children, child)
	}
	return statement.CloseRows(rows)
}

// readGrants reads the grants of privileges row-level security does not
// bind on the tenant tables and their parents, one per table and grantee.
// It runs after the role is known to exist (pg_has_role would fail).
func (cat *catalogue) readGrants(ctx context.Context, tx *sql.Tx, role string) error {
	// cat.reach holds the tenant tables and their parents.
	rows, err := tx.QueryContext(ctx, privilegesSQL, slices.Collect(maps.Keys(cat.reach)), role)
	if err != nil {
		return err
	}
	var last *grant
	for rows.Next() {
		var g grant
		var privilege string
		if err := rows.Scan(&g.table, &g.grantee, &privilege); err != nil {
			rows.Close()
			return err
		}
		if last == nil || last.table != g.table || last.grantee != g.grantee {
			last = &g
			cat.grants = append(cat.grants, last)
		}
		last.privileges = append(last.privileges, privilege)
	}
	return statement.CloseRows(rows)
}

// scanDeps runs a query of (object, ref_is_function, ref) rows.
func scanDeps(ctx context.Context, tx *sql.Tx, query string, add func(int64, dep)) error {
	rows, err := tx.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	for rows.Next() {
		var oid int64
		var d dep
		if err := rows.Scan(&oid, &d.function, &d.oid); err != nil {
			rows.Close()
			return err
		}
		add(oid, d)
	}
	return statement.CloseRows(rows)
}

// nonNil returns s, or an empty slice for nil: a nil slice is sent as
// NULL, and x = ANY(NULL) is NULL, not false.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
