-- reap: delete up to $1 records that expired at or before the cutoff $2
-- (now.sql, a constant, so that the expiry index is used).
-- The subquery takes the oldest expired rows in index order and locks
-- them, skipping rows that another transaction holds: a record being
-- restarted by begin.sql is left alone, not waited for. The outer WHERE
-- probes by primary key and repeats the expiry test, because at READ
-- COMMITTED a DELETE re-checks only its own WHERE against a row version
-- that changed under it, never the subquery's snapshot (invariant 10).
-- $1 batch size, $2 cutoff ms
DELETE FROM racefree_idempotency AS r
USING (
  SELECT scope, key FROM racefree_idempotency
  WHERE expires_at <= $2::bigint
  ORDER BY expires_at
  LIMIT $1
  FOR UPDATE SKIP LOCKED
) AS expired
WHERE r.scope = expired.scope AND r.key = expired.key AND r.expires_at <= $2::bigint
