-- view_deps: what each view and materialized view reads and calls directly,
-- from the dependencies of its rewrite rule (its query), to follow a
-- SECURITY DEFINER function through views: inside one a view runs with the
-- definer's rights even when it is security_invoker.
--
-- ref_is_function: refobjid is a function (pg_proc), else a relation.
SELECT DISTINCT r.ev_class::bigint, d.refclassid = 'pg_proc'::regclass, d.refobjid::bigint
FROM pg_rewrite r
JOIN pg_class v ON v.oid = r.ev_class
JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
WHERE v.relkind IN ('v', 'm')
  AND d.refclassid IN ('pg_class'::regclass, 'pg_proc'::regclass)
  AND NOT (d.refclassid = 'pg_class'::regclass AND d.refobjid = r.ev_class)
