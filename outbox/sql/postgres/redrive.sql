-- redrive: make the dead messages matching the filter ready now, with a
-- full set of attempts. Only dead messages: a ready, leased or delivered
-- one is left as it is. Their history stays (it is keyed by fence, which
-- keeps growing).
-- $1 tenant, $2 ids (empty: any), $3 topic ('': any), $4 key ('': any),
-- $5 clock
WITH clock AS MATERIALIZED (
  SELECT COALESCE($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
)
UPDATE racefree_outbox AS m
   SET state = 'ready', attempts = 0, available_at = (SELECT now FROM clock)
 WHERE m.tenant = $1 AND m.state = 'dead'
   AND (cardinality($2::bigint[]) = 0 OR m.id = ANY ($2::bigint[]))
   AND ($3 = '' OR m.topic = $3)
   AND ($4 = '' OR m.key = $4)
RETURNING m.id
