-- release: end the tenure of (holder, fence) now, so the key is free at
-- once. Releasing a claim that already lapsed without being taken over is a
-- no-op that still matches, which makes a retried release succeed.
-- $1 ns, $2 key, $3 holder, $4 fence, $5 clock
UPDATE racefree_claims AS c SET expires_at = LEAST(c.expires_at, clock.now)
FROM (SELECT COALESCE($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
WHERE c.ns = $1 AND c.key = $2 AND c.holder = $3 AND c.fence = $4
