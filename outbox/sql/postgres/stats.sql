-- stats: the tenant's backlog (ready, of which due now; leased), the age
-- of its oldest pending message, its dead and its delivered messages
-- (until reaped). Each figure is read through the partial index of its
-- state.
-- $1 tenant, $2 clock
WITH clock AS MATERIALIZED (
  SELECT COALESCE($2::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
)
SELECT
  (SELECT count(*) FROM racefree_outbox WHERE tenant = $1 AND state IN ('ready', 'leased') AND state = 'ready'),
  (SELECT count(*) FROM racefree_outbox WHERE tenant = $1 AND state IN ('ready', 'leased') AND state = 'ready'
                                          AND available_at <= (SELECT now FROM clock)),
  (SELECT count(*) FROM racefree_outbox WHERE tenant = $1 AND state IN ('ready', 'leased') AND state = 'leased'),
  (SELECT min(created_at) FROM racefree_outbox WHERE tenant = $1 AND state IN ('ready', 'leased')),
  (SELECT count(*) FROM racefree_outbox WHERE tenant = $1 AND state = 'dead'),
  (SELECT count(*) FROM racefree_outbox WHERE tenant = $1 AND state = 'delivered'),
  (SELECT now FROM clock)
