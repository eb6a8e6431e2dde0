-- refund_gcra: give $3 units back to the GCRA counter of ($1 scope, $2 key),
-- $4 the emission interval T in ms, $5 the clock (NULL: clock_timestamp(),
-- read once in the CTE). Moving tat back by n*T refills n units; it never
-- goes below now, which is a full bucket, so a refund never raises the
-- counter above the burst. The row is found by its key alone: the new tat
-- is computed from the row version the UPDATE locked. A key with no row is
-- already full: nothing to do, no row returned.
WITH clock AS (SELECT COALESCE($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now)
UPDATE racefree_quotas AS q
SET tat        = GREATEST(q.tat - $3::bigint * $4::bigint, clock.now),
    expires_at = GREATEST(q.tat - $3::bigint * $4::bigint, clock.now)
FROM clock
WHERE q.scope = $1 AND q.key = $2 AND q.kind = 'gcra'
RETURNING q.tat, q.used, clock.now
