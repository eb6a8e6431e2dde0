-- reap_steps: delete up to $1 recovery points that expired at or before
-- the cutoff $2 (now.sql, a constant, so that the expiry index is used).
-- As in reap.sql: oldest first by the index, locked rows skipped (a step
-- being saved again is left alone), the locked rows probed by ctid, and
-- the expiry test repeated in the DELETE's own WHERE, the one PostgreSQL
-- re-checks after a row changed under the statement (invariant 10).
-- $1 batch size, $2 cutoff ms
DELETE FROM racefree_idempotency_steps
WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM racefree_idempotency_steps
  WHERE expires_at <= $2::bigint
  ORDER BY expires_at
  LIMIT $1
  FOR UPDATE SKIP LOCKED
))
AND expires_at <= $2::bigint
