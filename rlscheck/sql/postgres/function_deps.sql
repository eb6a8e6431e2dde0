-- function_deps: what each function with a SQL-standard body (BEGIN ATOMIC
-- or RETURN) references, as PostgreSQL recorded it when it parsed the body:
-- exact, where reading the text would be a guess.
--
-- ref_is_function: refobjid is a function (pg_proc), else a relation
-- (pg_class: a table, view, materialized view…). A column's dependency
-- names its table too.
SELECT DISTINCT d.objid::bigint, d.refclassid = 'pg_proc'::regclass, d.refobjid::bigint
FROM pg_depend d
JOIN pg_proc p ON p.oid = d.objid
WHERE d.classid = 'pg_proc'::regclass
  AND d.deptype = 'n'
  AND p.prosqlbody IS NOT NULL
  AND d.refclassid IN ('pg_class'::regclass, 'pg_proc'::regclass)
