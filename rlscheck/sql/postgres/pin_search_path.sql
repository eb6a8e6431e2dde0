-- pin_search_path: from here to the end of the check's transaction, the
-- search path is pg_catalog (then pg_temp, searched last rather than first),
-- so that pg_get_expr and format_type qualify every operator, function and
-- type that is not PostgreSQL's own: an extension's = prints as
-- OPERATOR(schema.=) whatever the checking session's search_path, and the
-- verdict cannot depend on it. Run after schemas.sql, which reads the
-- caller's search path. set_config(…, true) is SET LOCAL: a pooled
-- connection goes back with its own.
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)
