-- reap: delete up to $1 records that expired at or before the cutoff $2
-- (now.sql, a constant, so that the expiry index is used).
-- The subquery takes the oldest expired rows in index order and locks
-- them, skipping rows that another transaction holds: a record being
-- restarted by begin.sql is left alone, not waited for. The DELETE probes
-- the rows it locked by their ctid (a TID scan, cheaper than a primary
-- key descent per row; a locked row cannot move) and repeats the expiry
-- test in its own WHERE, the only one PostgreSQL re-checks at READ
-- COMMITTED when a row changed under the statement (invariant 10).
-- $1 batch size, $2 cutoff ms
DELETE FROM racefree_idempotency
WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM racefree_idempotency
  WHERE expires_at <= $2::bigint
  ORDER BY expires_at
  LIMIT $1
  FOR UPDATE SKIP LOCKED
))
AND expires_at <= $2::bigint
