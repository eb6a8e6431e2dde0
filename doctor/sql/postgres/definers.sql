-- definers: SECURITY DEFINER functions and procedures that the judged
-- role ($1) can run and whose owner row-level security does not bind on
-- racefree's tables (those rls.sql judges): a superuser, a role with
-- BYPASSRLS, or a role with the privileges of a table's owner (a member
-- that inherits them will do) while row-level security is not forced on
-- that table. Such a function runs with its owner's rights, so if it
-- reads racefree's tables it hands its caller every tenant's rows;
-- whether it does is the follower's question (rls-check's, in Go), since
-- a function's body is not in pg_depend. The role can run one when it, or
-- a role it is a member of (a NOINHERIT role can SET ROLE to it), holds
-- EXECUTE on it (PUBLIC holds EXECUTE on every new function), or when the
-- function is a trigger's, which fires whoever writes. One row per such
-- function: the schema of racefree's tables, the function's schema, name
-- and identity arguments, its owner, quoted, and whether it is a
-- procedure. None for a superuser (role-is-superuser says the rest).
WITH tables AS (
    SELECT c.oid, c.relowner, c.relforcerowsecurity
      FROM pg_class c
     WHERE c.relnamespace = (SELECT t.relnamespace FROM pg_class t WHERE t.oid = to_regclass('racefree_schema_migrations'))
       AND c.relname LIKE 'racefree\_%'
       AND c.relname <> 'racefree_schema_migrations'
       AND c.relkind IN ('r', 'p')
)
SELECT (SELECT n.nspname FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace
         WHERE t.oid = to_regclass('racefree_schema_migrations')),
       n.nspname, p.proname, pg_get_function_identity_arguments(p.oid),
       quote_ident(pg_get_userbyid(p.proowner)), p.prokind = 'p'
  FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace
  JOIN pg_roles o ON o.oid = p.proowner
 WHERE p.prosecdef
   AND p.prokind IN ('f', 'p')
   AND n.nspname NOT IN ('pg_catalog', 'information_schema')
   AND (o.rolsuper OR o.rolbypassrls
        OR EXISTS (SELECT 1 FROM tables t
                    WHERE NOT t.relforcerowsecurity AND pg_has_role(p.proowner, t.relowner, 'USAGE')))
   AND NOT (SELECT rolsuper FROM pg_roles WHERE rolname = $1)
   AND (EXISTS (SELECT 1 FROM pg_roles r
                 WHERE pg_has_role($1, r.oid, 'MEMBER') AND has_function_privilege(r.oid, p.oid, 'EXECUTE'))
        OR EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgfoid = p.oid))
 ORDER BY 2, 3, 4
