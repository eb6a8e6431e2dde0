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
// Guarantee: "no findings" means proven, as far as the catalogue goes:
// what the check cannot prove safe is a finding, never a pass. A Report is
// clean only when every tenant table has RLS enabled and forced, every
// command has a permissive policy, and every permissive policy that
// applies is proven to admit only the current tenant's rows or is
// excused by a restrictive policy that is; no SECURITY DEFINER function
// reaches a tenant table or a body the check cannot follow; and, with
// Options.Role, the role neither owns a tenant table nor has its owner's
// privileges (INHERIT, through any chain of memberships), is neither a
// superuser nor BYPASSRLS, and cannot SET ROLE, through any chain of
// memberships (INHERIT or not), to a superuser, a BYPASSRLS role or a
// tenant table's owner (the judgement migrate up --app-role and serve
// make too: internal/roles), each finding naming the path.
//
// What a policy must prove: every row it admits has
// tenant_column = NULLIF(current_setting('<setting>', true), <empty string>), which
// with the setting unset or empty matches nothing. The expression
// (parsed, casts to PostgreSQL's own boolean and parentheses looked
// through; a cast to a type of the user's, even one named bool or
// "boolean", is not) is read in disjunctive form: every OR arm must have
// that equality as a conjunct (an AND may hold anything else beside it:
// it only narrows). The
// equality is the operator = exactly, either way round, between the
// column (bare, or cast to text or varchar, or, for an integer column, to
// another integer type or numeric: casts that never make two ids equal)
// and the setting read with missing_ok true inside NULLIF(…, <empty string>), cast to
// any type without a length or precision (not "char" or name, which cut),
// alone or in a sub-select of its own, (SELECT NULLIF(…)). Anything else
// is not proven: <>, IS NOT DISTINCT FROM (NULL matches NULL), LIKE, IN,
// = ANY, NOT, CASE, a function around the column or the setting, a
// sub-select with FROM, a condition true for every row (OR true,
// OR id > 0), the setting tested for NULL, the setting compared with
// another column. USING is judged for the rows SELECT, UPDATE and DELETE
// see; WITH CHECK, or USING where a policy has none (as PostgreSQL
// does), for the rows INSERT and UPDATE write; a policy without either
// admits no row there. What = means is read from the catalogue, not
// taken from how it prints: the tenant column must be of PostgreSQL's own
// type (a base type of pg_catalog; not a domain, not an extension's such
// as citext, whose = ignores case) with a deterministic collation or none
// (pg_attribute.attcollation, pg_collation.collisdeterministic: under a
// nondeterministic one = matches 'acme' and 'ACME'), or no policy on the
// table is proven, permissive or restrictive (policy_not_proven, saying
// why). And the catalogue is read with search_path pinned to pg_catalog
// (SET LOCAL, after the one read of the caller's search path), so that
// pg_get_expr qualifies every operator, function and type that is not
// PostgreSQL's own (OPERATOR(s.=), s.citext), which the check does not
// prove: the verdict does not depend on the checking session's
// search_path. PostgreSQL admits (OR of the applicable permissive
// policies) AND (AND of the applicable restrictive ones), so an unproven
// permissive policy is excused, per command and use, only by a
// restrictive policy that covers the command, proves the equality in the
// expression PostgreSQL applies there, and applies to every role the
// permissive one applies to: without Options.Role (the check does not
// know which role the application uses), one for PUBLIC or for every role
// the permissive policy names; with it, one that applies to the role.
//
// What a rewrite rule on a table (CREATE RULE … ON INSERT/UPDATE/DELETE TO
// t DO …; a view's own rule is its query) must not reach: its action runs
// with the rights of t's owner, not of whoever fires it, like a view
// without security_invoker. A rule is reported when its action reads or
// writes a tenant table, directly, through the views it reads or through
// the rules of the tables it writes (pg_depend, exact), and when it is on a
// tenant table itself, since the table's own reads cannot be told apart
// from NEW and OLD there. The fix drops it: a trigger does the same work
// with the rights of whoever writes.
//
// What a SECURITY DEFINER function must not reach: a tenant table, at any
// depth, through the functions it calls (whatever their own security:
// inside a definer everything runs with its owner's rights) and the views
// and materialized views it reads (security_invoker or not, a view runs as
// the definer there) and what those call and read. A SQL-standard body
// (BEGIN ATOMIC, RETURN) and a view are followed by pg_depend, which is
// exact; a SQL body kept as text and a PL/pgSQL body are parsed with
// PostgreSQL's own parsers, and the relations and functions they name are
// followed (a function by name, every overload; an unqualified name in the
// schemas of the function's SET search_path, or, without one, in every
// schema, since the caller's search path applies). A body it cannot
// follow is a finding of its own: EXECUTE of SQL built at run time, a
// language other than SQL and PL/pgSQL (C and internal functions that
// belong to an extension are taken as reading no table), a body that does
// not parse.
//
// What it does not prove: that the application sets the setting to the
// right tenant (racefree's tenant package does that), and what it cannot
// see in the catalogue: functions reached through operators, casts,
// triggers, defaults or
// constraints of what a definer writes, an extension's compiled code, and
// the owner's own rights (a definer is reported whoever owns it). It reads
// the catalogue as it is now: run it in CI after the migrations.
//
// The kinds (stable strings; Kind's constants say more): rls_disabled,
// rls_not_forced, policy_missing, policy_always_true (a permissive policy
// true for every row: USING (true), … OR true, … OR 1 = 1),
// policy_without_setting (one that never reads the setting),
// policy_not_proven (any other permissive policy not proven; the problem
// carries its text), policy_setting_without_missing_ok,
// policy_setting_without_nullif, policy_setting_coalesced (the setting read
// outside the guarded form, reported for every applicable policy,
// restrictive ones too, and standing in for policy_not_proven on a
// permissive one they explain), role_owns_table, role_bypasses_rls,
// role_can_become_superuser, role_can_become_bypassrls,
// role_can_become_owner, role_can_create_roles, role_reaches_server_files
// (with Options.Role), view_without_security_invoker,
// materialized_view_over_tenant_table, rule_reaches_tenant_table (a rewrite
// rule on a table, whose action runs with the table owner's rights, that
// reaches a tenant table or is on one), security_definer_reads_tenant_table
// (the problem names the path), security_definer_not_followed,
// inheritance_parent_not_denied (a table a tenant table inherits from, at
// any depth, that is not a tenant table itself and does not deny the
// application every row: a query on it reads the children's rows under
// its own policies alone), privilege_escapes_rls (a grant of TRUNCATE,
// TRIGGER or REFERENCES on a tenant table or a parent, which no policy
// binds), and no_tenant_table (no table of the checked schemas has the tenant column:
// nothing was checked). racefree rls-check exits 0 with no finding, 1 with
// findings, 2 when it could not check (bad options, an unknown role or
// schema, SQLite, no server, a timeout). Each test seeds one mistake into
// a correct set-up and wants exactly its kind, then runs the fixes and
// wants no finding (except where the fix is a choice left to you: the
// owner a table the application role owns should get, what to do with a
// materialized view).
//
// How policies are read: their USING and WITH CHECK expressions are read
// with pg_get_expr and parsed with PostgreSQL's own parser (libpg_query, as
// WebAssembly in pure Go; the first parse in a process takes a few
// seconds), not with regular expressions, so spacing, casts, parentheses,
// schema-qualified pg_catalog.current_setting and the case of the setting's
// name do not matter. A setting read through a function of your own
// (tenant_id = app.tenant()) is not seen: such a policy is reported as not
// reading the setting. With Options.Role, only the policies that apply to
// the role (for PUBLIC or a role whose privileges it has) are checked, as
// PostgreSQL applies them.
//
// Safety: a check runs catalogue queries only (pg_class, pg_policy,
// pg_roles, pg_proc, pg_language, pg_rewrite, pg_depend), in one READ ONLY transaction
// at REPEATABLE READ with statement_timeout set for that transaction only
// (set_config(…, true), i.e. SET LOCAL), and search_path too, to
// pg_catalog after the schemas are read, bounded by Checker.Timeout
// (default 60 s). Names in the fix SQL are quoted by one function.
//
// Failure modes: invalid options, a role or schema that does not exist are
// *racefree.InputError (errors.Is racefree.ErrInvalidInput); a SQLite
// database is ErrNotPostgres; a timeout and database errors are returned
// wrapped. security_invoker needs PostgreSQL 15: on 14 every view over a
// tenant table is reported, and its fix does not run there.
package rlscheck
