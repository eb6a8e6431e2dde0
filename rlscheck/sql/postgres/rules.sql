-- rules: every rewrite rule on a relation that is not a view (an ordinary,
-- partitioned or foreign table), in any schema but the system's, with its
-- own table and each relation its action reads or writes, directly or
-- through the views and the other tables' rules it reaches. A rule's
-- action runs with the rights of its table's owner, not of whoever fires
-- it, so the owner's RLS exemption applies to it, as to a view without
-- security_invoker (views.sql holds the views' own rules).
--
-- pg_depend records each relation a rule's action references (refobjid),
-- exact where a text search of pg_get_ruledef would not be. Its own table
-- is always there (NEW and OLD, and the rule's link to it), so it cannot
-- tell whether the action reads that table: a rule on a tenant table is
-- reported for that alone. One row per rule and relation reached (the
-- rule's own table for one that reaches nothing else). The
-- recursive step follows what is reached into the rules on it: a view's
-- query, and a table's own rules, which a write there fires with that
-- table's owner's rights.
WITH RECURSIVE reads(rule, rel) AS (
    SELECT DISTINCT r.oid, d.refobjid
    FROM pg_rewrite r
    JOIN pg_class c ON c.oid = r.ev_class
    JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                    AND d.refclassid = 'pg_class'::regclass AND d.refobjid <> r.ev_class
    WHERE c.relkind NOT IN ('v', 'm')
  UNION
    SELECT reads.rule, d.refobjid
    FROM reads
    JOIN pg_rewrite r ON r.ev_class = reads.rel
    JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                    AND d.refclassid = 'pg_class'::regclass AND d.refobjid <> r.ev_class
)
SELECT r.oid::bigint, n.nspname, c.relname, r.rulename, c.oid::bigint, COALESCE(reads.rel, c.oid)::bigint
FROM pg_rewrite r
JOIN pg_class c ON c.oid = r.ev_class
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN reads ON reads.rule = r.oid
WHERE c.relkind NOT IN ('v', 'm')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
ORDER BY n.nspname, c.relname, r.rulename, 6
