-- reap_history: delete the history of the messages reap is about to
-- delete, in the same IMMEDIATE transaction (the same batch: the same
-- cutoff, order and limit).
-- ?1 tenant, ?2 cutoff ms, ?3 limit
DELETE FROM racefree_outbox_attempts
 WHERE tenant = ?1
   AND message_id IN (
         SELECT id FROM racefree_outbox
          WHERE tenant = ?1 AND state = 'delivered' AND available_at <= ?2
          ORDER BY available_at
          LIMIT ?3)
