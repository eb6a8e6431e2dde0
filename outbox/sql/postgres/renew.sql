-- renew: the heartbeat. Extend to now + $4 ms the leases of the tenures
-- (id, fence) that are current and still live; a lease that lapsed is not
-- revived, even if nobody took it over: its holder learns it lost it.
-- $1 tenant, $2 ids, $3 fences, $4 lease ms, $5 clock
WITH clock AS MATERIALIZED (
  SELECT COALESCE($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
)
UPDATE racefree_outbox AS m
   SET available_at = (SELECT now FROM clock) + $4::bigint
  FROM unnest($2::bigint[], $3::bigint[]) AS d(id, fence)
 WHERE m.tenant = $1 AND m.id = d.id AND m.fence = d.fence AND m.state = 'leased'
   AND m.available_at > (SELECT now FROM clock)
RETURNING m.id, m.fence, m.available_at
