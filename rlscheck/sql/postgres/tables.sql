-- tables: the tenant tables, i.e. every ordinary or partitioned table (and
-- every partition, since a partition queried directly applies its own RLS)
-- in the checked schemas that has the tenant column, with what RLS needs
-- to know about each.
-- $1 schemas (text[]), $2 tenant column
--
-- relrowsecurity / relforcerowsecurity: ENABLE and FORCE ROW LEVEL SECURITY.
-- format_type: the column's type, for the cast in the fix SQL.
-- The owner: whether the application role is, becomes or inherits it is
-- judged with every other role it can become (internal/roles).
SELECT c.oid::bigint, n.nspname, c.relname, c.relrowsecurity, c.relforcerowsecurity,
       format_type(a.atttypid, a.atttypmod), pg_get_userbyid(c.relowner)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'p')
  AND n.nspname = ANY($1::text[])
ORDER BY n.nspname, c.relname
