-- schemas: which of the requested schemas exist; with none requested, the
-- schemas of the connection's search_path that exist (current_schemas(false)
-- leaves out pg_catalog and the missing "$user"), public by default.
-- $1 schemas (text[], empty for the search path)
SELECT s FROM unnest(CASE WHEN cardinality($1::text[]) = 0 THEN current_schemas(false) ELSE $1::text[] END) s
WHERE EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = s)
