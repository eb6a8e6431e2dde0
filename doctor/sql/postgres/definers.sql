-- definers: SECURITY DEFINER functions and procedures that the judged
-- role ($1) can run, and whose bodies may run as a role row-level
-- security does not bind on racefree's tables (those rls.sql judges): a
-- superuser, a role with BYPASSRLS, or a role with the privileges of a
-- table's owner (a member that inherits them will do) while row-level
-- security is not forced on that table. A definer runs with its owner's
-- rights, and so does every function it calls but the definers among
-- them, which run with theirs: a body runs as its owner, or as the owner
-- of a definer that owner can run, at any depth. Whether a body reads
-- racefree's tables, and through which functions, is the follower's
-- question (rls-check's, in Go), since a function's body is not in
-- pg_depend. The role can run a function when it, or a role it is a
-- member of (a NOINHERIT role can SET ROLE to it), holds EXECUTE on it
-- (PUBLIC holds EXECUTE on every new function), or when the function is
-- a trigger's, which fires whoever writes. One row per function the role
-- can run whose owner row-level security does not bind, or whose owner
-- can run, at any depth, a definer whose owner it does not bind: the
-- schema of racefree's tables; the function, quoted as rls-check names
-- it; its owner, quoted; whether row-level security binds its owner; and
-- the definers, so quoted, of unbound owners its owner can run. None for
-- a superuser (role-is-superuser says the rest).
WITH RECURSIVE tables AS (
    SELECT c.oid, c.relowner, c.relforcerowsecurity
      FROM pg_class c
     WHERE c.relnamespace = (SELECT t.relnamespace FROM pg_class t WHERE t.oid = to_regclass('racefree_schema_migrations'))
       AND c.relname LIKE 'racefree\_%'
       AND c.relname <> 'racefree_schema_migrations'
       AND c.relkind IN ('r', 'p')
), definers AS (
    SELECT p.oid, p.proowner,
           '"' || replace(n.nspname, '"', '""') || '"."' || replace(p.proname, '"', '""') || '"('
               || pg_get_function_identity_arguments(p.oid) || ')' AS name,
           o.rolsuper OR o.rolbypassrls
               OR EXISTS (SELECT 1 FROM tables t
                           WHERE NOT t.relforcerowsecurity AND pg_has_role(p.proowner, t.relowner, 'USAGE')) AS unbound
      FROM pg_proc p
      JOIN pg_namespace n ON n.oid = p.pronamespace
      JOIN pg_roles o ON o.oid = p.proowner
     WHERE p.prosecdef
       AND p.prokind IN ('f', 'p')
       AND n.nspname NOT IN ('pg_catalog', 'information_schema')
), runs (start, owner) AS ( -- each definer, and every role its body may run as
    SELECT d.oid, d.proowner FROM definers d
    UNION
    SELECT r.start, d.proowner
      FROM runs r
      JOIN definers d ON has_function_privilege(r.owner, d.oid, 'EXECUTE')
), via AS ( -- each definer, and the definers of unbound owners its body may call
    SELECT r.start AS oid, array_agg(DISTINCT d.name ORDER BY d.name) AS names
      FROM runs r
      JOIN definers d ON d.unbound AND d.oid <> r.start AND has_function_privilege(r.owner, d.oid, 'EXECUTE')
     GROUP BY r.start
)
SELECT (SELECT n.nspname FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace
         WHERE t.oid = to_regclass('racefree_schema_migrations')),
       d.name, quote_ident(pg_get_userbyid(d.proowner)), d.unbound, COALESCE(to_json(v.names), '[]')::text
  FROM definers d
  LEFT JOIN via v ON v.oid = d.oid
 WHERE (d.unbound OR v.names IS NOT NULL)
   AND NOT (SELECT rolsuper FROM pg_roles WHERE rolname = $1)
   AND (EXISTS (SELECT 1 FROM pg_roles r
                 WHERE pg_has_role($1, r.oid, 'MEMBER') AND has_function_privilege(r.oid, d.oid, 'EXECUTE'))
        OR EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgfoid = d.oid))
 ORDER BY 2
