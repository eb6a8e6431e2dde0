-- reap: delete up to $2 of tenant $1's records that expired at or before
-- the cutoff $3 (now.sql, a constant, so that the (tenant, expires_at)
-- index is used).
-- The subquery takes the oldest expired rows in index order and locks
-- them, skipping rows that another transaction holds: a record being
-- restarted by begin.sql is left alone, not waited for. The DELETE probes
-- the rows it locked by their ctid (a TID scan, cheaper than a primary
-- key descent per row; a locked row cannot move) and repeats the expiry
-- test in its own WHERE, the only one PostgreSQL re-checks at READ
-- COMMITTED when a row changed under the statement (invariant 10).
-- $1 tenant, $2 batch size, $3 cutoff ms
DELETE FROM racefree_idempotency
WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM racefree_idempotency
  WHERE tenant = $1 AND expires_at <= $3::bigint
  ORDER BY expires_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
))
AND tenant = $1 AND expires_at <= $3::bigint
