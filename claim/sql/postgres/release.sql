-- release: end the tenure of (holder, fence) now, so the key is free at
-- once. Releasing a claim that already lapsed without being taken over is a
-- no-op that still matches, which makes a retried release succeed.
--
-- NULLs: a row written before migration 002 has a NULL fence, and
-- c.fence = $5 is then not true: nobody's release matches it (IS NOT
-- DISTINCT FROM would say the same: $5 is never NULL). A COALESCE that
-- let a NULL fence match would "release" a tenure that was never issued.
-- $1 tenant, $2 ns, $3 key, $4 holder, $5 fence, $6 clock
UPDATE racefree_claims AS c SET expires_at = LEAST(c.expires_at, clock.now)
FROM (SELECT COALESCE($6::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
WHERE c.tenant = $1 AND c.ns = $2 AND c.key = $3 AND c.holder = $4 AND c.fence = $5
