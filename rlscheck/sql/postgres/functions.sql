-- functions: every function and procedure outside the system schemas, for
-- following what a SECURITY DEFINER one calls and reads (the SECURITY
-- DEFINER ones are where the search starts; what they call runs with their
-- owner's rights whatever its own security).
--
-- prosecdef: SECURITY DEFINER, so the body runs with its owner's rights.
-- prokind f/p: functions and procedures (aggregates and window functions
-- have no body of their own).
-- sql_body: a SQL-standard body (BEGIN ATOMIC or RETURN), whose references
-- PostgreSQL records in pg_depend (function_deps.sql).
-- body: for PL/pgSQL the whole CREATE FUNCTION (the PL/pgSQL parser wants
-- it), otherwise prosrc (a SQL body's text, or a C symbol).
-- proconfig: the function's SET clauses, where its search_path is, as a JSON
-- array.
-- extension: the function belongs to an extension (pg_depend deptype e).
SELECT p.oid::bigint, n.nspname, p.proname, pg_get_function_identity_arguments(p.oid), p.prokind::text,
       p.prosecdef, l.lanname, p.prosqlbody IS NOT NULL,
       CASE WHEN l.lanname = 'plpgsql' THEN pg_get_functiondef(p.oid) ELSE p.prosrc END,
       array_to_json(COALESCE(p.proconfig, '{}'::text[]))::text,
       EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
WHERE p.prokind IN ('f', 'p')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
ORDER BY n.nspname, p.proname, p.oid
