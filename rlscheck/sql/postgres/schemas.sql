-- schemas: which of the requested schemas exist; with none requested, the
-- schemas of the connection's search_path that exist (current_schemas(false)
-- leaves out pg_catalog and the missing "$user"), public by default.
-- $1 schemas (text[], empty for the search path)
--
-- The one read that runs with the caller's search_path (pin_search_path.sql
-- follows it), so every name in it is qualified with pg_catalog: an
-- operator, function or relation of the caller's found first cannot stand
-- in for PostgreSQL's own.
SELECT s FROM pg_catalog.unnest(CASE WHEN pg_catalog.cardinality($1::pg_catalog.text[]) OPERATOR(pg_catalog.=) 0
                                     THEN pg_catalog.current_schemas(false) ELSE $1::pg_catalog.text[] END) s
WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) s)
