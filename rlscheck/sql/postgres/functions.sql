-- functions: every SECURITY DEFINER function or procedure outside the system
-- schemas, with its body and search_path, for the caller's name search.
--
-- prosecdef: SECURITY DEFINER, so the body runs with its owner's rights.
-- prokind f/p: functions and procedures (aggregates and window functions
-- have no body of their own).
-- body: prosrc, or for a SQL-standard body (BEGIN ATOMIC, prosqlbody)
-- PostgreSQL's own print of it.
-- proconfig: the function's SET clauses, where its search_path is, as a JSON
-- array.
SELECT p.oid::bigint, n.nspname, p.proname, pg_get_function_identity_arguments(p.oid), p.prokind::text,
       CASE WHEN p.prosqlbody IS NULL THEN p.prosrc ELSE pg_get_function_sqlbody(p.oid) END,
       array_to_json(COALESCE(p.proconfig, '{}'::text[]))::text
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE p.prosecdef
  AND p.prokind IN ('f', 'p')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
ORDER BY n.nspname, p.proname, p.oid
