-- tables: the tenant tables, i.e. every ordinary or partitioned table (and
-- every partition, since a partition queried directly applies its own RLS)
-- in the checked schemas that has the tenant column, with what RLS needs
-- to know about each.
-- $1 schemas (text[]), $2 tenant column
--
-- relrowsecurity / relforcerowsecurity: ENABLE and FORCE ROW LEVEL SECURITY.
-- format_type: the column's type, for the cast in the fix SQL (qualified
-- when it is not PostgreSQL's own: the read pins search_path to pg_catalog),
-- without its length or precision (typmod -1: varchar(8) prints as
-- character varying, character(8) as bpchar), since a cast with one could
-- cut a longer id into another's, and the check proves none.
-- The owner: whether the application role is, becomes or inherits it is
-- judged with every other role it can become (internal/roles).
-- builtin: the column's type is PostgreSQL's own (pg_catalog, a base type,
-- not a domain), so its = and its casts to text are PostgreSQL's; a type of
-- the user's or an extension's (citext) may make distinct ids equal.
-- collation: the column's collation when it is nondeterministic (= then
-- matches ids that differ, in case for one), '' otherwise (deterministic,
-- or a type without collation).
SELECT c.oid::bigint, n.nspname, c.relname, c.relrowsecurity, c.relforcerowsecurity,
       format_type(a.atttypid, -1), pg_get_userbyid(c.relowner),
       t.typnamespace = 'pg_catalog'::regnamespace AND t.typtype = 'b',
       COALESCE((SELECT quote_ident(cn.nspname) || '.' || quote_ident(co.collname)
                 FROM pg_collation co JOIN pg_namespace cn ON cn.oid = co.collnamespace
                 WHERE co.oid = a.attcollation AND NOT co.collisdeterministic), '')
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type t ON t.oid = a.atttypid
WHERE c.relkind IN ('r', 'p')
  AND n.nspname = ANY($1::text[])
ORDER BY n.nspname, c.relname
