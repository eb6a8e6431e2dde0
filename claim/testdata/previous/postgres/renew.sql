-- renew: extend a live claim held by (holder, fence) to now + ttl, keeping
-- the fence. A lapsed claim, or one taken over since, changes nothing and
-- returns no row.
-- $1 ns, $2 key, $3 holder, $4 fence, $5 ttl ms, $6 clock
UPDATE racefree_claims AS c SET expires_at = clock.now + $5::bigint
FROM (SELECT COALESCE($6::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
WHERE c.ns = $1 AND c.key = $2 AND c.holder = $3 AND c.fence = $4
  AND c.expires_at > clock.now
RETURNING c.holder, c.fence, c.claimed_at, c.expires_at, c.count, c.first_seen, c.last_seen, clock.now
