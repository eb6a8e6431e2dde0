-- refund_sliding: give $4 units back to the sliding-window counter of
-- ($1 tenant, $2 scope, $3 key), $5 the window length in ms, $6 the clock
-- (NULL: clock_timestamp(), read once in the CTE). Only a charge of the
-- current window can be refunded (tat is its start): a row of an earlier
-- window has moved its count into the previous window's, which is
-- history. The window test sits in the UPDATE's own WHERE, re-checked on
-- the locked row version (invariant 10). used never goes below 0, so a
-- refund never raises the remainder above the limit. No row returned when
-- there is nothing to refund.
WITH clock AS (SELECT COALESCE($6::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now)
UPDATE racefree_quotas AS q
SET used = GREATEST(q.used - $4::bigint, 0)
FROM clock
WHERE q.tenant = $1 AND q.scope = $2 AND q.key = $3 AND q.kind = 'sliding_window'
  AND q.tat = clock.now - clock.now % $5::bigint
RETURNING q.tat, q.used, q.prev, clock.now
