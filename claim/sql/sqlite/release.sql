-- release: end the tenure of (holder, fence) now, so the key is free at
-- once. Releasing a claim that already lapsed without being taken over is a
-- no-op that still matches, which makes a retried release succeed.
--
-- NULLs: a row written before migration 002 has a NULL fence, and
-- c.fence = ?5 is then not true: nobody's release matches it (IS would
-- say the same: ?5 is never NULL). A COALESCE that let a NULL fence match
-- would "release" a tenure that was never issued.
-- ?1 tenant, ?2 ns, ?3 key, ?4 holder, ?5 fence, ?6 clock
-- The arguments reach the WHERE clause through the one-row subquery p, not
-- as parameters compared with indexed columns: SQLite built with STAT4
-- (modernc.org/sqlite is) marks such a parameter as one whose value may
-- change the plan once ANALYZE (or PRAGMA optimize) has written statistics,
-- and then prepares the statement again at every call, binding the same
-- values or not, which made a prepared release 2.2 times slower (122 µs
-- against 55 µs a call, one connection, 20,000 rows).
UPDATE racefree_claims AS c SET expires_at = MIN(c.expires_at, p.now)
FROM (SELECT ?1 AS tenant, ?2 AS ns, ?3 AS key, ?4 AS holder, ?5 AS fence,
        COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS p
WHERE c.tenant = p.tenant AND c.ns = p.ns AND c.key = p.key AND c.holder = p.holder AND c.fence = p.fence
