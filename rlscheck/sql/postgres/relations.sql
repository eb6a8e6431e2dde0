-- relations: every table, view, materialized view and foreign table outside
-- the system schemas, by schema and name, to resolve the names a function
-- body uses.
SELECT c.oid::bigint, n.nspname, c.relname, c.relkind::text
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\_toast%'
