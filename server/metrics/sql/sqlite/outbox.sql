-- outbox: the figures /metrics shows of one tenant's outbox, read at
-- scrape time: how many messages are ready, leased and dead, how many
-- are due now (ready and available, or leased and lapsed: what a relay
-- would claim), the earliest time a pending message is or was due, and
-- now. Each count reads through the partial index of its state and stops
-- at ?3 rows, so that a huge backlog costs no more than ?3 index entries;
-- the earliest due time is the first entry of racefree_outbox_due.
-- ?1 tenant, ?2 clock (NULL: the process clock), ?3 the count's bound
SELECT
  (SELECT count(*) FROM (SELECT 1 FROM racefree_outbox WHERE tenant = ?1 AND state IN ('ready', 'leased')
                         AND state = 'ready' LIMIT ?3)),
  (SELECT count(*) FROM (SELECT 1 FROM racefree_outbox WHERE tenant = ?1 AND state IN ('ready', 'leased')
                         AND state = 'leased' LIMIT ?3)),
  (SELECT count(*) FROM (SELECT 1 FROM racefree_outbox WHERE tenant = ?1 AND state IN ('ready', 'leased')
                         AND available_at <= now LIMIT ?3)),
  (SELECT min(available_at) FROM racefree_outbox WHERE tenant = ?1 AND state IN ('ready', 'leased')),
  (SELECT count(*) FROM (SELECT 1 FROM racefree_outbox WHERE tenant = ?1 AND state = 'dead' LIMIT ?3)),
  now
FROM (SELECT COALESCE(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now)
