-- fail: end the tenure (id, fence) with a failure. The message dies when
-- the failure is permanent ($4) or it has no attempt left; otherwise it is
-- ready again in $5 ms. Either way the lease ends now: a dead message
-- holds nothing until its lease would have lapsed.
-- $1 tenant, $2 id, $3 fence, $4 permanent, $5 delay ms, $6 error, $7 clock
WITH clock AS MATERIALIZED (
  SELECT COALESCE($7::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
)
UPDATE racefree_outbox AS m
   SET state        = CASE WHEN $4::boolean OR m.attempts >= m.max_attempts THEN 'dead' ELSE 'ready' END,
       available_at = (SELECT now FROM clock)
                      + CASE WHEN $4::boolean OR m.attempts >= m.max_attempts THEN 0 ELSE $5::bigint END,
       leased_by    = '',
       last_error   = $6
 WHERE m.tenant = $1 AND m.id = $2 AND m.fence = $3 AND m.state = 'leased'
RETURNING m.state, m.available_at, (SELECT now FROM clock)
