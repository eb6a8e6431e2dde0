-- reap_steps: delete up to $1 recovery points that expired at or before
-- the cutoff $2 (now.sql, a constant, so that the expiry index is used).
-- As in reap.sql: oldest first by the index, locked rows skipped (a step
-- being saved again is left alone), the primary key probed, and the expiry
-- test repeated in the outer WHERE, the one PostgreSQL re-checks after a
-- row changed under the DELETE (invariant 10).
-- $1 batch size, $2 cutoff ms
DELETE FROM racefree_idempotency_steps AS s
USING (
  SELECT scope, key, step FROM racefree_idempotency_steps
  WHERE expires_at <= $2::bigint
  ORDER BY expires_at
  LIMIT $1
  FOR UPDATE SKIP LOCKED
) AS expired
WHERE s.scope = expired.scope AND s.key = expired.key AND s.step = expired.step AND s.expires_at <= $2::bigint
