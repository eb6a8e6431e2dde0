-- record_attempt: add a failed tenure to the message's history.
-- ?1 tenant, ?2 message id, ?3 fence, ?4 attempt, ?5 worker, ?6 at,
-- ?7 outcome, ?8 error
INSERT INTO racefree_outbox_attempts (tenant, message_id, fence, attempt, worker, at, outcome, error)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
ON CONFLICT (tenant, message_id, fence) DO NOTHING
