package rlscheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/ident"
	"github.com/racefree/racefree/internal/snapshot"
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
	// owner's privileges (INHERIT, through any chain of memberships): it
	// may ALTER or DISABLE the table's RLS, and skips the policies unless
	// the table is FORCEd.
	RoleOwnsTable Kind = "role_owns_table"
	// RoleBypassesRLS: the application role is a superuser or has
	// BYPASSRLS; no policy applies to it, FORCE or not.
	RoleBypassesRLS Kind = "role_bypasses_rls"
	// RoleCanBecomeSuperuser: the application role can SET ROLE to a
	// superuser through its memberships (INHERIT or not: before
	// PostgreSQL 16 every membership permits SET ROLE; from 16, those
	// granted WITH SET TRUE), and then no policy applies to it.
	RoleCanBecomeSuperuser Kind = "role_can_become_superuser"
	// RoleCanBecomeBypassRLS: the application role can SET ROLE to a role
	// with BYPASSRLS through its memberships, and then no policy applies.
	RoleCanBecomeBypassRLS Kind = "role_can_become_bypassrls"
	// RoleCanBecomeOwner: the application role can SET ROLE to the owner
	// of tenant tables through memberships that do not pass the owner's
	// privileges on (NOINHERIT), and then disable their RLS. A role with
	// the owner's privileges is RoleOwnsTable, per table.
	RoleCanBecomeOwner Kind = "role_can_become_owner"
	// RoleCanCreateRoles: the application role has CREATEROLE, or can SET
	// ROLE to a role that has it through its memberships. Before
	// PostgreSQL 16 it can grant itself any role but a superuser (a
	// tenant table's owner, a BYPASSRLS role) and act as it; from 16 it
	// administers the roles it created, which are not judged: row-level
	// security is not proven to bind it.
	RoleCanCreateRoles Kind = "role_can_create_roles"
	// RoleReachesServerFiles: the application role has the rights of
	// pg_read_server_files, pg_write_server_files or
	// pg_execute_server_program, itself or through its memberships (SET
	// ROLE or INHERIT): the server's files hold every tenant's rows, and
	// no policy guards them.
	RoleReachesServerFiles Kind = "role_reaches_server_files"
	// ViewNotInvoker: a view over a tenant table (directly or through other
	// views) without security_invoker reads the table with its owner's
	// rights, so the owner's RLS exemption applies to whoever queries it.
	ViewNotInvoker Kind = "view_without_security_invoker"
	// RuleReachesTenantTable: a rewrite rule on a table (CREATE RULE … ON
	// INSERT/UPDATE/DELETE TO t DO …) whose action reaches a tenant table,
	// directly or through views and other tables' rules, or that is on a
	// tenant table itself (its own table's reads cannot be told apart from
	// NEW and OLD). The action runs with the rights of the table's owner,
	// not of whoever fires it, so the owner's RLS exemption applies.
	RuleReachesTenantTable Kind = "rule_reaches_tenant_table"
	// MaterializedView: a materialized view over a tenant table stores
	// every tenant's rows and has no row-level security of its own.
	MaterializedView Kind = "materialized_view_over_tenant_table"
	// DefinerReadsTenantTable: a SECURITY DEFINER function that reaches a
	// tenant table, directly or through the functions it calls and the
	// views it reads, at any depth; all of it runs with the function
	// owner's rights. The problem names the path.
	DefinerReadsTenantTable Kind = "security_definer_reads_tenant_table"
	// PolicyNotProven: a permissive policy the check cannot prove admits
	// only rows whose tenant column equals the guarded setting (every OR
	// arm holding tenant_column = NULLIF(current_setting(…, true), '')),
	// and no restrictive policy that applies to every role it applies to
	// proves it instead; every policy on a table whose tenant column's =
	// is not proven an equality of ids (a nondeterministic collation, a
	// type that is not PostgreSQL's own), the problem saying which.
	// Reported when no more specific policy kind explains it; the problem
	// carries the policy's text.
	PolicyNotProven Kind = "policy_not_proven"
	// DefinerNotFollowed: a SECURITY DEFINER function that calls, directly
	// or at any depth, a body the check cannot follow: SQL built at run
	// time (EXECUTE), a language it cannot read (anything but SQL and
	// PL/pgSQL, except an extension's C code), a body that does not parse.
	// What runs there is not proven to stay off tenant tables.
	DefinerNotFollowed Kind = "security_definer_not_followed"
	// ParentNotDenied: a table that a tenant table inherits from (INHERITS,
	// or a partition's parent), at any depth, that is not itself a tenant
	// table of the checked schemas and does not deny the application every
	// row. A query on a parent reads its children's rows too, under the
	// parent's policies alone (the child's are not applied there), and the
	// parent has no tenant column to prove a policy against: it must have
	// row-level security enabled and forced and no permissive policy that
	// applies to the role. Its owner is judged as a tenant table's is.
	ParentNotDenied Kind = "inheritance_parent_not_denied"
	// PrivilegeEscapesRLS: a role (with Options.Role, one the application
	// role is a member of, or PUBLIC; without, any role but the owner)
	// holds, on a tenant table or a parent of one, a privilege that
	// row-level security does not bind: TRUNCATE (no policy applies to
	// it: it empties every tenant's rows), TRIGGER (a trigger of its own
	// runs on every tenant's rows as other sessions write them) or
	// REFERENCES (a foreign key to the table checks keys past the
	// policies: it tells which exist). GRANT ALL grants all three.
	PrivilegeEscapesRLS Kind = "privilege_escapes_rls"
	// NoTenantTable: no table of the checked schemas has the tenant
	// column, so nothing was checked (a misspelt column or schema).
	NoTenantTable Kind = "no_tenant_table"
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
	// checks and checks every policy; set, the role is judged by every
	// role it can become (superuser, BYPASSRLS, a tenant table's owner;
	// internal/roles), and only the policies that apply to the role or to
	// a role it is a member of are checked.
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
	// Warnings are notes that prove nothing either way. No check adds one
	// today (a tenant column no table has is the finding NoTenantTable);
	// the list stays in the JSON, empty.
	Warnings []string `json:"warnings"`
}

// Finding is one misconfiguration and the SQL that repairs it.
type Finding struct {
	Kind    Kind   `json:"kind"`
	Object  string `json:"object"`  // the table, policy, role, view or function, quoted as in SQL
	Problem string `json:"problem"` // one line
	Fix     string `json:"fix"`     // SQL that fixes it; review before running
}

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
// statement_timeout and, once the schemas are read, SET LOCAL search_path
// pg_catalog (so the verdict does not depend on the caller's), bounded by
// c.Timeout. Invalid options, a role or a
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

// readOnly runs fn in one read-only snapshot (one for every catalogue
// query) bounded by statement_timeout ([snapshot.ReadOnly]).
func (c *Checker) readOnly(ctx context.Context, timeout time.Duration, fn func(*sql.Tx) error) error {
	return snapshot.ReadOnly(ctx, c.db, timeout, fn)
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
