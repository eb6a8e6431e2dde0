-- release: end the tenure (id, fence) without a verdict: the message is
-- ready again in $4 ms, its attempts unchanged.
-- $1 tenant, $2 id, $3 fence, $4 delay ms, $5 why, $6 clock
WITH clock AS MATERIALIZED (
  SELECT COALESCE($6::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
)
UPDATE racefree_outbox AS m
   SET state = 'ready', available_at = (SELECT now FROM clock) + $4::bigint, leased_by = '', last_error = $5
 WHERE m.tenant = $1 AND m.id = $2 AND m.fence = $3 AND m.state = 'leased'
