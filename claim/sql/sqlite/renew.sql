-- renew: extend a live claim held by (holder, fence) to now + ttl, keeping
-- the fence. A lapsed claim, or one taken over since, changes nothing and
-- returns no row.
--
-- NULLs: a row written before migration 002 has a NULL fence and expiry;
-- c.fence = ?5 and c.expires_at > now are then not true, so it is never
-- renewed (IS would say the same: ?5 is never NULL).
-- ?1 tenant, ?2 ns, ?3 key, ?4 holder, ?5 fence, ?6 ttl ms, ?7 clock
-- SQLite's RETURNING cannot see the FROM clause: now is expires_at - ttl.
-- The arguments reach the WHERE clause through the one-row subquery p, not
-- as parameters compared with indexed columns: SQLite built with STAT4
-- (modernc.org/sqlite is) marks such a parameter as one whose value may
-- change the plan once ANALYZE (or PRAGMA optimize) has written statistics,
-- and then prepares the statement again at every call, binding the same
-- values or not, which made a prepared release 2.2 times slower (122 µs
-- against 55 µs a call, one connection, 20,000 rows).
UPDATE racefree_claims AS c SET expires_at = p.now + ?6
FROM (SELECT ?1 AS tenant, ?2 AS ns, ?3 AS key, ?4 AS holder, ?5 AS fence,
        COALESCE(?7, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS p
WHERE c.tenant = p.tenant AND c.ns = p.ns AND c.key = p.key AND c.holder = p.holder AND c.fence = p.fence
  AND c.expires_at > p.now
RETURNING holder, fence, claimed_at, expires_at, count, first_seen, last_seen, expires_at - ?6
