-- renew: extend a live claim held by (holder, fence) to now + ttl, keeping
-- the fence. A lapsed claim, or one taken over since, changes nothing and
-- returns no row.
-- ?1 ns, ?2 key, ?3 holder, ?4 fence, ?5 ttl ms, ?6 clock
UPDATE racefree_claims AS c SET expires_at = clock.now + ?5
FROM (SELECT COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE c.ns = ?1 AND c.key = ?2 AND c.holder = ?3 AND c.fence = ?4
  AND c.expires_at > clock.now
-- SQLite's RETURNING cannot see the FROM clause: now is expires_at - ttl.
RETURNING holder, fence, claimed_at, expires_at, count, first_seen, last_seen, expires_at - ?5
