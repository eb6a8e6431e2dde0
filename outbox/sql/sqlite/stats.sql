-- stats: the tenant's backlog (ready, of which due now; leased), the
-- creation time of its oldest pending message, its dead and its delivered
-- messages (until reaped), and now.
-- ?1 tenant, ?2 clock
SELECT
  (SELECT count(*) FROM racefree_outbox WHERE tenant = ?1 AND state IN ('ready', 'leased') AND state = 'ready'),
  (SELECT count(*) FROM racefree_outbox WHERE tenant = ?1 AND state IN ('ready', 'leased') AND state = 'ready'
                                          AND available_at <= now),
  (SELECT count(*) FROM racefree_outbox WHERE tenant = ?1 AND state IN ('ready', 'leased') AND state = 'leased'),
  (SELECT min(created_at) FROM racefree_outbox WHERE tenant = ?1 AND state IN ('ready', 'leased')),
  (SELECT count(*) FROM racefree_outbox WHERE tenant = ?1 AND state = 'dead'),
  (SELECT count(*) FROM racefree_outbox WHERE tenant = ?1 AND state = 'delivered'),
  now
FROM (SELECT COALESCE(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now)
