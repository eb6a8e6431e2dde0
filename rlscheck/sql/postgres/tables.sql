-- tables: the tenant tables, i.e. every ordinary or partitioned table (and
-- every partition, since a partition queried directly applies its own RLS)
-- in the checked schemas that has the tenant column, with what RLS needs
-- to know about each.
-- $1 schemas (text[]), $2 tenant column, $3 application role ('' for none)
--
-- relrowsecurity / relforcerowsecurity: ENABLE and FORCE ROW LEVEL SECURITY.
-- format_type: the column's type, for the cast in the fix SQL.
-- pg_has_role(…, 'USAGE'): the application role has the owner's privileges
-- (it is the owner, or inherits from it), and PostgreSQL skips RLS for those
-- unless the table FORCEs it. A superuser has every role's privileges, so
-- for one only ownership itself counts (role_bypasses_rls says the rest).
-- CASE, because it evaluates in order: pg_has_role('') would fail.
SELECT c.oid::bigint, n.nspname, c.relname, c.relrowsecurity, c.relforcerowsecurity,
       format_type(a.atttypid, a.atttypmod), pg_get_userbyid(c.relowner),
       CASE WHEN $3 = '' THEN false
            WHEN pg_get_userbyid(c.relowner) = $3 THEN true
            WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = $3) THEN false
            ELSE pg_has_role($3, c.relowner, 'USAGE') END
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'p')
  AND n.nspname = ANY($1::text[])
ORDER BY n.nspname, c.relname
