-- failed: the failure that the tenure (id, fence) recorded, while the
-- message is still where that failure left it (ready again, or dead, at
-- that fence): a Fail retried after its reply was lost finds here that
-- the first one landed. No row: it did not, or the message moved on.
-- $1 tenant, $2 id, $3 fence
SELECT a.outcome, m.available_at
  FROM racefree_outbox AS m
  JOIN racefree_outbox_attempts AS a
    ON a.tenant = m.tenant AND a.message_id = m.id AND a.fence = m.fence
 WHERE m.tenant = $1 AND m.id = $2 AND m.fence = $3
   AND (a.outcome = 'retry' AND m.state = 'ready' OR a.outcome = 'dead' AND m.state = 'dead')
