-- parents: every table a tenant table inherits from (INHERITS, or the
-- table a partition is attached to), at any depth, with what is needed to
-- judge it. A query on such a parent reads its descendants' rows too
-- (unless it says ONLY), under the parent's policies alone: a child's own
-- policies and its FORCE are not applied there. The caller keeps the
-- parents that are not tenant tables of the checked schemas themselves
-- (those are judged as tenant tables).
-- $1 the tenant tables (bigint[])
--
-- Its policies are read with the tenant tables' (policies.sql); the owner
-- is judged with theirs (internal/roles): one who can disable the
-- parent's row-level security reads every child's rows through it.
WITH RECURSIVE up(tenant, parent) AS (
    SELECT i.inhrelid, i.inhparent FROM pg_inherits i WHERE i.inhrelid = ANY($1::bigint[]::oid[])
  UNION
    SELECT up.tenant, i.inhparent FROM up JOIN pg_inherits i ON i.inhrelid = up.parent
)
SELECT p.oid::bigint, n.nspname, p.relname, p.relrowsecurity, p.relforcerowsecurity,
       pg_get_userbyid(p.relowner),
       up.tenant::bigint
FROM up
JOIN pg_class p ON p.oid = up.parent
JOIN pg_namespace n ON n.oid = p.relnamespace
ORDER BY n.nspname, p.relname, up.tenant
