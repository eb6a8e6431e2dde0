-- reap_steps: delete up to $2 of tenant $1's recovery points that expired
-- at or before the cutoff $3 (now.sql, a constant, so that the
-- (tenant, expires_at) index is used).
-- As in reap.sql: oldest first by the index, locked rows skipped (a step
-- being saved again is left alone), the locked rows probed by ctid, and
-- the expiry test repeated in the DELETE's own WHERE, the one PostgreSQL
-- re-checks after a row changed under the statement (invariant 10).
-- $1 tenant, $2 batch size, $3 cutoff ms
DELETE FROM racefree_idempotency_steps
WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM racefree_idempotency_steps
  WHERE tenant = $1 AND expires_at <= $3::bigint
  ORDER BY expires_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
))
AND tenant = $1 AND expires_at <= $3::bigint
