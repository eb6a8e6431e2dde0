-- views: every view and materialized view, in any schema but the system's,
-- with each relation it reads directly or through other views.
--
-- A view's query is stored as a rewrite rule; pg_depend records each
-- relation the rule references (refobjid), which is exact where a text
-- search of the definition would not be. The recursive step follows a view
-- into the views it reads, because a view that is not security_invoker runs
-- every view below it with its owner's rights too.
-- reloptions: where security_invoker is set (PostgreSQL 15 and later), as a
-- JSON array, which database/sql scans as text.
WITH RECURSIVE reads(view, rel) AS (
    SELECT DISTINCT r.ev_class, d.refobjid
    FROM pg_rewrite r
    JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                    AND d.refclassid = 'pg_class'::regclass AND d.refobjid <> r.ev_class
  UNION
    SELECT reads.view, d.refobjid
    FROM reads
    JOIN pg_rewrite r ON r.ev_class = reads.rel
    JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                    AND d.refclassid = 'pg_class'::regclass AND d.refobjid <> r.ev_class
)
SELECT v.oid::bigint, n.nspname, v.relname, v.relkind::text, array_to_json(COALESCE(v.reloptions, '{}'::text[]))::text, reads.rel::bigint
FROM reads
JOIN pg_class v ON v.oid = reads.view
JOIN pg_namespace n ON n.oid = v.relnamespace
WHERE v.relkind IN ('v', 'm')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
ORDER BY n.nspname, v.relname, reads.rel
