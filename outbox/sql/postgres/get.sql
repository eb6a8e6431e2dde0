-- get: one message.
-- $1 tenant, $2 id
SELECT id, topic, key, ordered, payload, headers, state, created_at, available_at, attempts, max_attempts,
       fence, leased_by, last_error
  FROM racefree_outbox
 WHERE tenant = $1 AND id = $2
