-- get: the claim's current state, and the clock it was read at.
-- $1 ns, $2 key, $3 clock
SELECT holder, fence, claimed_at, expires_at, count, first_seen, last_seen, COALESCE($3::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
FROM racefree_claims WHERE ns = $1 AND key = $2
