-- renew: extend a live claim held by (holder, fence) to now + ttl, keeping
-- the fence. A lapsed claim, or one taken over since, changes nothing and
-- returns no row.
--
-- NULLs: a row written before migration 002 has a NULL fence and expiry;
-- c.fence = $5 and c.expires_at > now are then not true, so it is never
-- renewed (IS NOT DISTINCT FROM would say the same: $5 is never NULL).
-- $1 tenant, $2 ns, $3 key, $4 holder, $5 fence, $6 ttl ms, $7 clock
UPDATE racefree_claims AS c SET expires_at = clock.now + $6::bigint
FROM (SELECT COALESCE($7::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
WHERE c.tenant = $1 AND c.ns = $2 AND c.key = $3 AND c.holder = $4 AND c.fence = $5
  AND c.expires_at > clock.now
RETURNING c.holder, c.fence, c.claimed_at, c.expires_at, c.count, c.first_seen, c.last_seen, clock.now
