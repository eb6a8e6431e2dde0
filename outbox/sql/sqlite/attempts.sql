-- attempts: the recorded failed tenures of a message, oldest first.
-- ?1 tenant, ?2 message id
SELECT fence, attempt, worker, at, outcome, error
  FROM racefree_outbox_attempts
 WHERE tenant = ?1 AND message_id = ?2
 ORDER BY fence
