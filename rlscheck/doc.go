// Package rlscheck checks a PostgreSQL database's row-level security set-up
// for multi-tenant tables against the live catalogue, and says how to fix
// each mistake in SQL. It is the library behind `racefree rls-check`.
//
// A tenant table is a table (or partition) of the checked schemas with the
// tenant column (tenant_id by default). The set-up it expects is the one
// racefree's tenant package uses: each transaction sets the tenant with
// set_config('racefree.tenant_id', $1, true) (SET LOCAL, so nothing leaks to
// the next user of a pooled connection), and every tenant table has
//
//	ALTER TABLE t ENABLE ROW LEVEL SECURITY;
//	ALTER TABLE t FORCE ROW LEVEL SECURITY;
//	CREATE POLICY tenant ON t
//	  USING (tenant_id = NULLIF(current_setting('racefree.tenant_id', true), '')::uuid)
//	  WITH CHECK (tenant_id = NULLIF(current_setting('racefree.tenant_id', true), '')::uuid);
//
// current_setting(…, true) (missing_ok) reads NULL rather than failing when
// the setting was never set on the connection, and NULLIF(…, <empty string>) turns the
// empty string a connection keeps after an earlier transaction set it into
// NULL too, so a transaction without a tenant matches no row, whatever the
// column's type.
//
// Guarantee: Check reports a Finding of each Kind for each of these, and
// only for these: a tenant table with RLS not enabled, or not forced; a
// command (SELECT, INSERT, UPDATE, DELETE) that no permissive policy
// covers (FOR ALL covers all four); a permissive policy whose expression
// never reads the setting, or is true for every row (USING (true),
// … OR true, … OR 1 = 1); a policy that reads the setting without
// missing_ok, outside NULLIF(…, <empty string>), or inside a COALESCE; with
// Options.Role, the role owning a tenant table or having its owner's
// privileges (INHERIT, through any chain of memberships), the role being a
// superuser or BYPASSRLS, and the role able to SET ROLE, through any chain
// of memberships (INHERIT or not), to a superuser, a BYPASSRLS role or a
// tenant table's owner (the judgement migrate up --app-role and serve make
// too: internal/roles), each naming the path; a view over a
// tenant table (directly or through other views) without security_invoker,
// and a materialized view over one; a SECURITY DEFINER function whose body
// names a tenant table. Each test seeds one mistake into a correct set-up
// and wants exactly its kind, then runs the fixes and wants no finding
// (except where the fix is a choice left to you: the owner a table the
// application role owns should get, what to do with a materialized view).
//
// How policies are judged: their USING and WITH CHECK expressions are read
// with pg_get_expr and parsed with PostgreSQL's own parser (libpg_query, as
// WebAssembly in pure Go; the first parse in a process takes a few
// seconds), not with regular expressions, so spacing, casts, parentheses,
// schema-qualified pg_catalog.current_setting and the case of the setting's
// name do not matter. Every call current_setting('<setting>', …) must have
// a second argument that is the constant true and be, through casts only,
// the first argument of NULLIF(…, <empty string>); a call under a COALESCE is a finding
// whatever the fallback. A setting read through a function of your own
// (tenant_id = app.tenant()) is not seen: such a policy is reported as not
// reading the setting. A permissive policy that does not guard is excused
// when, for each of its commands, a RESTRICTIVE policy that applies to the
// same role holds a correct guard, since restrictive policies are ANDed
// into every statement. With Options.Role, only the policies that apply to
// the role (for PUBLIC or a role whose privileges it has) are checked, as
// PostgreSQL applies them.
//
// SECURITY DEFINER functions are matched by name, a heuristic: a function
// reads a tenant table when its body (prosrc, or PostgreSQL's print of a
// BEGIN ATOMIC body) names the table qualified by its schema, or names it
// unqualified and the function's SET search_path (or, without one, the
// function's own schema) holds the table's schema. A name in a comment or a
// string counts; a table reached through dynamic SQL built from pieces does
// not.
//
// Safety: a check runs catalogue queries only (pg_class, pg_policy,
// pg_roles, pg_proc, pg_rewrite, pg_depend), in one READ ONLY transaction
// at REPEATABLE READ with statement_timeout set for that transaction only
// (set_config(…, true), i.e. SET LOCAL), bounded by Checker.Timeout
// (default 60 s). Names in the fix SQL are quoted by one function.
//
// Failure modes: invalid options, a role or schema that does not exist are
// *racefree.InputError (errors.Is racefree.ErrInvalidInput); a SQLite
// database is ErrNotPostgres; a timeout and database errors are returned
// wrapped. security_invoker needs PostgreSQL 15: on 14 every view over a
// tenant table is reported, and its fix does not run there. The check sees
// the catalogue as it is now; run it in CI after the migrations.
package rlscheck
