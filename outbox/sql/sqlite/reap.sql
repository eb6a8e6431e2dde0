-- reap: delete at most ?3 messages delivered at or before the cutoff ?2,
-- oldest first. Only delivered messages: pending and dead ones are never
-- reaped.
-- ?1 tenant, ?2 cutoff ms, ?3 limit
DELETE FROM racefree_outbox
 WHERE id IN (
         SELECT id FROM racefree_outbox
          WHERE tenant = ?1 AND state = 'delivered' AND available_at <= ?2
          ORDER BY available_at
          LIMIT ?3)
   AND tenant = ?1 AND state = 'delivered'
