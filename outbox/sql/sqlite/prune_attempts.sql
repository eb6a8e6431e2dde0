-- prune_attempts: keep only the latest ?4 entries of a message's history,
-- in the transaction that added one.
-- ?1 tenant, ?2 message id, ?3 fence just recorded, ?4 history size
DELETE FROM racefree_outbox_attempts
 WHERE tenant = ?1 AND message_id = ?2 AND fence <= ?3 - ?4
