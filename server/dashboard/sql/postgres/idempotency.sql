-- idempotency: the tenant's requests whose Idempotency-Key is in progress
-- (begun, not completed), oldest first, and the clock. Bounded by the
-- limit. Display only.
-- $1 tenant, $2 clock, $3 limit
WITH c(now) AS (SELECT COALESCE($2::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint))
SELECT scope, key, created_at, c.now
FROM racefree_idempotency, c
WHERE tenant = $1 AND status = 'in_progress'
ORDER BY created_at
LIMIT $3
