-- views: views and materialized views through which the judged role ($1)
-- reads racefree's tables (those rls.sql judges) as a role row-level
-- security does not bind. A view reads its tables with its owner's
-- privileges (unless security_invoker, PostgreSQL 15 on), and a
-- materialized view holds what its owner read: when that owner is a
-- superuser, has BYPASSRLS, or has the privileges of the table's owner (is
-- it, or a member that inherits them) while row-level security is not
-- forced on it, the view holds every tenant's rows. A view over such
-- a view counts too: the judged role reads every tenant's rows through
-- any view above one, whatever the views above it are. One row per such
-- view that the judged role, or a role it is a member of (a NOINHERIT
-- role can SET ROLE to it), can SELECT (a column will do) on the way down:
-- the view that escapes, the tables it reads, its kind, its owner, and
-- its fix: security_invoker for a view on PostgreSQL 15 on, none for the
-- others (revoke the role's SELECT, or give the view an owner row-level
-- security binds).
WITH RECURSIVE tables AS (
    SELECT c.oid, c.relname, c.relowner, c.relforcerowsecurity
      FROM pg_class c
     WHERE c.relnamespace = (SELECT t.relnamespace FROM pg_class t WHERE t.oid = to_regclass('racefree_schema_migrations'))
       AND c.relname LIKE 'racefree\_%'
       AND c.relname <> 'racefree_schema_migrations'
       AND c.relkind IN ('r', 'p')
), reads AS ( -- each view or materialized view, and each relation it reads
    SELECT DISTINCT r.ev_class AS view, d.refobjid AS relation
      FROM pg_rewrite r
      JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                      AND d.refclassid = 'pg_class'::regclass AND d.refobjid <> r.ev_class
), escapes AS ( -- the views that read a racefree table as a role it does not bind
    SELECT v.oid, string_agg(t.relname, ', ' ORDER BY t.relname) AS tables
      FROM reads
      JOIN tables t ON t.oid = reads.relation
      JOIN pg_class v ON v.oid = reads.view
      JOIN pg_roles o ON o.oid = v.relowner
     WHERE v.relkind IN ('v', 'm')
       AND (o.rolsuper OR o.rolbypassrls OR (pg_has_role(v.relowner, t.relowner, 'USAGE') AND NOT t.relforcerowsecurity))
       AND NOT (v.relkind = 'v' AND EXISTS (
               SELECT 1 FROM unnest(v.reloptions) opt
                WHERE split_part(opt, '=', 1) = 'security_invoker' AND split_part(opt, '=', 2)::boolean))
     GROUP BY v.oid
), above (view, escape) AS ( -- every view from which one reads an escape
    SELECT e.oid, e.oid FROM escapes e
    UNION
    SELECT reads.view, above.escape
      FROM above
      JOIN reads ON reads.relation = above.view
      JOIN pg_class v ON v.oid = reads.view AND v.relkind IN ('v', 'm')
)
SELECT e.oid::regclass::text, e.tables,
       CASE v.relkind WHEN 'm' THEN 'materialized view' ELSE 'view' END,
       quote_ident(pg_get_userbyid(v.relowner)),
       CASE WHEN v.relkind = 'v' AND current_setting('server_version_num')::int >= 150000
            THEN format('ALTER VIEW %s SET (security_invoker = true);', e.oid::regclass) ELSE '' END
  FROM escapes e
  JOIN pg_class v ON v.oid = e.oid
 WHERE NOT (SELECT rolsuper FROM pg_roles WHERE rolname = $1)
   AND EXISTS (SELECT 1 FROM above a, pg_roles r
                WHERE a.escape = e.oid AND pg_has_role($1, r.oid, 'MEMBER')
                  AND has_any_column_privilege(r.oid, a.view, 'SELECT'))
 ORDER BY 1
