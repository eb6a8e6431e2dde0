-- renew: extend a live claim held by (holder, fence) to now + ttl, keeping
-- the fence. A lapsed claim, or one taken over since, changes nothing and
-- returns no row.
--
-- NULLs: a row written before migration 002 has a NULL fence and expiry;
-- c.fence = ?5 and c.expires_at > now are then not true, so it is never
-- renewed (IS would say the same: ?5 is never NULL).
-- ?1 tenant, ?2 ns, ?3 key, ?4 holder, ?5 fence, ?6 ttl ms, ?7 clock
UPDATE racefree_claims AS c SET expires_at = clock.now + ?6
FROM (SELECT COALESCE(?7, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE c.tenant = ?1 AND c.ns = ?2 AND c.key = ?3 AND c.holder = ?4 AND c.fence = ?5
  AND c.expires_at > clock.now
-- SQLite's RETURNING cannot see the FROM clause: now is expires_at - ttl.
RETURNING holder, fence, claimed_at, expires_at, count, first_seen, last_seen, expires_at - ?6
